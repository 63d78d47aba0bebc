"""The ``%dra`` line magic and the ``%%dra`` cell magic.

Every form goes through :meth:`DraMagics.dra`; the package's own errors stop at this
boundary as one line (:mod:`dra_jupyter.magics.boundary`). The session is the package's
default session (:func:`dra_jupyter.api.default_session`), so ``dra.configure()`` and the
server's environment apply to the magics as to ``dra.request()``.
"""

from __future__ import annotations

import sys
import warnings
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, line_cell_magic, magics_class

from dra_jupyter.errors import (
    ClaimNotFoundError,
    DraJupyterError,
    DraJupyterWarning,
    MagicError,
)
from dra_jupyter.magics.boundary import user_errors
from dra_jupyter.magics.helptext import HELP
from dra_jupyter.magics.parsing import Command, parse_cell_line, parse_line
from dra_jupyter.types import run_of

if TYPE_CHECKING:
    from dra_jupyter.api import Session


def session() -> Session:
    """The package's default session, showing claims as cards (made on first use)."""
    from dra_jupyter.widgets.notebook import notebook_session  # noqa: PLC0415  # widgets on use

    return notebook_session()


@magics_class
class DraMagics(Magics):
    """``%dra`` and ``%%dra``."""

    @line_cell_magic
    def dra(self, line: str, cell: str | None = None) -> Any:
        if cell is not None:
            with user_errors("%%dra", typed=True):
                command = parse_cell_line(line)
            if command.name == "run":  # in a pod (Kubernetes), in the background (one machine)
                with user_errors(command.doing):
                    return session().run(["python", "-c", cell], **command.spec)
            with user_errors(command.doing):
                from dra_jupyter.magics.cell import run_with_claim  # noqa: PLC0415

                run_with_claim(self.shell, session(), command.spec, cell)
            return None
        with user_errors("dra", typed=True):
            command = parse_line(line)
        with user_errors(command.doing):
            return getattr(self, f"_{command.name}")(command)

    dra.__doc__ = HELP

    def _help(self, command: Command) -> None:
        print(HELP)

    def _devices(self, command: Command) -> Any:
        if "--table" in command.flags:
            return session().devices()
        from IPython.display import display  # noqa: PLC0415

        from dra_jupyter.widgets import DeviceBoard  # noqa: PLC0415  # ipywidgets: on use

        show: Any = display  # untyped in IPython
        show(DeviceBoard(session()))
        return None

    def _request(self, command: Command) -> Any:
        spec = dict(command.spec)
        apply_env = bool(spec.pop("apply_env", True))
        claim = session().request(apply_env=False, **spec)
        if apply_env and session().backend.capabilities.devices_here:
            claim.notes = claim.apply_env()
            for note in claim.notes:
                print(f"dra: {note}", file=sys.stderr)
        return claim

    def _status(self, command: Command) -> Any:
        from dra_jupyter.magics.reports import status_table  # noqa: PLC0415

        return status_table(session(), all_users="--all" in command.flags)

    def _release(self, command: Command) -> None:
        s = session()
        if "--all" in command.flags:
            if command.args:
                raise MagicError("dra release: give claim names or --all, not both")
            with warnings.catch_warnings(record=True) as kept:  # said as a line of ours
                warnings.simplefilter("always", DraJupyterWarning)
                names = s.release_all()
            if names:
                print(f"dra: released {', '.join(names)}")
            elif any(run_of(r) for r in s.backend.claims()):
                print("dra: released nothing: the claims you hold belong to your runs")
            else:
                print("dra: you hold no claims")
            for warning in kept:
                print(f"dra: {warning.message}", file=sys.stderr)
            return
        if not command.args:
            raise MagicError("dra release: name the claims to release, or pass --all")
        released: list[str] = []
        missing: list[str] = []
        refused: list[str] = []
        for name in command.args:  # each on its own: one refusal must not hide a release
            try:
                s.release(name)
                released.append(name)
            except ClaimNotFoundError:
                missing.append(name)
            except DraJupyterError as err:
                refused.append(f"{name}: {err}")
        if released:
            print(f"dra: released {', '.join(released)}")
        problems = refused + (
            [f"no claim {', '.join(missing)} (already released?)"] if missing else []
        )
        if problems:
            raise MagicError(f"dra release: {'; '.join(problems)}; %dra status lists your claims")

    def _runs(self, command: Command) -> Any:
        """This user's runs as a table (``dra.runs()`` gives the objects)."""
        from dra_jupyter.magics.reports import runs_table  # noqa: PLC0415

        return runs_table(session().runs())

    def _logs(self, command: Command) -> None:
        """A run's output so far, or (``--follow``) as it comes until the run ends."""
        run = session().find_run(command.args[0])
        if "--follow" in command.flags:
            run.logs(follow=True)
        else:
            print(run.logs(), end="")

    def _cancel(self, command: Command) -> None:
        run = session().find_run(command.args[0])
        run.cancel()
        status = run.status
        if status.phase in ("Succeeded", "Failed"):  # it had ended: cancel cleaned it up
            print(f"dra: run {run.name} had {status.phase.lower()}; cleaned up")
            return
        print(
            f"dra: run {run.name} is {status.phase.lower()}"
            + (f" ({status.message})" if status.message and status.phase != "Cancelled" else "")
        )

    def _explain(self, command: Command) -> Any:
        from dra_jupyter.magics.reports import explain_request  # noqa: PLC0415

        return explain_request(session(), command.spec, verbose="--verbose" in command.flags)

    def _env(self, command: Command) -> Any:
        from dra_jupyter.magics.reports import kernel_environment  # noqa: PLC0415

        return kernel_environment(session())

    def _usage(self, command: Command) -> Any:
        """GPU usage as a DataFrame (``dra.usage``), by user unless ``--by`` says."""
        spec = command.spec
        return session().usage(spec.get("since", "7d"), by=spec.get("by", "user"))

    def _yaml(self, command: Command) -> Any:
        from dra_jupyter.magics.reports import claim_yaml  # noqa: PLC0415

        spec = dict(command.spec)
        name = str(spec.pop("name", ""))
        return claim_yaml(session(), spec, name)

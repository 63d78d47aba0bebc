"""The one error hierarchy of dra-jupyter.

Every error a user can cause or meet derives from :class:`DraJupyterError`, and its
message says where (which object, claim, request or field), what is wrong, and what to
do about it. Every backend raises these; the CLI's exit code, the REST API's status and
reason, the hub's spawn error and the magics' one line are decided by the class alone: each
class carries its ``exit_code``, ``http_status`` and ``reason`` (:func:`outcome_of` reads
them by class name, for an error that crossed a process as its name), and nothing else
maps errors (the table below is checked against them by ``tests/test_public.py``)::

                                          CLI exit  REST
    DraJupyterError                       2         503   the base: a failure to do what was asked
    ├── InvalidInputError                 2         400   input that can never be accepted
    │   ├── ObjectError                                    a malformed Kubernetes object or field
    │   ├── SelectorError                                  CEL that does not compile, is too
    │   │                                                  costly, or fails on a device
    │   └── TooCostlyError                                 working out its allocation took
    │                                                      more than the service's budget
    ├── NotFoundError                     2         404   no such claim or kernel (any more)
    │   ├── ClaimNotFoundError
    │   └── KernelNotFoundError
    ├── ForbiddenError                    2         403   another user's claim
    ├── AllocationError                   1         409   no allocation exists now; carries
    │   │                                                  the structured explanation
    │   ├── BusyError                     1         409   the devices are held by others (or
    │   │                                                  the wait in line ran out)
    │   ├── LimitError                    1         409   over the per-user device limit
    │   │   └── KeepRefusedError          1         409   no Keep left while someone waits
    │   └── NeverPossibleError            1         422   could not be met even on idle devices
    ├── UnavailableError                  3         503   something we depend on failed
    │   ├── ClusterError                                   the Kubernetes API server could not
    │   │                                                  be reached, or refused a request
    │   ├── LedgerError                                    the ledger cannot be opened or read
    │   ├── DiscoveryError                                 NVML cannot be used
    │   └── KernelRestartError                             a kernel could not be restarted
    └── MagicError                        2         503   what a %dra line met, as one line

A class without figures of its own has its parent's.

An error names its caller once, as data: its message is written without it, and the
API sets its ``caller`` (``dra.request``, ``dra.run``) with :meth:`DraJupyterError.said_by`
where the call's own words are checked. ``str(err)`` is ``caller: message`` (what the
Python API and the command line show); the REST API and the server's startup report show
``err.message``; the line of a ``%dra`` magic puts the form the user typed in the caller's
place (``dra request gpu=9: ...``). No code reads an error's text to tell who said it.

Warnings: :class:`DraJupyterWarning` (something to know that does not stop the work).

In IPython a ``DraJupyterError`` shows as its text alone (``str``), in red (its
``_render_traceback_``): a user error is not a bug, so no traceback; ``%tb`` afterwards
shows its full traceback (the hook steps aside for IPython's ``%tb``). Anything else keeps
its traceback.
"""

from __future__ import annotations

import reprlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, ClassVar, Protocol, Self

_RED, _RESET = "\x1b[31m", "\x1b[0m"

# The command line's exit codes: what it did, told apart by the error's class
EXIT_OK = 0  # allocated, explained, listed
EXIT_UNSATISFIABLE = 1  # no allocation exists (AllocationError)
EXIT_INVALID = 2  # invalid input, an unknown claim or another user's
EXIT_UNAVAILABLE = 3  # something we depend on failed (UnavailableError)
EXIT_INTERNAL = 4  # an internal error: a bug (not one of these classes)

ECHO_LIMIT = 60  # characters of a user's value that a message echoes


class _Echo(reprlib.Repr):
    """``repr`` in bounded time and length: a few items per container, two levels."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 2
        self.maxlist = self.maxtuple = self.maxset = self.maxdict = 4
        self.maxstring = self.maxother = self.maxlong = ECHO_LIMIT

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 3 * ECHO_LIMIT:  # repr() of a huge int is slow, or refused
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return super().repr_int(x, level)


_ECHO = _Echo()


def shown(value: object, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)`` cut to ``limit`` characters and ``…``, in bounded time: what an error
    message echoes of a user's value (a 10 MB name must not become a 10 MB line).

    >>> shown("x" * 100, 5)
    "'xxxxx…' (100 characters)"
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        head = repr(value[:limit])
        return f"{head[:-1]}…{head[-1]} ({len(value)} characters)"
    text = _ECHO.repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _in_tb_magic() -> bool:
    """Whether IPython's ``%tb`` (``ExecutionMagics.tb``) is what shows the error now."""
    frame: Any = sys._getframe(2)
    for _ in range(30):  # %tb -> showtraceback -> hasattr: a few frames up, bounded
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "tb" and code.co_filename.replace("\\", "/").endswith(
            "IPython/core/magics/execution.py"
        ):
            return True
        frame = frame.f_back
    return False


class DraJupyterError(Exception):
    """Base class of every error raised by dra-jupyter."""

    exit_code: ClassVar[int] = EXIT_INVALID  # the command line's exit code
    http_status: ClassVar[int] = 503  # the REST API's status (and the hub's spawn error's)
    reason: ClassVar[str] = "dra-jupyter unavailable"  # the REST API's reason phrase
    caller = ""  # who was called (``dra.request``): str() puts it before the message

    @property
    def message(self) -> str:
        """What is wrong and what to do, without the caller: what the REST API shows."""
        return super().__str__()

    def said_by(self, caller: str) -> Self:
        """This error, as ``caller``'s (``dra.request``, or a magic's ``dra request``)."""
        self.caller = caller
        return self

    def __str__(self) -> str:
        return f"{self.caller}: {self.message}" if self.caller else self.message

    @property
    def _render_traceback_(self) -> Any:
        """What IPython shows instead of a traceback: the message (see the module doc).
        Absent (an AttributeError, so ``hasattr`` is False) while ``%tb`` shows the error,
        which then prints its full traceback."""
        if _in_tb_magic():
            raise AttributeError("_render_traceback_")
        return lambda: [f"{_RED}{self}{_RESET}"]


class InvalidInputError(DraJupyterError):
    """Input that can never be accepted, whatever the state of the devices."""

    http_status = 400
    reason = "invalid input"


class ObjectError(InvalidInputError):
    """A Kubernetes object, or one of its fields, is malformed or out of limits.

    ``where`` names the object (``ResourceClaim default/nb-7``) and ``field``
    the path inside it (``spec.devices.requests[0].exactly.count``).
    """

    def __init__(self, where: str, field: str, problem: str, remedy: str = "") -> None:
        self.where = where
        self.field = field
        self.problem = problem
        self.remedy = remedy
        text = f"{where}, {field}: {problem}" if field else f"{where}: {problem}"
        if remedy:
            text = f"{text}; {remedy}"
        super().__init__(text)


class SelectorError(InvalidInputError):
    """A CEL selector does not compile, exceeds a limit, or fails on a device."""

    def __init__(self, where: str, problem: str, remedy: str = "") -> None:
        self.where = where
        self.problem = problem
        self.remedy = remedy
        text = f"{where}: {problem}"
        if remedy:
            text = f"{text}; {remedy}"
        super().__init__(text)


class TooCostlyError(InvalidInputError):
    """Working out the allocation of a request took more than the service's budget of CPU
    time per request (its policy's ``request_cpu``): the same request would again, so it is
    refused as it is; simpler selectors or fewer requests may fit."""

    reason = "too costly to allocate"


class NotFoundError(DraJupyterError):
    """A claim or kernel that does not exist (any more)."""

    http_status = 404
    reason = "not found"


class ClaimNotFoundError(NotFoundError):
    """No claim of that name (it may have been released)."""


class KernelNotFoundError(NotFoundError):
    """No kernel of that id runs on this server."""


class ForbiddenError(DraJupyterError):
    """The claim belongs to another user: only its owner (or an admin) may see or release
    it."""

    http_status = 403
    reason = "another user's claim"


class Explained(Protocol):
    """Why no allocation exists, as an :class:`AllocationError` carries it (the allocator's
    :class:`~dra_jupyter.allocator.explain.Explanation` is one): this module sits below
    the allocator, so it names only what its readers use."""

    def summary(self) -> str:
        """The reasons in short, a line each."""

    def to_text(self) -> str:
        """Every stage, for a person."""

    def to_dict(self) -> dict[str, Any]:
        """Every stage, for a program."""


class AllocationError(DraJupyterError):
    """No allocation exists for the claims now; ``explanation`` says why."""

    exit_code = EXIT_UNSATISFIABLE
    http_status = 409
    reason = "busy"

    def __init__(self, message: str, explanation: Explained | None = None) -> None:
        self.explanation = explanation
        super().__init__(message)


class BusyError(AllocationError):
    """The devices that could serve the request are held by others now (or the wait in
    line ran out): it may be met later. Its message advises :data:`PYTHON_WAIT`, which the
    command line says as ``--timeout 10m``."""


PYTHON_WAIT = "pass timeout='10m'"  # how a busy request waits in line, in the API's words


class LimitError(AllocationError):
    """The request would take the user over the per-user device limit."""

    reason = "over the per-user limit"


class KeepRefusedError(LimitError):
    """A Keep of a claim warned for a waiting user, past the Keeps allowed while someone
    waits (``keeps_under_pressure``)."""

    reason = "no Keep left while someone waits"


class NeverPossibleError(AllocationError):
    """The request could not be met even if every device were free."""

    http_status = 422
    reason = "can never be met"


class UnavailableError(DraJupyterError):
    """Something dra-jupyter depends on failed: the cluster, the ledger, NVML, a kernel.
    Not the user's input; trying again (or fixing the named service) may help."""

    exit_code = EXIT_UNAVAILABLE


class ClusterError(UnavailableError):
    """The Kubernetes API server could not be reached or refused a request.

    ``status`` is the HTTP status it answered (0 when it could not be reached).
    """

    def __init__(self, message: str, status: int = 0) -> None:
        self.status = status
        super().__init__(message)


class LedgerError(UnavailableError):
    """The ledger file cannot be opened or is not a dra-jupyter ledger."""


class DiscoveryError(UnavailableError):
    """NVML cannot be used (no driver, no library, no permission)."""


class KernelRestartError(UnavailableError):
    """The kernel manager could not restart a kernel."""


class MagicError(DraJupyterError):
    """What a ``%dra`` line met, as one line prefixed with the form typed: its own usage
    errors, and every other :class:`DraJupyterError` (the original is its ``__cause__``)."""


@contextmanager
def said_by(caller: str) -> Iterator[None]:
    """The package's errors raised inside, as ``caller``'s: around a part whose every
    refusal is the caller's (the checks of its own keywords)."""
    try:
        yield
    except DraJupyterError as err:
        err.said_by(caller)
        raise


def outcome_of(name: str) -> type[DraJupyterError]:
    """The class of an error known by its name only (the service's answer, a spawned
    server's report): that class of this module, else :class:`UnavailableError` (an error
    that is not ours is something that failed)."""
    cls = globals().get(name) if name in __all__ else None
    if isinstance(cls, type) and issubclass(cls, DraJupyterError):
        return cls
    return UnavailableError


class DraJupyterWarning(UserWarning):
    """Something the user should know that does not stop the work (e.g. CUDA already loaded)."""


__all__ = [
    "AllocationError",
    "BusyError",
    "ClaimNotFoundError",
    "ClusterError",
    "DiscoveryError",
    "DraJupyterError",
    "DraJupyterWarning",
    "ForbiddenError",
    "InvalidInputError",
    "KeepRefusedError",
    "KernelNotFoundError",
    "KernelRestartError",
    "LedgerError",
    "LimitError",
    "MagicError",
    "NeverPossibleError",
    "NotFoundError",
    "ObjectError",
    "SelectorError",
    "TooCostlyError",
    "UnavailableError",
]


# --- plain scripts -------------------------------------------------------------------------

_PACKAGE_DIR = __file__.rsplit("/", 1)[0] + "/"


def _script_line(error: DraJupyterError, tb: TracebackType | None) -> str:
    """``train.py:12: ClusterError: dra.run: no kubeconfig: …``: the user's line that
    called us (the innermost frame outside this package), the error's class and its text."""
    where = ""
    while tb is not None:
        code = tb.tb_frame.f_code
        if not code.co_filename.startswith(_PACKAGE_DIR):
            where = f"{code.co_filename}:{tb.tb_lineno}: "
        tb = tb.tb_next
    return f"{where}{type(error).__name__}: {error}"


def _script_hook(
    previous: Callable[[type[BaseException], BaseException, TracebackType | None], Any],
) -> Callable[[type[BaseException], BaseException, TracebackType | None], None]:
    def hook(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        if isinstance(error, DraJupyterError) and not sys.flags.dev_mode:
            sys.stderr.write(_script_line(error, tb) + "\n")
            return
        previous(kind, error, tb)

    hook.dra_jupyter = True  # type: ignore[attr-defined]  # installed once
    return hook


def install_script_hook() -> None:
    """A plain script's uncaught user error (a :class:`DraJupyterError`) ends it with one
    line, as in IPython and the CLI, not a traceback with the chained causes of the
    libraries below; ``python -X dev`` shows the traceback. Anything else keeps its
    traceback. IPython does not use this hook (its ``_render_traceback_`` is above)."""
    if not getattr(sys.excepthook, "dra_jupyter", False):
        sys.excepthook = _script_hook(sys.excepthook)

"""The public surface: ``dra_jupyter.__all__``, what it names is there at run time, and
importing the package stays cheap."""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import subprocess
import sys

import dra_jupyter
from dra_jupyter import claimspec, errors
from dra_jupyter.api import Session
from dra_jupyter.types import runs as runstatus

# Besides the errors (every class of dra_jupyter.errors, checked below): what users call.
PUBLIC = {
    *errors.__all__,
    "Claim",
    "Run",
    "Session",
    "Table",
    "__version__",
    "claim",
    "claims",
    "configure",
    "devices",
    "history",
    "release",
    "release_all",
    "request",
    "run",
    "runs",
    "usage",
    "waiting",
}


def test_all_is_the_public_surface_sorted() -> None:
    assert set(dra_jupyter.__all__) == PUBLIC
    assert dra_jupyter.__all__ == sorted(dra_jupyter.__all__)


def test_every_public_name_is_there_at_run_time() -> None:
    for name in dra_jupyter.__all__:
        assert getattr(dra_jupyter, name) is not None, name
    from dra_jupyter import Claim, Session  # noqa: PLC0415  # what a user types

    assert Claim.__module__ == "dra_jupyter.api"
    assert Session.__module__ == "dra_jupyter.api"
    assert dra_jupyter.Run is runstatus.Run  # what dra.run returns, on whichever backend


def test_no_subpackage_hides_a_function_of_the_package() -> None:
    """Importing ``dra_jupyter.X`` binds ``X`` on the package: no subpackage may be named
    like a public function (``dra.usage`` stays the function once the API has run)."""
    import pkgutil  # noqa: PLC0415

    names = {m.name for m in pkgutil.iter_modules(dra_jupyter.__path__)}
    assert not names & set(dra_jupyter.__all__)
    assert inspect.isfunction(dra_jupyter.usage)


def test_the_keywords_of_request_and_run_are_typed_and_complete() -> None:
    """Editors complete ``gpu=``, ``memory=``, ``same=``: ``dra.request`` and ``dra.run`` take
    their keywords as TypedDicts, which name every keyword the claim and the session know."""
    assert "RequestKeywords" in str(inspect.signature(dra_jupyter.request).parameters["kwargs"])
    assert "RunKeywords" in str(inspect.signature(dra_jupyter.run).parameters["kwargs"])
    assert set(claimspec.DeviceKeywords.__annotations__) == set(claimspec.DEVICE_KEYS)
    assert set(claimspec.ClaimKeywords.__annotations__) == set(claimspec.CLAIM_KEYS)
    session = inspect.signature(Session.request).parameters
    asked = {n for n, p in session.items() if p.kind is p.KEYWORD_ONLY}
    assert set(claimspec.RequestKeywords.__annotations__) == set(claimspec.CLAIM_KEYS) | asked
    run = inspect.signature(Session.run).parameters
    pod = {n for n, p in run.items() if p.kind is p.KEYWORD_ONLY}
    assert set(claimspec.RunKeywords.__annotations__) == set(claimspec.CLAIM_KEYS) | pod


def test_every_error_class_is_public_and_in_the_drawn_tree() -> None:
    classes = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, Exception | Warning)
    }
    assert classes == set(errors.__all__)
    assert classes <= set(dra_jupyter.__all__)
    doc = errors.__doc__ or ""
    assert all(name in doc for name in classes - {"DraJupyterWarning"})
    for name in classes - {"DraJupyterWarning", "DraJupyterError"}:
        assert issubclass(getattr(errors, name), errors.DraJupyterError), name


def test_the_drawn_tree_gives_each_class_its_exit_code_and_status() -> None:
    """The table of the errors' docstring is what the classes carry: the CLI, the REST API
    and the hub read ``exit_code``, ``http_status`` and ``reason`` from the class alone."""
    rows = re.findall(r"^[ │├└─]*(\w+Error)\s+(\d)\s+(\d{3})\b", errors.__doc__ or "", re.M)
    drawn = {name: (int(code), int(status)) for name, code, status in rows}
    assert len(drawn) >= 10, drawn
    for name, (code, status) in drawn.items():
        cls = getattr(errors, name)
        assert (cls.exit_code, cls.http_status) == (code, status), name
    for name in errors.__all__:
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, errors.DraJupyterError) and name not in drawn:
            parent: type[errors.DraJupyterError] = cls.__mro__[1]  # unfigured: its parent's
            assert (cls.exit_code, cls.http_status) == (parent.exit_code, parent.http_status)
    assert errors.outcome_of("NeverPossibleError") is errors.NeverPossibleError
    assert errors.outcome_of("KeyError") is errors.UnavailableError  # not ours: a failure
    assert errors.outcome_of("__builtins__") is errors.UnavailableError


def test_the_version_is_the_installed_distributions() -> None:
    assert dra_jupyter.__version__ == importlib.metadata.version("dra-jupyter")


def test_importing_the_package_loads_no_backend_widget_or_client() -> None:
    code = (
        "import sys, dra_jupyter\n"
        "heavy = ['dra_jupyter.api', 'dra_jupyter.local', 'dra_jupyter.kube', 'kubernetes',\n"
        "         'IPython', 'ipywidgets', 'pandas', 'pynvml', 'tornado', 'sqlite3']\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"

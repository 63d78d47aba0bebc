"""The extension's configuration: the backend and the server id are validated."""

from __future__ import annotations

import pytest
from traitlets import TraitError

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.server.app import DRAExtensionApp
from dra_jupyter.settings import default_server_id


def test_backend_is_local_or_kubernetes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DRA_JUPYTER_BACKEND", raising=False)
    app = DRAExtensionApp()
    assert app.backend == "local"
    app.backend = "kubernetes"
    with pytest.raises(TraitError, match="kubernetes"):
        app.backend = "slurm"


def test_the_backend_defaults_to_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRA_JUPYTER_BACKEND", "kubernetes")
    assert DRAExtensionApp().backend == "kubernetes"
    monkeypatch.setenv("DRA_JUPYTER_BACKEND", "auto")  # not in a pod here
    assert DRAExtensionApp().backend == "local"


def test_the_server_id_is_the_host_name_as_a_label(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DRA_JUPYTER_SERVER_ID", raising=False)
    assert DRAExtensionApp().server_id == default_server_id()
    assert default_server_id("Jupyter-Alice.example.com") == "jupyter-alice-example-com"
    assert default_server_id("x" * 70) == "x" * 63
    assert default_server_id("---") == "jupyter"
    monkeypatch.setenv("DRA_JUPYTER_SERVER_ID", "nb-7")
    assert DRAExtensionApp().server_id == "nb-7"
    with pytest.raises(InvalidInputError, match=r"server_id='a b' is not a Kubernetes label"):
        DRAExtensionApp(server_id="a b")


def test_reclaim_under_pressure_defaults_to_the_environments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("RECLAIM", "RECLAIM_GRACE", "KEEPS_UNDER_PRESSURE", "RECLAIM_IDLE"):
        monkeypatch.delenv(f"DRA_JUPYTER_{name}", raising=False)
    app = DRAExtensionApp()
    assert (app.reclaim, app.reclaim_grace, app.keeps_under_pressure, app.reclaim_idle) == (
        True,
        300,
        1,
        600,
    )
    monkeypatch.setenv("DRA_JUPYTER_RECLAIM_GRACE", "30")
    monkeypatch.setenv("DRA_JUPYTER_KEEPS_UNDER_PRESSURE", "0")
    app = DRAExtensionApp()
    assert (app.reclaim_grace, app.keeps_under_pressure) == (30, 0)

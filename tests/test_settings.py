"""Settings from the environment: the backend (``local``, ``kubernetes``, ``auto``: kubernetes
in a pod with a service account), the namespace, the image and the API server retries."""

from __future__ import annotations

from pathlib import Path

import pytest

import dra_jupyter as dra
from dra_jupyter.api import Session
from dra_jupyter.backends import in_pod, reclaim_settings, resolve_backend
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.settings import Settings
from dra_jupyter.sharing.reclaim import ReclaimSettings


def test_defaults_keep_the_local_backend() -> None:
    settings = Settings.from_env({})
    assert settings.backend == "local"
    assert settings.namespace == ""
    assert settings.image == ""
    assert (settings.kube_retries, settings.kube_backoff) == (4, 0.5)
    assert resolve_backend(settings) == "local"


def test_kubernetes_settings_are_read() -> None:
    settings = Settings.from_env(
        {
            "DRA_JUPYTER_BACKEND": "kubernetes",
            "DRA_JUPYTER_NAMESPACE": "team-a",
            "DRA_JUPYTER_IMAGE": "python:3.12",
            "DRA_JUPYTER_KUBE_RETRIES": "2",
            "DRA_JUPYTER_KUBE_BACKOFF": "0.01",
        }
    )
    assert settings.backend == "kubernetes"
    assert settings.namespace == "team-a"
    assert settings.image == "python:3.12"
    assert (settings.kube_retries, settings.kube_backoff) == (2, 0.01)


def test_reclaim_under_pressure_has_the_services_names_and_defaults() -> None:
    assert reclaim_settings(Settings.from_env({})) == ReclaimSettings()
    settings = Settings.from_env(
        {
            "DRA_JUPYTER_RECLAIM_GRACE": "30",
            "DRA_JUPYTER_KEEPS_UNDER_PRESSURE": "2",
            "DRA_JUPYTER_RECLAIM_IDLE": "60",
        }
    )
    assert reclaim_settings(settings) == ReclaimSettings(grace=30, keeps=2, idle_after=60)
    assert reclaim_settings(Settings.from_env({"DRA_JUPYTER_RECLAIM": "0"})) is None


def test_the_health_grace_is_read() -> None:
    assert Settings.from_env({}).health_grace == 300
    assert Settings.from_env({"DRA_JUPYTER_HEALTH_GRACE": "0"}).health_grace == 0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DRA_JUPYTER_BACKEND": "slurm"}, "DRA_JUPYTER_BACKEND='slurm' is not known; use local"),
        ({"DRA_JUPYTER_KUBE_RETRIES": "0"}, "DRA_JUPYTER_KUBE_RETRIES must be a whole number"),
        ({"DRA_JUPYTER_KUBE_BACKOFF": "soon"}, "DRA_JUPYTER_KUBE_BACKOFF must be a number"),
        ({"DRA_JUPYTER_HEALTH_GRACE": "-1"}, "DRA_JUPYTER_HEALTH_GRACE must be a number of sec"),
        ({"DRA_JUPYTER_RECLAIM": "maybe"}, "DRA_JUPYTER_RECLAIM='maybe' is not known; use 1"),
        ({"DRA_JUPYTER_RECLAIM_GRACE": "-5"}, "DRA_JUPYTER_RECLAIM_GRACE must be a number of se"),
        # NaN and the infinities are no number: before, nan crashed every command
        ({"DRA_JUPYTER_KEEPS_UNDER_PRESSURE": "nan"}, "KEEPS_UNDER_PRESSURE must be a number"),
        ({"DRA_JUPYTER_KEEPS_UNDER_PRESSURE": "1e400"}, "KEEPS_UNDER_PRESSURE must be a number"),
        ({"DRA_JUPYTER_RECLAIM_IDLE": "inf"}, "DRA_JUPYTER_RECLAIM_IDLE must be a number of sec"),
        ({"DRA_JUPYTER_POLL_INTERVAL": "inf"}, "DRA_JUPYTER_POLL_INTERVAL must be a number of s"),
        ({"DRA_JUPYTER_POLL_INTERVAL": "-1"}, "DRA_JUPYTER_POLL_INTERVAL must be a number of s"),
        ({"DRA_JUPYTER_KEEPS_UNDER_PRESSURE": "1.5"}, "must be a whole number, 0 or more"),
    ],
)
def test_bad_values_are_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Settings.from_env(env)


def test_auto_is_kubernetes_only_in_a_pod_with_a_service_account(tmp_path: Path) -> None:
    auto = Settings.from_env({"DRA_JUPYTER_BACKEND": "auto"})
    assert not in_pod(tmp_path)
    assert resolve_backend(auto, tmp_path) == "local"
    (tmp_path / "token").write_text("t")
    assert resolve_backend(auto, tmp_path) == "local"  # the namespace file is missing
    (tmp_path / "namespace").write_text("team-a")
    assert in_pod(tmp_path)
    assert resolve_backend(auto, tmp_path) == "kubernetes"


def test_local_claims_stay_in_namespace_default(tmp_path: Path) -> None:
    session = Session(Settings(ledger=tmp_path / "ledger.sqlite", inventory="h200-8x"))
    assert isinstance(session.backend, LocalBackend)
    assert session.namespace == "default"
    assert session.build({"gpu": 1}, "nb-1")["metadata"]["namespace"] == "default"


def test_configure_checks_the_backend_name() -> None:
    with pytest.raises(InvalidInputError, match="backend 'k8s' is not known"):
        dra.configure(backend="k8s")


def test_rerun_releases_is_on_by_default_and_can_be_turned_off() -> None:
    assert Settings.from_env({}).rerun_releases is True
    assert Settings.from_env({"DRA_JUPYTER_RERUN_RELEASES": "0"}).rerun_releases is False
    assert Settings.from_env({"DRA_JUPYTER_RERUN_RELEASES": "yes"}).rerun_releases is True
    with pytest.raises(InvalidInputError, match="DRA_JUPYTER_RERUN_RELEASES='maybe'"):
        Settings.from_env({"DRA_JUPYTER_RERUN_RELEASES": "maybe"})

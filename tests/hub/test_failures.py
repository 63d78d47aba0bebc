"""A refusal of ours reaches JupyterHub as a clean spawn failure: a SpawnException (so no
traceback is logged and the REST API answers with its status, not 500) whose one line is
what the spawn page and the progress stream show."""

from __future__ import annotations

from jupyterhub.spawner import SpawnException
from jupyterhub.utils import format_exception
from tornado import web

from dra_jupyter.hub.failures import SpawnFailure
from dra_jupyter.hub.kubespawner import SpawnDevicesError


def test_the_spawn_page_shows_the_one_line() -> None:
    failure = SpawnFailure(
        "user bob: limit 2 GPUs (default), holds 2; the request needs 1 more",
        reason="devices",
        status_code=409,
    )
    assert isinstance(failure, SpawnException) and isinstance(failure, web.HTTPError)
    assert failure.status_code == 409
    # what JupyterHub's progress stream and spawn page read (not "409 SpawnException(...)")
    assert format_exception(failure) == (
        "user bob: limit 2 GPUs (default), holds 2; the request needs 1 more",
        None,
    )


def test_a_device_failure_of_kubespawner_is_a_clean_failure_too() -> None:
    failure = SpawnDevicesError("spawn alice: no devices for gpu=9", "<b>why</b>")
    assert isinstance(failure, SpawnException)
    assert failure.status_code == 409  # an allocation error's, as the REST API answers
    assert format_exception(failure) == ("spawn alice: no devices for gpu=9", "<b>why</b>")
    assert SpawnDevicesError("spawn alice: bad option", status=400).status_code == 400

"""A kernel's question, whether its request could be met (:func:`dra_jupyter.api.asked.asked`),
on the simulated H200s: the line that says why one never can is worked out only for a caller
that asks for it (the Jupyter server leaves it to the kernel)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_jupyter.allocator import Allocator
from dra_jupyter.api import Session
from dra_jupyter.api import session as session_module
from dra_jupyter.api.asked import asked
from dra_jupyter.settings import Settings


@pytest.fixture
def session(tmp_path: Path) -> Session:
    return Session(Settings(ledger=tmp_path / "l.sqlite", inventory="h200-8x"))


def test_a_request_that_fits_is_answered_with_the_classes(session: Session) -> None:
    for never in (True, False):
        classes, why = asked(session, {"gpu": 2}, "", never=never)
        assert classes and all(isinstance(c, str) for c in classes)
        assert why == ""


def test_why_a_request_never_fits_is_said_when_asked_for(session: Session) -> None:
    classes, why = asked(session, {"gpu": 1, "memory": "500Gi"}, "")
    assert classes is None
    assert why.startswith("no device with memory >= 500Gi; the largest is 140.4Gi")


def test_nothing_is_worked_out_to_say_why_for_a_caller_that_does_not_ask(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explained(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("worked out why, for nobody")

    monkeypatch.setattr(Allocator, "explain", explained)
    monkeypatch.setattr(session_module, "impossible_hint", explained)
    assert asked(session, {"gpu": 1, "memory": "500Gi"}, "", never=False) == (None, "")
    assert asked(session, {"gpu": 9}, "", never=False) == (None, "")
    assert asked(session, {"gpus": 1}, "", never=False) == (None, "")  # a wrong keyword

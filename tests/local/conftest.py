"""Fixtures of the ledger's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.local.worker import WorkerProcess


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    """Started workers, killed (if still running) and reaped at the end of the test."""
    started: list[WorkerProcess] = []
    try:
        yield started
    finally:
        for w in started:
            w.close()

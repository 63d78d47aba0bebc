"""The fixture of tests/metrics's modules that read real processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def child() -> Iterator[int]:
    """The pid of a real process (a sleeping Python), as a kernel on a GPU would be."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()

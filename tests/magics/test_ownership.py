"""Which claims are "this kernel's": in a kernel started by a server with the extension
(``DRA_JUPYTER_KERNEL_ID`` set), next to a claim of another process of the same user."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from dra_jupyter.api import Claim, Session
from dra_jupyter.settings import Settings
from dra_jupyter.types import Owner
from tests.magics.conftest import Kernel, kernel_fixture

KERNEL_ID = "5f1e7c2a-0000-4000-8000-00000000abcd"
module_kernel = kernel_fixture("h200-8x", kernel_id=KERNEL_ID)


@pytest.fixture
def other_claim(kernel: Kernel) -> Iterator[Claim]:
    """A claim of this test process (another process than the kernel, same user)."""
    session = Session(
        Settings(ledger=kernel.ledger_path, inventory="h200-8x"), owner=Owner.current()
    )
    claim = session.request(gpu=3, apply_env=False, name="elsewhere")
    try:
        yield claim
    finally:
        claim.release()


def test_status_tells_this_kernels_claims_from_others(kernel: Kernel, other_claim: Claim) -> None:
    kernel.ok("c = %dra request gpu=1 name=mine")
    text = kernel.ok("%dra status").result
    title, header, first, second = text.splitlines()
    assert title.endswith(f"; this is kernel {KERNEL_ID[:8]}")  # short, as the board shows it
    assert header.split() == ["claim", "devices", "state", "holder", "lease_left", "idle_release"]
    assert first.startswith("mine ")
    # a kernel id but no idle timeout from a server: it goes with the kernel
    assert "this kernel" in first and "when this kernel shuts down" in first
    assert second.startswith("elsewhere ")
    assert f"pid {os.getpid()} on {socket.gethostname()}" in second
    assert "when its process exits" in second


def test_env_has_only_this_kernels_devices(kernel: Kernel, other_claim: Claim) -> None:
    kernel.ok("c = %dra request gpu=1 name=mine")
    text = kernel.ok("%dra env").result
    assert text.splitlines()[-1] == "# from claims mine"
    env = kernel.ok(
        "e = %dra env\nprint(e['CUDA_VISIBLE_DEVICES'] == c.env['CUDA_VISIBLE_DEVICES'])"
    )
    assert env.stdout.strip() == "True"
    assert other_claim.env["CUDA_VISIBLE_DEVICES"] not in text


def test_empty_status_and_claims_say_none(kernel: Kernel) -> None:
    """As the command line prints ``(none)``, not a table of headers only."""
    html = kernel.ok("%dra status").results("text/html")
    assert len(html) == 1 and "(none)" in html[0], html
    assert kernel.ok("%dra status").result.splitlines()[-1] == "(none)"
    claims = kernel.ok("import dra_jupyter as dra\ndra.claims()").results("text/html")
    assert len(claims) == 1 and "(none)" in claims[0], claims

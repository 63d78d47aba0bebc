"""``%load_ext dra_jupyter`` defines ``dra`` (unless the name is taken), and inspecting
``%dra`` (Shift-Tab) still shows the magic's help, ``dra`` the package's."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from dra_jupyter.magics.helptext import HELP
from dra_jupyter.magics.inspection import magic_at_cursor
from tests.magics.conftest import TIMEOUT, Kernel, kernel_fixture, plain

module_kernel = kernel_fixture("h200-8x")


def inspect(kernel: Kernel, code: str, cursor: int) -> str:
    msg_id = kernel.client.inspect(code, cursor, detail_level=0)
    reply: dict[str, Any] = kernel.client.get_shell_msg(timeout=TIMEOUT)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["found"], reply["content"]
    return plain(reply["content"]["data"]["text/plain"])


def test_load_ext_defines_dra(kernel: Kernel) -> None:
    # the kernel ran %load_ext dra_jupyter and nothing else: no import
    out = kernel.ok("c = dra.request(gpu=1)\nprint(dra.__name__, c.state)")
    assert out.stdout == "dra_jupyter allocated\n"


def test_shift_tab_on_the_magic_shows_its_help_and_on_dra_the_package(kernel: Kernel) -> None:
    first = HELP.strip().splitlines()[0]
    for code, cursor in (("%dra", 4), ("%dra devices", 2), ("%%dra gpu=1", 5)):
        assert first in inspect(kernel, code, cursor), code
    package = inspect(kernel, "dra.request", 1)
    assert "dra-jupyter: GPUs, MIG slices and TPUs" in package
    assert first not in package


def test_a_name_taken_stays_as_it_was(kernel: Kernel) -> None:
    try:
        kernel.ok("dra = 'mine'\n%reload_ext dra_jupyter")
        assert kernel.ok("print(dra)").stdout == "mine\n"
    finally:
        kernel.ok("import dra_jupyter as dra")


@pytest.mark.pure
def test_magic_at_cursor() -> None:
    assert magic_at_cursor("%dra", 4)
    assert magic_at_cursor("x = %dra status", 6)
    assert magic_at_cursor("%%dra gpu=1\ntrain()", 3)
    assert not magic_at_cursor("dra.request()", 2)
    assert not magic_at_cursor("%dra devices", 9)
    assert not magic_at_cursor("%drain", 3)


def test_no_python_names_where_the_magic_has_nothing_to_offer(kernel: Kernel) -> None:
    """``mig=`` on an inventory without MIG profiles (this one: 8 whole H200s) completes
    nothing, not Python's builtins; Tab leaves the line as it is."""
    for code in ("%dra request mig=", "%dra request gpu=1 bogus="):
        reply = kernel.complete(code)
        assert reply["matches"] == [""], (code, reply["matches"][:5])
        assert reply["cursor_start"] == reply["cursor_end"] == len(code)
    assert kernel.complete("%dra request mo")["matches"] == ["model="]


LOAD_AND_LOOK = """
import sys
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "dra_jupyter")
loaded = "dra_jupyter.api" in sys.modules
from dra_jupyter import api
print(loaded, api._Default.session is None)
"""


def test_load_ext_loads_the_api_so_the_first_tab_does_not() -> None:
    """The first Tab after ``%load_ext`` used to import the API (the allocator, CEL: about
    0.4-2 s) while the user waited for a completion; loading the extension loads it (the
    cell that loads it shows the wait), and still opens no session, ledger or device. In a
    fresh process: this one has imported the API long ago."""
    argv = [sys.executable, "-c", LOAD_AND_LOOK]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"], done.stdout

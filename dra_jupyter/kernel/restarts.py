"""A kernel asks its Jupyter server to restart it with devices (``dra.request(...,
restart=True)``): on Kubernetes in a pod of its own with the claim it describes, elsewhere
with the claims it made in its environment.

The question travels on the kernel's own IOPub channel, as a ``display_data`` whose message
metadata (the message's, not the display's) holds :data:`RESTART_ASKED`: the server
extension follows that channel already (idle release), only the kernel can sign its
messages, and the notebook shows the line the display carries. The cell then waits for
the restart, which ends it: code after the request in the same cell never runs without the
devices. Without a server that acts on it (no dra_jupyter extension) the wait ends with an
error after :data:`WAIT_S`.

jupyter_client interrupts a kernel before it asks it to shut down, and a restart does both:
the wait would end in a ``KeyboardInterrupt`` and the cell in its red traceback, after the
line that said the kernel restarts. Once the shutdown is asked (ipykernel's ``do_shutdown``
sets the shell's ``exit_now``), the process ends quietly instead (:func:`_end_if_shut_down`);
an interrupt of the user's own, which no shutdown follows, stays an interrupt.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any, NoReturn

from dra_jupyter.errors import InvalidInputError, UnavailableError

RESTART_ASKED = "dra_jupyter/restart"  # display_data metadata: what to restart with
WAIT_S = 60.0  # for the server to restart the kernel (it starts at once)
TICK_S = 0.1
SHUTDOWN_WAIT_S = 3.0  # after an interrupt, for the shutdown request that follows a restart's


def ask_restart(kernel_id: str | None, asked: Mapping[str, Any], line: str) -> NoReturn:
    """Ask for the restart, show ``line``, and wait for it (see the module)."""
    shell = _kernel_shell()
    if not kernel_id or shell is None:
        raise InvalidInputError(
            "dra.request(restart=True) restarts this notebook's kernel with the devices, which "
            "needs a kernel started by a Jupyter server with the dra_jupyter extension; here, "
            "request without restart=True"
        )
    # ipykernel's display publisher, as display() sends, with the question in the message's
    # own metadata (not the display's): the server reads that without the content
    sys.stdout.flush()
    pub = shell.display_pub
    content = {"data": {"text/plain": line}, "metadata": {}, "transient": {}}
    msg = pub.session.msg(
        "display_data", content, parent=pub.parent_header, metadata={RESTART_ASKED: dict(asked)}
    )
    pub.session.send(pub.pub_socket, msg, ident=pub.topic)
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline:
            time.sleep(TICK_S)
    except KeyboardInterrupt:
        _end_if_shut_down(shell)
        raise
    raise UnavailableError(
        f"dra.request(restart=True): kernel {kernel_id} was not restarted within {WAIT_S:g} s; "
        "the Jupyter server's log says why (is its dra_jupyter extension enabled?)"
    )


def _end_if_shut_down(shell: Any) -> None:
    """After an interrupt: end this process, with no output, once the server asks the kernel
    to shut down (the restart asked above: see the module); return if it does not ask."""
    deadline = time.monotonic() + SHUTDOWN_WAIT_S
    while time.monotonic() < deadline:
        if getattr(shell, "exit_now", False):
            time.sleep(TICK_S)  # the control thread's shutdown reply goes out first
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        time.sleep(TICK_S)


def in_servers_kernel(kernel_id: str | None) -> bool:
    """Whether this process is a Jupyter kernel that a server with the extension started
    (``kernel_id`` from its environment): where ``restart=True`` works."""
    return bool(kernel_id) and _kernel_shell() is not None


def _kernel_shell() -> Any:
    """IPython's shell when this is a Jupyter kernel's process; else None."""
    try:
        from IPython import get_ipython  # noqa: PLC0415
    except ImportError:
        return None
    shell = get_ipython()
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None

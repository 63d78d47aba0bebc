"""The first process of a kernel pod (``python3 -m dra_jupyter.kube.kernels.boot ARGV...``):
it writes the kernel's connection file, then becomes the kernel.

The Jupyter server's kernel provisioner (:mod:`dra_jupyter.kube.kernels.provisioner`) gives the
kernel its connection (ports, HMAC key) through a Secret that the pod's
``DRA_JUPYTER_CONNECTION`` variable names (``secretKeyRef``: the key is never in the pod's spec,
its annotations or a log) and the pod's IP through the downward API (``DRA_JUPYTER_POD_IP``).
This writes the connection, with the kernel bound to that IP, to a file only its user can read,
takes the variable out of the environment (the kernel's children do not inherit the key), puts
the file's path in place of ``{connection_file}`` in ``ARGV`` and executes it (same process: the
pod ends when the kernel does, with its exit code).
Only the standard library: the pod's image needs Python and the kernel, and this package.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import MutableMapping, Sequence
from pathlib import Path

CONNECTION_ENV = "DRA_JUPYTER_CONNECTION"
POD_IP_ENV = "DRA_JUPYTER_POD_IP"
PLACEHOLDER = "{connection_file}"


def write_connection(environ: MutableMapping[str, str], folder: Path) -> Path:
    """The connection file, from (and out of) ``environ``; its ``ip`` the pod's."""
    try:
        info = json.loads(environ.pop(CONNECTION_ENV))
    except KeyError:
        raise SystemExit(f"kernelboot: {CONNECTION_ENV} is not set; no connection") from None
    except json.JSONDecodeError as error:
        raise SystemExit(f"kernelboot: {CONNECTION_ENV} is not JSON ({error})") from None
    info["ip"] = environ.get(POD_IP_ENV) or "0.0.0.0"  # no IP known: every one
    path = folder / "kernel-connection.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump(info, out)
    return path


def kernel_argv(argv: Sequence[str], connection: Path) -> list[str]:
    return [arg.replace(PLACEHOLDER, str(connection)) for arg in argv]


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        raise SystemExit("usage: python3 -m dra_jupyter.kube.kernels.boot KERNEL-ARGV...")
    folder = Path(tempfile.mkdtemp(prefix="dra-kernel-"))  # 0700, its user's
    command = kernel_argv(args, write_connection(os.environ, folder))
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()

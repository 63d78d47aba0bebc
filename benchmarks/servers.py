"""Real server processes for the benchmarks: a ``jupyter server`` with the extension,
isolated in a temporary folder and listening on 127.0.0.1 only, or any other process that
is ready once a check passes; and what such a process costs (its CPU time).

One place for what bench_load, bench_server, bench_lab and bench_service each did; the
process itself is run by :func:`tests.helpers.running` (which the tests' servers use too):
its output in a log file, ready once a check passes (a process that exits shows the tail
of its log), stopped at the end (terminate, then kill after 30 s).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import Process, running

TOKEN = "bench-token"
HOST = "127.0.0.1"  # loopback only
REPO = Path(__file__).resolve().parent.parent

# Run ``jupyter_server`` under yappi (CPU clock, every thread) and write its statistics
# (pstats format) when the server stops: ``argv[1]`` for the main thread (the event loop),
# ``argv[1]`` + ``.threads`` for the others. They cover the server's whole life, its start
# included: read the subtrees of the request handlers. The rest of argv is the server's.
_PROFILED = """
import atexit, sys, yappi
out = sys.argv.pop(1)
yappi.set_clock_type("cpu")
yappi.start(builtins=False)
def save():
    yappi.stop()
    loop = [t.id for t in yappi.get_thread_stats() if t.name == "_MainThread"]
    others = [t.id for t in yappi.get_thread_stats() if t.name != "_MainThread"]
    yappi.get_func_stats(filter_callback=lambda f: f.ctx_id in loop).save(out, type="pstat")
    yappi.get_func_stats(filter_callback=lambda f: f.ctx_id in others).save(
        out + ".threads", type="pstat"
    )
atexit.register(save)
from jupyter_server.serverapp import main
sys.argv[0] = "jupyter-server"
sys.exit(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, every thread, those ended too) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ns(pid: int) -> tuple[int, int]:
    """CPU nanoseconds the process's main thread (a server's event loop) and its other live
    threads have run (``/proc/PID/task/*/schedstat``: finer than :func:`cpu_seconds`'s
    clock ticks, for the cost of single requests)."""
    main = others = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ns = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that just ended
        if task.name == str(pid):
            main = ns
        else:
            others += ns
    return main, others


def environment(**extra: str) -> dict[str, str]:
    """This process's environment, with the checkout first on PYTHONPATH (the extension and
    benchmarks of this tree, not an installed copy), plus ``extra``."""
    path = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(path)), **extra}


class Server(Process):
    """A ``jupyter server`` with the extension: its process, port and token."""

    port: int
    token: str = TOKEN


@contextmanager
def jupyter_server(
    tmp: Path,
    *,
    ledger: Path,
    inventory: str | Path = "h200-8x",
    name: str = "server",
    options: Sequence[str] = (),
    ready: Callable[[int], bool],
    profile: Path | None = None,
) -> Iterator[Server]:
    """A ``jupyter server`` subprocess with the extension on ``ledger`` and ``inventory``,
    its config, data and runtime folders under ``tmp`` (``name`` keeps several apart);
    ``options`` are more command-line settings (``--DRAExtensionApp.idle_timeout=3``).
    Yields once ``ready(port)`` is true. With ``profile``, the server runs under yappi
    (CPU time of every thread) and its statistics are written there (pstats) at stop."""
    port = free_port()
    env = environment(
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_DATA_DIR=str(tmp / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp / f"runtime-{name}"),
    )
    launch = ["-m", "jupyter_server"] if profile is None else ["-c", _PROFILED, str(profile)]
    argv = [
        sys.executable,
        *launch,
        "--no-browser",
        "--allow-root",  # harmless when not root; containers often run as root
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.ip={HOST}",
        f"--IdentityProvider.token={TOKEN}",
        f"--ServerApp.root_dir={tmp}",
        "--ServerApp.jpserver_extensions=dra_jupyter=True",
        f"--DRAExtensionApp.ledger={ledger}",
        f"--DRAExtensionApp.inventory={inventory}",
        *options,
    ]
    # cwd: `python -m` puts the working folder first on sys.path; the extension must come
    # from the environment's (PYTHONPATH's) dra_jupyter, not from where this was started
    with running(
        argv,
        log=tmp / f"{name}.log",
        ready=lambda: ready(port),
        env=env,
        cwd=tmp,
        wait=60.0 if profile is None else 180.0,  # yappi slows the start several times
        what=f"jupyter server {name}",
    ) as process:
        server = Server(process.proc, process.log)
        server.port = port
        yield server

"""The health watcher: one per machine, it takes a GPU that fails out of service.

A thread waits on NVML's events (``nvmlEventSetWait``, :attr:`HealthWatcher.wait_ms` at a
time, so it stops promptly) and, every :attr:`~HealthWatcher.poll_interval` seconds, reads
the counters (uncorrectable ECC errors, remapped rows, a GPU lost): each signal that calls
for a taint (:mod:`dra_jupyter.model.health`) is written to the ledger at once, the taint
on the GPU and its MIG partitions by the ``health watcher`` and the event with the claims
holding them (:meth:`~dra_jupyter.local.ledger.Ledger.take_out`). Every allocation reads
the ledger's taints, so none hands out that GPU from then on, in any process.

:meth:`HealthWatcher.enforce`, called every second or so by the owner of the watcher,
releases the claims on a GPU tainted ``NoExecute`` once ``grace`` seconds have passed since
the taint (none for a GPU lost: the work on it is gone), with words that name the GPU and
what happened (``gpu-3 was taken out (gpu.nvidia.com/xid=79: the GPU fell off the bus)``),
kept in the ledger's history for the holder to read. An admin's ``untaint`` puts the GPU
back (after a reset or a repair).

Who runs it (one per machine, as NVML's events are the machine's): the service daemon, when
the machine has one (:mod:`dra_jupyter.service.daemon`); on the embedded backend,
``dra-jupyter health --watch`` (a systemd unit, or any process kept running), which takes
an exclusive lock beside the ledger (:func:`lock_for`) so that a second one refuses to start.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from dra_jupyter.errors import UnavailableError
from dra_jupyter.inventory.nvmlhealth import NvmlHealth, Signal
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.model.health import gpu_devices, gpu_name
from dra_jupyter.outofservice import RELEASED, released_words
from dra_jupyter.types import ClaimRecord, DeviceTaint, HealthEvent

log = logging.getLogger("dra_jupyter.health")

FAILED = RELEASED  # the release reason of a claim on a GPU taken out


class HealthWatcher:
    """See the module docstring. ``open_nvml`` opens the NVML seam (a fake in tests);
    ``on_event`` hears each event recorded (in the watcher's thread)."""

    def __init__(
        self,
        backend: LocalBackend,
        open_nvml: Callable[[], NvmlHealth] = NvmlHealth,
        *,
        grace: float = 300.0,
        poll_interval: float = 5.0,
        wait_ms: int = 500,
        on_event: Callable[[HealthEvent], None] | None = None,
    ) -> None:
        self.backend = backend
        self.open_nvml = open_nvml
        self.grace = grace  # seconds a NoExecute taint leaves its holders (0: none)
        self.poll_interval = poll_interval  # seconds between readings of the counters
        self.wait_ms = wait_ms  # milliseconds of each wait for an event
        self.on_event = on_event
        self.nvml: NvmlHealth | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._warned: set[tuple[int, str]] = set()

    # --- the thread ---------------------------------------------------------------------

    def start(self) -> None:
        """Open NVML (its errors are the caller's: :class:`DiscoveryError`) and watch."""
        self.nvml = self.open_nvml()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="dra-jupyter health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None

    def _run(self) -> None:
        assert self.nvml is not None  # set by start() before the thread begins
        nvml, next_poll = self.nvml, 0.0
        while not self._stop.is_set():
            try:
                signals = nvml.wait(self.wait_ms)
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + self.poll_interval
                    signals += nvml.poll()
                self.handle(signals)
            except Exception:  # NVML or the ledger failed: said, and tried again
                log.exception("health watcher: a step failed; trying again in 1 s")
                self._stop.wait(1.0)

    # --- what it does -------------------------------------------------------------------

    def handle(self, signals: list[Signal]) -> list[HealthEvent]:
        """Write what ``signals`` call for: taints and events; warnings are logged once."""
        out = []
        for signal in signals:
            if signal.warning is not None:
                if (signal.minor, signal.warning) not in self._warned:
                    self._warned.add((signal.minor, signal.warning))
                    log.warning("gpu-%d: %s", signal.minor, signal.warning)
                continue
            if signal.taint is None:
                continue
            devices = gpu_devices(self.backend.devices.slices, signal.minor)
            if not devices:
                log.warning(
                    "gpu-%d: %s, but this inventory has no such GPU",
                    signal.minor,
                    signal.taint.text(),
                )
                continue
            event = self.backend.ledger.take_out(devices, signal.taint, self.backend.clock())
            if event is None:
                continue
            held = ", ".join(f"{n} ({u})" for n, u in event.claims) or "no claim"
            log.warning(
                "%s taken out (%s, %s): %s; held by %s",
                gpu_name(event.device),
                f"{event.key}={event.value}",
                event.effect,
                event.meaning,
                held,
            )
            out.append(event)
            if self.on_event is not None:
                self.on_event(event)
        return out

    def enforce(self, now: float | None = None) -> list[tuple[ClaimRecord, str]]:
        """Release the claims on GPUs tainted NoExecute whose grace is over, whoever tainted
        them (:meth:`~dra_jupyter.local.backend.LocalBackend.release_taken_out`; see the
        module docstring); what was released, with the reason."""
        released = self.backend.release_taken_out(self.grace, now)
        for record, reason in released:
            log.warning("claim %s of %s released: %s", record.name, record.owner.user, reason)
        return released

    @staticmethod
    def words(taint: DeviceTaint) -> str:
        """``gpu-3 was taken out (gpu.nvidia.com/xid=79: the GPU fell off the bus)``."""
        return released_words(taint)


@contextlib.contextmanager
def lock_for(ledger: Path) -> Iterator[None]:
    """The machine's one watcher for ``ledger``: an exclusive lock on a file beside it, held
    while the watcher runs; a second watcher is refused in one line."""
    path = Path(f"{ledger}.health.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            raise UnavailableError(
                f"health --watch: a health watcher runs already for {ledger} (pid {holder}); "
                "one per machine is enough"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


class LedgerWatch:
    """A watcher started for a ledger, holding its lock (:func:`watch_ledger`)."""

    def __init__(self, watcher: HealthWatcher, lock: contextlib.ExitStack) -> None:
        self.watcher = watcher
        self._lock = lock

    def enforce(self) -> list[tuple[ClaimRecord, str]]:
        return self.watcher.enforce()

    def stop(self) -> None:
        self.watcher.stop()
        self._lock.close()


def watch_ledger(backend: LocalBackend, grace: float) -> LedgerWatch | None:
    """The watcher of ``backend``'s devices, started, as its ledger's one; None where the
    devices are not read through NVML or another watcher runs for the ledger (said in one
    log line). What a Jupyter server on the embedded backend runs."""
    if backend.devices.source != "nvml":
        return None
    ledger = backend.ledger.path
    lock = contextlib.ExitStack()
    try:
        lock.enter_context(lock_for(ledger))
    except UnavailableError as err:
        log.info("%s; leaving the watching to it", err)
        return None
    watcher = HealthWatcher(backend, grace=grace)
    try:
        watcher.start()
    except Exception:
        lock.close()
        raise
    gpus = len(watcher.nvml.gpus) if watcher.nvml is not None else 0
    log.info("watching the health of %d GPUs for %s", gpus, ledger)
    return LedgerWatch(watcher, lock)

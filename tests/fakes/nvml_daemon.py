"""``python -m tests.fakes.nvml_daemon GPUS WORLD ARGS...``: ``dra-jupyter ARGS`` (the
service) with the fake ``pynvml`` of GPUS captured H200s in place of the real one; the
processes on them are those of the WORLD file, read again at each listing, so a test
changes them while the daemon runs (:func:`tests.fakes.fake_pynvml.write_world`); its health
is that of ``health.json`` beside WORLD (:func:`tests.fakes.fake_pynvml.write_health`: XID
events, ECC counters, remapped rows, lost GPUs), read again at each call."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.fakes.fake_pynvml import FakePynvml


def main(argv: list[str]) -> int:
    gpus, world, *rest = argv
    sys.modules["pynvml"] = FakePynvml(
        gpus=int(gpus), world=Path(world), health=Path(world).parent / "health.json"
    )
    from dra_jupyter.cli.main import main as dra_jupyter  # noqa: PLC0415  # after the fake

    return dra_jupyter(rest)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The ``%dra`` line to a command (in this process: parsing needs no kernel)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.magics.completion import current_word
from dra_jupyter.magics.parsing import Command, parse_cell_line, parse_line


def test_request_values_are_typed() -> None:
    command = parse_line(
        "request gpu=2 memory=80Gi same=pcieRoot timeout=5m lease=1h30m apply_env=no name=train-1"
    )
    assert command == Command(
        "request",
        spec={
            "gpu": 2,
            "memory": "80Gi",
            "same": "pcieRoot",
            "timeout": "5m",
            "lease": "1h30m",
            "apply_env": False,
            "name": "train-1",
        },
    )
    assert parse_line("request gpu=all").spec == {"gpu": "all"}
    assert parse_line("request mig=3g.71gb count=2").spec == {"mig": "3g.71gb", "count": 2}


def test_a_shared_gpus_keywords_reach_the_claim_as_the_api_takes_them() -> None:
    command = parse_line("request gpu=1 share=mps threads=25% pinned_memory=10Gi")
    assert command.spec == {"gpu": 1, "share": "mps", "threads": "25%", "pinned_memory": "10Gi"}
    made = build_claim("c", command.spec, classes=("gpu.nvidia.com",))
    (config,) = made["spec"]["devices"]["config"]
    assert config["opaque"]["parameters"]["sharing"] == {
        "strategy": "MPS",
        "mpsConfig": {
            "defaultActiveThreadPercentage": 25,
            "defaultPinnedDeviceMemoryLimit": "10Gi",
        },
    }
    sliced = parse_line("request share=time-slicing interval=short").spec
    assert sliced == {"share": "time-slicing", "interval": "short"}


def test_quotes_group_words() -> None:
    command = parse_line(
        'explain selector=\'device.attributes["gpu.nvidia.com"].architecture == "Hopper"\' '
        'model="NVIDIA H200" -v'
    )
    assert command.spec == {
        "selector": 'device.attributes["gpu.nvidia.com"].architecture == "Hopper"',
        "model": "NVIDIA H200",
    }
    assert command.flags == {"--verbose"}


def test_alternatives_are_a_python_list() -> None:
    spec = parse_line("""request alternatives="[{'gpu': 1, 'model': 'H200'}, {'gpu': 2}]" """).spec
    assert spec == {"alternatives": [{"gpu": 1, "model": "H200"}, {"gpu": 2}]}


def test_release_names_and_flags() -> None:
    assert parse_line("release a b").args == ["a", "b"]
    assert parse_line("release -a").flags == {"--all"}
    assert parse_line("status --all").flags == {"--all"}
    assert parse_line("devices -t").flags == {"--table"}
    assert parse_line("  ").name == "help"


def test_the_cell_line_takes_keywords_only() -> None:
    assert parse_cell_line("gpu=1 timeout=30s").spec == {"gpu": 1, "timeout": "30s"}
    with pytest.raises(InvalidInputError, match=r"^%%dra: 'request' is not key=value"):
        parse_cell_line("request gpu=1")
    with pytest.raises(InvalidInputError, match=r"^dra request: gpu is given twice$"):
        parse_line("request gpu=1 gpu=2")


def test_current_word_respects_quotes() -> None:
    words, word = current_word("request model='NVIDIA H")
    assert (words, word.text) == (["request"], "model='NVIDIA H")
    words, word = current_word("request gpu=1 ")
    assert (words, word.text) == (["request", "gpu=1"], "")


def test_importing_the_package_loads_no_ipython() -> None:
    code = (
        "import sys, dra_jupyter; "
        "assert callable(dra_jupyter.load_ipython_extension); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('IPython', 'ipywidgets', 'anywidget') or m.startswith('dra_jupyter.magics')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_the_run_cell_form_takes_pod_keywords() -> None:
    command = parse_cell_line("run gpu=2 image=python:3.12 start_timeout=0")
    assert command.name == "run"
    assert command.spec == {"gpu": 2, "image": "python:3.12", "start_timeout": "0"}
    assert command.where == "%%dra run"
    # a background run on one machine: its lease, its machines (a whole number)
    assert parse_cell_line("run gpu=1 lease=1h nodes=1").spec == {
        "gpu": 1,
        "lease": "1h",
        "nodes": 1,
    }
    # a Job on Kubernetes: its pods, its Kueue queue, its retries, followed to its end
    assert parse_cell_line("run gpu=1 nodes=2 queue=team retries=1 wait=true").spec == {
        "gpu": 1,
        "nodes": 2,
        "queue": "team",
        "retries": 1,
        "wait": True,
    }
    # a gang's time to start together, a duration as written
    assert parse_cell_line("run gpu=8 nodes=3 gang_timeout=30m").spec == {
        "gpu": 8,
        "nodes": 3,
        "gang_timeout": "30m",
    }
    with pytest.raises(InvalidInputError, match=r"^%%dra run: retries='x' is not a whole"):
        parse_cell_line("run gpu=1 retries=x")
    with pytest.raises(InvalidInputError, match=r"^%%dra run: wait='maybe' must be true or"):
        parse_cell_line("run gpu=1 wait=maybe")
    with pytest.raises(InvalidInputError, match=r"^%%dra run: unknown keyword 'restart'"):
        parse_cell_line("run gpu=1 restart=true")
    with pytest.raises(InvalidInputError, match=r"^%%dra run: nodes='two' is not a whole"):
        parse_cell_line("run gpu=1 nodes=two")
    with pytest.raises(InvalidInputError, match=r"^dra: run is a cell magic: write %%dra run"):
        parse_line("run gpu=1")
    assert parse_line("logs alice-run-1 -f").args == ["alice-run-1"]
    assert parse_line("logs alice-run-1 -f").flags == {"--follow"}
    assert parse_line("cancel alice-run-1").args == ["alice-run-1"]
    assert parse_line("runs").name == "runs"
    with pytest.raises(InvalidInputError, match=r"^dra cancel: name one run, e.g. %dra cancel"):
        parse_line("cancel")

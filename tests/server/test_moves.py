"""The kernel specs a kernel moves with (dra_jupyter/server/moves.py), and the note a
kernel moved back prints once (dra_jupyter/kernel/notes.py); the moves themselves run on the
real control plane in tests/k8s/test_kernel_moves.py."""

from __future__ import annotations

from typing import Any

import pytest
from jupyter_client.kernelspec import KernelSpec

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.kernel.notes import say_once
from dra_jupyter.server.moves import (
    LOCAL_ARGV,
    PodDevices,
    checked_claim,
    in_pod_spec,
    on_server_spec,
    pod_devices,
)

CPU = KernelSpec(
    argv=["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
    display_name="Python 3",
    language="python",
    interrupt_mode="signal",
    metadata={"debugger": True},
    resource_dir="/k/python3",
)
CLAIM = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}


def test_a_kernel_moves_into_a_pod_with_the_provisioner_and_its_devices() -> None:
    devices = PodDevices(claim=CLAIM, request={"gpu": 2, "model": "H200"})
    moved = in_pod_spec(CPU, devices)
    assert moved.metadata == {
        "debugger": True,
        "kernel_provisioner": {
            "provisioner_name": "dra-kubernetes",
            "config": {"request": {"gpu": 2, "model": "H200"}, "claim": CLAIM},
        },
    }
    assert moved.interrupt_mode == "message"  # no signal reaches another pod
    assert moved.argv == CPU.argv and moved.resource_dir == CPU.resource_dir
    assert CPU.metadata == {"debugger": True}  # a copy: the spec on disk's is untouched
    # a device kernel spec keeps its provisioner's other settings; a new claim replaces
    # the old one, a request alone drops it
    again = in_pod_spec(moved, PodDevices(request={"gpu": 1}))
    assert again.metadata["kernel_provisioner"]["config"] == {"request": {"gpu": 1}}
    timed = KernelSpec(
        argv=CPU.argv,
        metadata={
            "kernel_provisioner": {
                "provisioner_name": "dra-kubernetes",
                "config": {"request": {"gpu": 8}, "start_timeout": 10},
            }
        },
    )
    config = in_pod_spec(timed, devices).metadata["kernel_provisioner"]["config"]
    assert config == {"request": {"gpu": 2, "model": "H200"}, "claim": CLAIM, "start_timeout": 10}


def test_a_kernel_back_on_the_server_runs_the_note_kernel_without_a_provisioner() -> None:
    pod = in_pod_spec(CPU, PodDevices(request={"gpu": 1}))
    back = on_server_spec(pod)
    assert back.argv == LOCAL_ARGV
    assert LOCAL_ARGV[1:3] == ["-m", "dra_jupyter.kernel.notes"]
    assert back.metadata == {"debugger": True}


def test_what_a_user_reads_of_the_devices_and_the_command_to_get_them_again() -> None:
    asked = PodDevices(request={"gpu": 1, "model": "NVIDIA H200"})
    assert asked.said() == "gpu=1, model='NVIDIA H200'"
    assert asked.again() == "dra.request(gpu=1, model='NVIDIA H200', restart=True)"
    from_claim = PodDevices(claim=CLAIM)
    assert (from_claim.said(), from_claim.again()) == ("its claim's devices", "")


class _Provisioner:
    devices_in_pod = True
    request: dict[str, Any] = {"gpu": 1}  # noqa: RUF012
    claim: dict[str, Any] = {}  # noqa: RUF012


def test_only_a_kernel_in_a_pod_has_pod_devices() -> None:
    assert pod_devices(_Provisioner()) == PodDevices(request={"gpu": 1})
    assert pod_devices(object()) is None
    assert pod_devices(None) is None


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("gpu", "is not a claim spec"),
        ({"devices": []}, "is not a claim spec"),
        ({"devices": {"requests": []}}, "requests no devices"),
        ({"devices": {"requests": [{"name": "x" * 70_000}]}}, "is over 64 KiB"),
    ],
)
def test_a_claim_a_kernel_sends_is_checked_before_any_work(spec: Any, says: str) -> None:
    with pytest.raises(InvalidInputError, match=f"^kernel k1: the claim to move with {says}"):
        checked_claim(spec, "kernel k1")
    assert checked_claim(CLAIM, "kernel k1") == CLAIM


class _Events:
    def __init__(self) -> None:
        self.hooks: list[Any] = []

    def register(self, event: str, hook: Any) -> None:
        assert event == "pre_run_cell"
        self.hooks.append(hook)

    def unregister(self, event: str, hook: Any) -> None:
        self.hooks.remove(hook)


class _Shell:
    def __init__(self) -> None:
        self.events = _Events()


def test_the_note_is_printed_before_the_next_cell_once(capsys: pytest.CaptureFixture[str]) -> None:
    shell = _Shell()
    say_once(shell, "dra: released")
    for hook in list(shell.events.hooks):
        hook(None)
    assert capsys.readouterr().out == "dra: released\n"
    assert shell.events.hooks == []


def test_restart_true_outside_a_servers_kernel_says_what_it_needs() -> None:
    from dra_jupyter.kernel.restarts import ask_restart  # noqa: PLC0415

    with pytest.raises(InvalidInputError, match="needs a kernel started by a Jupyter server"):
        ask_restart(None, {"claims": ["c"]}, "restarting")


def test_a_kernel_that_joins_a_claim_moves_into_a_pod_that_uses_it_and_back() -> None:
    """``dra.request(join=...)``: the provisioner's ``join``, which a later move with devices
    of its own drops; the note's command joins it again."""
    joined = in_pod_spec(CPU, PodDevices(join="team-gpu"))
    config = joined.metadata["kernel_provisioner"]["config"]
    assert config == {"request": {}, "join": "team-gpu"}
    assert PodDevices(join="team-gpu").again() == "dra.request(join='team-gpu')"
    assert PodDevices(join="team-gpu").said() == "the shared claim team-gpu"
    own = in_pod_spec(joined, PodDevices(request={"gpu": 1}))
    assert own.metadata["kernel_provisioner"]["config"] == {"request": {"gpu": 1}}

"""Whose is each process on a device: /proc read for a real child process, and the rule."""

from __future__ import annotations

import getpass
import os
import time

from dra_jupyter.metrics.base import DeviceProcess
from dra_jupyter.metrics.processes import Holder, attribute, pids_of, read_process

GPU0, GPU1, GPU2 = "gpu.nvidia.com/n/gpu-0", "gpu.nvidia.com/n/gpu-1", "gpu.nvidia.com/n/gpu-2"


def test_proc_says_parent_owner_command_and_start(child: int) -> None:
    info = read_process(child)
    assert info is not None
    assert (info.pid, info.ppid, info.uid) == (child, os.getpid(), os.getuid())
    assert info.user == getpass.getuser()
    assert "time.sleep(60)" in info.command
    assert info.state in ("R", "S")
    assert info.start is not None and time.time() - 600 < info.start <= time.time() + 1
    assert read_process(2**22 + 7) is None  # no such process


def test_a_process_is_its_holders_then_its_users_then_nobodys(child: int) -> None:
    me = getpass.getuser()
    kernel = Holder("kernel-claim", (GPU0,), os.getpid(), "someone-else")  # an ancestor
    cli = Holder("cli-claim", (GPU0, GPU1), 0, me)  # held by its lease: by user
    other = Holder("other-claim", (GPU2,), 1, "nobody-here")
    gone = 2**22 + 7
    listed = [
        DeviceProcess(GPU0, child, 1.0, memory_used=2**30, utilization=93.0),
        DeviceProcess(GPU1, child, 1.0),
        DeviceProcess(GPU2, child, 1.0),  # on a GPU its user does not hold
        DeviceProcess(GPU0, gone, 1.0),  # exited since NVML listed it
    ]
    uses = attribute(listed, [kernel, cli, other])
    assert [(u.device, u.claim) for u in uses] == [
        (GPU0, "kernel-claim"),
        (GPU1, "cli-claim"),
        (GPU2, None),
        (GPU0, None),
    ]
    first = uses[0]
    assert (first.user, first.uid, first.memory_used, first.utilization) == (
        me,
        os.getuid(),
        2**30,
        93.0,
    )
    assert first.command is not None and "time.sleep" in first.command
    assert uses[3].user is None and uses[3].command is None
    assert pids_of(uses, "kernel-claim") == {child}
    assert set(first.to_dict()) >= {"pid", "user", "command", "memory_used", "since", "claim"}

"""The enforcer's decisions as a table (pure: the signals it would send are recorded; the
service tier sends real ones, tests/service/test_gpus.py), and the [enforce] policy."""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path

import pytest

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.metrics.processes import ProcessUse
from dra_jupyter.service.enforce import EnforcePolicy, Enforcer, over_shares
from dra_jupyter.service.policy import load_policy

DEVICE = "gpu.nvidia.com/n/gpu-0"
TERMINATE = EnforcePolicy(mode="terminate", grace=60, kill_after=10)


def use(pid: int, claim: str | None = None, uid: int | None = 1000) -> ProcessUse:
    return ProcessUse(
        DEVICE, pid, 0.0, "bob", uid, "python train.py", 2**30, 0.0, 100.0 + pid, claim
    )


def run(
    ticks: list[tuple[float, list[ProcessUse]]],
    policy: EnforcePolicy,
    exempt: frozenset[int] = frozenset(),
) -> list[tuple[float, int, str]]:
    sent: list[tuple[float, int, str]] = []
    now = [0.0]

    def send(pid: int, since: float | None, signum: int) -> bool:
        assert since == 100.0 + pid  # the process as NVML listed it, start time included
        sent.append((now[0], pid, signal.Signals(signum).name))
        return True

    enforcer = Enforcer(send)
    for time, uses in ticks:
        now[0] = time
        enforcer.tick(time, uses, policy, lambda u: u.pid in exempt)
    return sent


@pytest.mark.parametrize(
    ("ticks", "policy", "exempt", "sent"),
    [
        # report: never a signal
        ([(0, [use(7)]), (100, [use(7)]), (200, [use(7)])], EnforcePolicy(), (), []),
        # terminate: SIGTERM at the grace, SIGKILL kill_after later, once each
        (
            [
                (0, [use(7)]),
                (59, [use(7)]),
                (60, [use(7)]),
                (65, [use(7)]),
                (70, [use(7)]),
                (99, [use(7)]),
            ],
            TERMINATE,
            (),
            [(60, 7, "SIGTERM"), (70, 7, "SIGKILL")],
        ),
        # it leaves the GPU after SIGTERM: no SIGKILL
        ([(0, [use(7)]), (60, [use(7)]), (61, []), (99, [])], TERMINATE, (), [(60, 7, "SIGTERM")]),
        # a claim's process, one gone from /proc (no uid), an exempt one: left alone
        (
            [
                (0, [use(7, "bob-1"), use(8, uid=None), use(9)]),
                (200, [use(7, "bob-1"), use(8, uid=None), use(9)]),
            ],
            TERMINATE,
            (9,),
            [],
        ),
        # off the GPU and back: its grace starts again
        (
            [(0, [use(7)]), (50, []), (60, [use(7)]), (110, [use(7)]), (120, [use(7)])],
            TERMINATE,
            (),
            [(120, 7, "SIGTERM")],
        ),
    ],
)
def test_what_is_signalled_when(
    ticks: list[tuple[float, list[ProcessUse]]],
    policy: EnforcePolicy,
    exempt: tuple[int, ...],
    sent: list[tuple[float, int, str]],
) -> None:
    assert run(ticks, policy, frozenset(exempt)) == sent


def test_the_status_its_user_is_shown() -> None:
    enforcer = Enforcer(lambda pid, since, signum: True)
    enforcer.tick(0, [use(7)], TERMINATE, lambda u: False)
    status = enforcer.status(7, 107.0, TERMINATE)
    assert status is not None
    assert (status["action"], status["deadline"], status["sigterm"]) == ("terminate", 60, None)
    assert enforcer.status(7, 107.0, EnforcePolicy())["action"] == "report"  # type: ignore[index]
    assert enforcer.status(8, 108.0, TERMINATE) is None


def test_the_enforce_table(tmp_path: Path) -> None:
    path = tmp_path / "service.toml"
    path.write_text(
        '[enforce]\nmode = "terminate"\ngrace = 30\nkill_after = 5\nexempt_users = ["ops"]\n'
    )
    assert load_policy(path).enforce == EnforcePolicy("terminate", 30, 5, frozenset({"ops"}))
    assert load_policy(None).enforce == EnforcePolicy()
    for text, problem in [
        ('[enforce]\nmode = "kill"\n', "mode 'kill'; use report or terminate"),
        ("[enforce]\ngrace = 0\n", "grace must be a positive number"),
        ('[enforce]\nexempt_users = "ops"\n', "exempt_users must be a list"),
        ("[enforce]\nmodes = 1\n", "[enforce]: unknown key 'modes'"),
    ]:
        path.write_text(text)
        with pytest.raises(InvalidInputError, match="service config") as caught:
            load_policy(path)
        assert problem in str(caught.value)


def test_a_share_exceeded_by_its_processes_is_reported() -> None:
    """A claim of a 20 GiB share whose processes hold 30 GiB of that GPU is over its share
    (the driver does not hold a share to its memory); one within it, or another claim's
    process on the same GPU, is not counted."""
    device = "gpu.nvidia.com/n/gpu-0"
    gib = 2**30

    def on(pid: int, claim: str | None, memory: int) -> ProcessUse:
        return dataclasses.replace(use(pid, claim), device=device, memory_used=memory)

    shares = {("big", device): 20 * gib, ("small", device): 20 * gib}
    uses = [on(1, "big", 18 * gib), on(2, "big", 12 * gib), on(3, "small", 10 * gib)]
    uses.append(on(4, None, 50 * gib))  # nobody's: the strays' report, not a share's
    [found] = over_shares(shares, uses)
    assert (found.claim, found.used, found.share) == ("big", 30 * gib, 20 * gib)
    assert found.words() == (
        "over its share: its processes use 30.0 GiB of gpu.nvidia.com/n/gpu-0, its claim "
        "big holds 20.0 GiB of it"
    )
    assert over_shares(shares, uses[2:]) == []

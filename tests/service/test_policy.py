"""The service's policy file: every knob read, every mistake refused in one line that names
the file and the key, and which limit applies to whom (and says where it comes from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.service.policy import MAX_CONFIG, Limit, Policy, load_policy
from dra_jupyter.sharing.reclaim import ReclaimSettings

EVERY_KNOB = """
[service]
ledger = "/srv/dra/ledger.sqlite"
inventory = "h200-8x"
strategy = "first-fit"
admin_groups = ["wheel"]
visibility = "all"
requests_per_second = 50
burst = 10
queue_per_user = 2
connections_per_user = 8
claims_per_user = 16
prometheus_port = 9464
health_grace = 0
health_poll_interval = 2

[limits]
gpus = 4
mig = 7
gpu_share = "150%"
lease_max = "8h"
lease_default = "1h"
wait_max = "30m"
idle = 600

[groups.students]
gpus = 2
lease_max = "2h"
gpu_share = 50

[groups.staff]
gpus = 0

[groups.interns]
gpus = 1

[users.bob]
gpus = 1
idle = "0"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "service.toml"
    path.write_text(text)
    return path


def test_every_knob_is_read(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, EVERY_KNOB))
    assert policy.ledger == Path("/srv/dra/ledger.sqlite")
    assert (policy.inventory, policy.strategy, policy.visibility) == ("h200-8x", "first-fit", "all")
    assert policy.admin_groups == {"wheel"}
    assert policy.prometheus_port == 9464
    assert Policy().prometheus_port == 0  # off unless named
    assert (policy.health_grace, policy.health_poll_interval) == (0, 2)  # 0: release at once
    assert (Policy().health_grace, Policy().health_poll_interval) == (300, 5)
    assert (policy.requests_per_second, policy.burst) == (50, 10)
    assert (policy.queue_per_user, policy.connections_per_user, policy.claims_per_user) == (
        2,
        8,
        16,
    )
    limits = policy.limits("dave", ())
    assert limits.to_dict() == {
        "gpus": {"value": 4, "source": "default"},
        "mig": {"value": 7, "source": "default"},
        "gpu_share": {"value": 150, "source": "default"},
        "lease_max": {"value": 8 * 3600, "source": "default"},
        "lease_default": {"value": 3600, "source": "default"},
        "wait_max": {"value": 1800, "source": "default"},
        "idle": {"value": 600, "source": "default"},
    }


def test_a_user_gets_their_own_limit_else_their_most_generous_group(tmp_path: Path) -> None:
    policy = load_policy(write(tmp_path, EVERY_KNOB))
    assert policy.limits("alice", ("students",)).gpus == Limit(2, "group students")
    assert policy.limits("alice", ("students", "interns")).gpus == Limit(2, "group students")
    assert policy.limits("alice", ("students", "staff")).gpus == Limit(0, "group staff")  # none
    assert policy.limits("alice", ("students",)).lease_max == Limit(7200, "group students")
    assert policy.limits("alice", ("students",)).mig == Limit(7, "default")
    assert policy.limits("alice", ("students",)).gpu_share == Limit(50, "group students")
    assert policy.limits("bob", ("staff",)).gpus == Limit(1, "user bob")  # the user wins
    assert policy.limits("bob", ()).idle == Limit(0, "user bob")


def test_admins_are_root_and_the_admin_groups() -> None:
    policy = Policy(admin_groups=frozenset({"wheel"}))
    assert policy.is_admin(0, ())
    assert policy.is_admin(1000, ("users", "wheel"))
    assert not policy.is_admin(1000, ("users",))


def test_no_file_is_every_default() -> None:
    policy = load_policy(None)
    assert policy.visibility == "own" and policy.admin_groups == frozenset()
    assert all(v["value"] == 0 for v in policy.limits("x", ()).to_dict().values())


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[service\n", "not TOML"),
        ("[servce]\n", "unknown key 'servce'"),
        ("[service]\nvisiblity = 'all'\n", "[service]: unknown key 'visiblity'"),
        ("[service]\nvisibility = 'some'\n", "visibility 'some'; use own or all"),
        ("[service]\nstrategy = 'best'\n", "strategy 'best'"),
        ("[service]\nadmin_groups = 'wheel'\n", "admin_groups must be a list"),
        ("[service]\nburst = -1\n", "burst must be a positive number"),
        ("[service]\nprometheus_port = 70000\n", "prometheus_port 70000; use a port number"),
        ("[service]\nprometheus_port = '9464'\n", "prometheus_port '9464'; use a port"),
        ("[service]\nledger = 3\n", "ledger must be a non-empty string"),
        ("[limits]\ngpus = 1.5\n", "[limits]: gpus must be a whole number"),
        ("[limits]\ngpus = true\n", "gpus must be a whole number"),
        ("[limits]\nlease_max = 'forever'\n", "lease_max: 'forever' is not a duration"),
        ("[limits]\nlease = '1h'\n", "[limits]: unknown key 'lease'"),
        ("[groups.students]\ngpu = 2\n", "[groups.students]: unknown key 'gpu'"),
        ("[groups]\nstudents = 2\n", "'students' must be a table of limits"),
        ("[users.bob]\nmig = -1\n", "[users.bob]: mig must be a whole number"),
        ("[limits]\ngpu_share = 'half'\n", "gpu_share must be a percentage of one GPU"),
        ("[limits]\ngpu_share = -5\n", "gpu_share must be a percentage of one GPU"),
        ("[limits]\ngpu_share = true\n", "gpu_share must be a percentage of one GPU"),
        ("[service]\nrelease_gpu_idle = 'yes'\n", "release_gpu_idle must be true or false"),
        ("[service]\ngpu_active_threshold = 150\n", "gpu_active_threshold must be a percentage"),
        ("[service]\ngpu_window = 0\n", "gpu_window must be a positive number"),
        ("[service]\nreclaim = 'on'\n", "reclaim must be true or false"),
        ("[service]\nreclaim_grace = 0\n", "reclaim_grace must be a positive number"),
        ("[service]\nkeeps_under_pressure = 1.5\n", "keeps_under_pressure must be a whole"),
        ("[service]\nkeeps_under_pressure = -1\n", "keeps_under_pressure must be a whole"),
        ("[service]\nshare_half_life = 'day'\n", "share_half_life must be a positive number"),
        ("[groups.phd]\nshare = 0\n", "[groups.phd]: share must be a positive number"),
        ("[limits]\nshare = 2\n", "[limits]: unknown key 'share'"),
        ("[service]\nhealth_grace = -1\n", "health_grace must be a number of seconds, 0 or"),
        ("[service]\nhealth_poll_interval = 0\n", "health_poll_interval must be a positive"),
    ],
)
def test_a_mistake_is_refused_in_one_line_naming_the_key(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidInputError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert message.startswith(f"service config {path}")
    assert problem in message and "\n" not in message


def test_the_gpu_knobs(tmp_path: Path) -> None:
    assert (Policy().gpu_sample_interval, Policy().release_gpu_idle) == (1.0, False)
    text = (
        "[service]\ngpu_sample_interval = 0.5\ngpu_active_threshold = 10\ngpu_window = 30\n"
        "gpu_idle_timeout = 600\nrelease_gpu_idle = true\n"
    )
    policy = load_policy(write(tmp_path, text))
    assert (
        policy.gpu_sample_interval,
        policy.gpu_active_threshold,
        policy.gpu_window,
        policy.gpu_idle_timeout,
        policy.release_gpu_idle,
    ) == (0.5, 10, 30, 600, True)


def test_the_fair_share_and_reclaim_knobs(tmp_path: Path) -> None:
    """Defaults: reclaim on, 5 min grace, 1 Keep, idle after 10 min, in use never, a day's
    half-life, equal shares; each read from the file, shares from [users] and [groups]."""
    default = Policy()
    assert (default.reclaim, default.reclaim_active, default.user_shares) == (True, False, {})
    assert default.reclaim_settings == ReclaimSettings(300, 1, 3600, False, 600)
    assert default.share_half_life == 86400
    text = (
        "[service]\nreclaim = false\nreclaim_grace = 60\nkeeps_under_pressure = 0\n"
        "reclaim_idle = 30\nreclaim_active = true\nmin_runtime = 7200\n"
        "share_half_life = 3600\n[groups.phd]\nshare = 2\ngpus = 4\n[users.bob]\nshare = 0.5\n"
    )
    policy = load_policy(write(tmp_path, text))
    assert not policy.reclaim and policy.share_half_life == 3600
    assert policy.reclaim_settings == ReclaimSettings(60, 0, 7200, True, 30)
    assert (policy.group_shares, policy.user_shares) == ({"phd": 2.0}, {"bob": 0.5})
    assert policy.limits("carol", ("phd",)).gpus.value == 4  # share is no limit


def test_a_file_is_bounded_before_it_is_parsed(tmp_path: Path) -> None:
    path = write(tmp_path, "#" * (MAX_CONFIG + 1))
    with pytest.raises(InvalidInputError, match=f"over {MAX_CONFIG} bytes"):
        load_policy(path)


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cannot read it: No such file"):
        load_policy(tmp_path / "none.toml")


def test_the_example_policy_and_the_systemd_unit_agree_with_the_daemon() -> None:
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    policy = load_policy(deploy / "service.toml")
    assert policy.ledger == Path("/var/lib/dra-jupyter/ledger.sqlite")
    assert policy.limits("bob", ("students",)).gpus == Limit(2, "group students")
    unit = (deploy / "dra-jupyter.service").read_text()
    assert "dra-jupyter service --config /etc/dra-jupyter/service.toml" in unit
    assert "--socket /run/dra-jupyter/socket" in unit
    assert "StateDirectoryMode=0700" in unit and "RuntimeDirectoryMode=0755" in unit

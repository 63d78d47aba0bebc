"""The shared box's spawn form without a hub: the world from the service's answers (claims
named only by number), the form's HTML, what a posted form chose, and what the spawner
gives the server (the environment its extension reads, the idle timeout's arguments)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

from dra_jupyter.allocator import Allocator
from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import InvalidInputError
from dra_jupyter.hub import localspawner
from dra_jupyter.hub.choices import Choice, ChoicePolicy, choices, find, restrict
from dra_jupyter.hub.config import DRAProfiles
from dra_jupyter.hub.form import chosen, read_at_start, render, service_world, slug_of
from dra_jupyter.inventory import simulated
from dra_jupyter.server import startup
from dra_jupyter.types import ClaimRecord, Owner

NOW = dt.datetime(2026, 12, 1, 15, 0, tzinfo=dt.UTC)
REPO = Path(__file__).resolve().parents[2]


def record(name: str, user: str, spec: dict[str, object], held: list[ClaimRecord]) -> ClaimRecord:
    inv = simulated.load("h200-8x")
    claim = build_claim(name, spec, classes=["gpu.nvidia.com"])
    found = Allocator(inv.slices, inv.device_classes, [h.to_object() for h in held]).allocate(
        [claim]
    )
    assert found is not None
    return ClaimRecord(
        name=name,
        namespace="default",
        owner=Owner(user=user, host="box", pid=1234),
        spec=claim,
        allocation=found[0].to_dict(),
        created=NOW.timestamp() - 60,
        last_activity=NOW.timestamp() - 60,
    )


def test_the_world_of_the_service_names_no_claim_and_counts_them_all() -> None:
    inv = simulated.load("h200-8x")
    alice = record("alice-1", "alice", {"gpu": 4}, [])
    bob = record("bob-1", "bob", {"gpu": 3}, [alice])
    world = service_world(inv, [alice, bob])
    assert [c["metadata"]["name"] for c in world.claims] == ["held-1", "held-2"]  # type: ignore[index]
    assert "alice" not in json.dumps(list(world.claims)) and "bob" not in json.dumps(
        list(world.claims)
    )
    assert world.since == {"default/held-1": alice.created, "default/held-2": bob.created}
    offered = choices(world, now=NOW)
    one, two = find(offered, "h200-x1"), find(offered, "h200-x2")
    assert one is not None and one.available == 1
    assert two is not None and two.available == 0
    assert two.description == "none free now: only 1 of 8 free (since 14:59)"


def test_the_form_offers_every_choice_and_lets_choose_what_can_start() -> None:
    inv = simulated.load("h200-8x")
    world = service_world(inv, [record("a-1", "a", {"gpu": 7}, [])])
    policy = ChoicePolicy.from_table([{"match": "h200-*", "lease": "8h", "idle_timeout": "1h"}])
    offered = restrict(choices(world, now=NOW), "bob", (), policy)
    html = render(offered, inventory="8x NVIDIA H200 (simulated)")
    assert html.count('type="radio"') == len(offered) == 5
    assert '<p class="text-muted">8x NVIDIA H200 (simulated)</p>' in html
    assert 'value="none" checked>' in html  # the default
    assert (
        'data-available="1"><input class="form-check-input" type="radio" name="profile" '
        'id="dra-profile-h200-x1" value="h200-x1">'
    ) in html
    assert 'value="h200-x2" disabled>' in html
    assert "on gpu-node-1: 1 of 8 GPUs are not held by other claims, 2 needed" in html
    assert "(lease 8h, stops after 1h idle)" in html
    assert 'value="h200-x1" checked>' in render(offered, choose="h200-x1")  # the last choice
    assert "checked" not in render(offered, choose="h200-x8").split('value="h200-x8"')[1][:20]


def test_the_form_escapes_what_it_shows() -> None:
    tricky = Choice("x1", "<b>GPU</b>", 'say "hi" & <go>', {"gpu": 1}, 0, "<script>", None)
    html = render([tricky], inventory="<i>box</i>", problem="a & b")
    assert "<b>GPU</b>" not in html and "&lt;b&gt;GPU&lt;/b&gt;" in html
    assert "&lt;script&gt;" in html and "&lt;i&gt;box&lt;/i&gt;" in html
    assert "a &amp; b" in html


def test_a_posted_form_chooses_one_slug() -> None:
    assert chosen({"profile": ["h200-x2"]}) == {"profile": "h200-x2"}
    wrong: list[dict[str, list[str]]] = [{}, {"profile": []}, {"profile": ["a", "b"]}]
    for bad in wrong:
        with pytest.raises(InvalidInputError, match="choose one of the devices offered"):
            chosen(bad)
    for value in ("../x", "H200", "", "-x", "a" * 81, 7, None):
        with pytest.raises(InvalidInputError, match="expected the slug of a choice"):
            slug_of(value)


def test_the_spawner_speaks_the_extensions_environment() -> None:
    assert (localspawner.REQUEST_ENV, localspawner.LEASE_ENV, localspawner.REPORT_ENV) == (
        startup.REQUEST_ENV,
        startup.LEASE_ENV,
        startup.REPORT_ENV,
    )
    spawner = localspawner.DRALocalSpawner(dra_socket="/run/test/socket")
    assert spawner.dra_env() == {
        "DRA_JUPYTER_BACKEND": "service",
        "DRA_JUPYTER_SOCKET": "/run/test/socket",
    }
    spawner._dra_choice = Choice(
        "h200-x2", "2x", "", {"gpu": 2, "model": "NVIDIA H200"}, 4, None, None, "8h", "30m"
    )
    spawner._dra_folder = Path("/tmp/dra-jupyter-hub-x")
    env = spawner.dra_env()
    assert json.loads(env[localspawner.REQUEST_ENV]) == {"gpu": 2, "model": "NVIDIA H200"}
    assert env[localspawner.LEASE_ENV] == "8h"
    assert env[localspawner.REPORT_ENV] == "/tmp/dra-jupyter-hub-x/startup.json"
    assert spawner.get_args()[-4:] == [
        "--ServerApp.shutdown_no_activity_timeout=1800",
        "--MappingKernelManager.cull_idle_timeout=1800",
        "--MappingKernelManager.cull_interval=300",
        "--DRAExtensionApp.idle_timeout=1800",
    ]


def test_the_profile_is_read_at_start_not_logged_as_unhandled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """JupyterHub logs every user option that no apply_user_options hook takes; ours read
    the profile (and KubeSpawner's profile options) when the server starts."""
    assert localspawner.DRALocalSpawner().apply_user_options is read_at_start

    class Spawner:
        log = logging.getLogger("test-spawner")
        _log_name = "alice"

    with caplog.at_level(logging.WARNING, logger="test-spawner"):
        read_at_start(Spawner(), {"profile": "h200-x1", "profile-option-image": "big"})
        assert caplog.records == []
        read_at_start(Spawner(), {"profile": "h200-x1", "colour": "red"})
    assert [r.getMessage() for r in caplog.records] == [
        "Received unhandled user_options for alice: colour"
    ]


def test_the_profiles_config_is_a_policy() -> None:
    profiles = DRAProfiles(rules=[{"match": "mig-*", "groups": ["ml"]}])
    assert profiles.policy() == ChoicePolicy.from_table([{"match": "mig-*", "groups": ["ml"]}])
    with pytest.raises(InvalidInputError, match="profile rule 1: unknown key 'who'"):
        DRAProfiles(rules=[{"who": "x"}]).policy()


def test_the_deployed_jupyterhub_config_offers_what_it_says() -> None:
    """deploy/jupyterhub_config.py loads, names the spawner, and its rules hold: a whole
    node for ml-admins only, 4 GPUs for researchers too, "No GPU" first."""
    config = PyFileConfigLoader("jupyterhub_config.py", path=str(REPO / "deploy")).load_config()
    assert config.JupyterHub.spawner_class == "dra_jupyter.hub.localspawner.DRALocalSpawner"
    assert config.JupyterHub.allow_named_servers is True  # a second server, as the form offers
    policy = DRAProfiles(config=config).policy()
    inv = simulated.load("h200-8x")
    offered = choices(service_world(inv, []), now=NOW)
    slugs = {
        who: [c.slug for c in restrict(offered, who, groups, policy)]
        for who, groups in (("ann", {"ml-admins"}), ("bea", {"researchers"}), ("cid", set()))
    }
    assert slugs["ann"] == ["none", "h200-x1", "h200-x2", "h200-x4", "h200-x8"]
    assert slugs["bea"] == ["none", "h200-x1", "h200-x2", "h200-x4"]
    assert slugs["cid"] == ["none", "h200-x1", "h200-x2"]
    mine = restrict(offered, "cid", (), policy)
    assert [c.slug for c in mine if c.default] == ["none"]
    assert {(c.lease, c.idle_timeout) for c in mine} == {("8h", "1h")}


def test_the_counts_leave_out_devices_a_device_taint_rule_taints() -> None:
    """A NoSchedule DeviceTaintRule on one of the 8 GPUs (as a cluster's inventory carries
    it): every count is one GPU short, 8 GPUs are never possible, 7 now are."""
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "xid-79"},
        "spec": {
            "deviceSelector": {"device": "gpu-0"},
            "taint": {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"},
        },
    }
    inv = replace(simulated.load("h200-8x"), taint_rules=(rule,))
    offered = {c.slug: c.available for c in choices(service_world(inv, []), now=NOW)}
    assert offered == {
        "none": offered["none"],
        "h200-x1": 7,
        "h200-x2": 3,
        "h200-x4": 1,
        "h200-x7": 1,
    }

"""Each ``%dra`` form in a real kernel (simulated 8x H200): what it shows and returns."""

from __future__ import annotations

import getpass
import re

import yaml

from dra_jupyter.local.ledger import Ledger
from dra_jupyter.types import claim_prefix
from tests.magics.conftest import Kernel, kernel_fixture, plain
from tests.test_claimspec import validate

module_kernel = kernel_fixture("h200-8x")


def test_request_returns_the_claim_and_sets_its_environment(kernel: Kernel) -> None:
    out = kernel.ok("c = %dra request gpu=2 memory=80Gi same=pcieRoot timeout=5m lease=2h\nc")
    [record] = kernel.claims()
    assert out.result.startswith(f"<Claim {record.name}: ")
    assert len(record.allocation["devices"]["results"]) == 2
    assert record.lease_expires is not None
    spec = record.spec["spec"]["devices"]
    assert spec["constraints"] == [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    # the claim is a Claim object in the kernel, its environment set in the kernel's process
    check = kernel.ok(
        "import os; print(type(c).__name__, c.name, "
        "os.environ['CUDA_VISIBLE_DEVICES'] == c.env['CUDA_VISIBLE_DEVICES'])"
    )
    assert check.stdout.split() == ["Claim", record.name, "True"]


def test_request_shows_the_claim_card_and_expands_python_values(kernel: Kernel) -> None:
    out = kernel.ok("n, where = 2, 'pcieRoot'\n%dra request gpu={n} same=$where")
    [view] = out.results("application/vnd.jupyter.widget-view+json")
    assert view["model_id"]
    [record] = kernel.claims()
    assert len(record.allocation["devices"]["results"]) == 2
    assert record.spec["spec"]["devices"]["constraints"] == [
        {"matchAttribute": "resource.kubernetes.io/pcieRoot"}
    ]


def test_request_without_applying_the_environment(kernel: Kernel) -> None:
    kernel.ok("import os; os.environ.pop('CUDA_VISIBLE_DEVICES', None)")
    kernel.ok("c = %dra request gpu=1 apply_env=false")
    out = kernel.ok("print(os.environ.get('CUDA_VISIBLE_DEVICES'), len(c.env))")
    assert out.stdout.split() == ["None", "2"]  # CUDA_ and NVIDIA_VISIBLE_DEVICES


def test_status_lists_this_kernels_claims_with_lease_countdown(kernel: Kernel) -> None:
    kernel.ok("a = %dra request gpu=1 lease=1h\nb = %dra request gpu=2")
    out = kernel.ok("%dra status")
    text = out.result
    names = sorted(r.name for r in kernel.claims())
    for name in names:
        assert name in text
    lines = [line for line in text.splitlines() if line.startswith(tuple(names))]
    assert len(lines) == 2
    assert all("allocated" in line and "this kernel" in line for line in lines)
    assert re.search(r"\b(59m\d\ds|1h00m)\b", lines[0])  # a countdown, whatever the seconds
    assert "when its process exits" in lines[0]  # no Jupyter server: the process holds it
    assert "SIMULATED" in text.splitlines()[0]
    # the value is a table usable from Python
    rows = kernel.ok("t = %dra status\nprint(len(t), t[0].holder, t.to_pandas().shape[0])")
    assert rows.stdout.split() == ["2", "this", "kernel", "2"]


def test_release_by_name_and_all(kernel: Kernel) -> None:
    kernel.ok("a = %dra request gpu=1\nb = %dra request gpu=1\nc = %dra request gpu=1")
    first, *rest = sorted(r.name for r in kernel.claims())
    out = kernel.ok(f"%dra release {first}")
    assert out.stdout.strip() == f"dra: released {first}"
    assert sorted(r.name for r in kernel.claims()) == rest
    out = kernel.ok("%dra release --all")
    assert out.stdout.strip() == f"dra: released {', '.join(rest)}"
    assert kernel.claims() == []
    assert kernel.ok("%dra release --all").stdout.strip() == "dra: you hold no claims"


def test_env_shows_the_variables_of_this_kernels_claims(kernel: Kernel) -> None:
    assert "holds no claims" in kernel.ok("%dra env").result
    kernel.ok("c = %dra request gpu=2")
    out = kernel.ok("e = %dra env\ne")
    uuids = [line for line in out.result.splitlines() if line.startswith("CUDA_VISIBLE_DEVICES=")]
    assert len(uuids) == 1
    assert uuids[0].split("=", 1)[1].count("GPU-") == 2
    check = kernel.ok("print(dict(e) == c.env, isinstance(e, dict))")
    assert check.stdout.split() == ["True", "True"]


def test_yaml_is_a_valid_resource_claim_and_creates_nothing(kernel: Kernel) -> None:
    out = kernel.ok(
        "%dra yaml gpu=2 memory=80Gi same=pcieRoot model=H200 "
        'selector=\'device.attributes["gpu.nvidia.com"].architecture == "Hopper"\''
    )
    claim = yaml.safe_load(out.result)
    validate(claim)
    assert claim["kind"] == "ResourceClaim"
    assert claim["metadata"]["generateName"] == f"{claim_prefix(getpass.getuser())}-"
    assert "name" not in claim["metadata"]
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["count"] == 2
    cel = [s["cel"]["expression"] for s in exactly["selectors"]]
    assert cel[-1] == 'device.attributes["gpu.nvidia.com"].architecture == "Hopper"'
    assert kernel.claims() == []
    named = yaml.safe_load(kernel.ok("%dra yaml mig=3g.71gb name=train-1").result)
    validate(named)
    assert named["metadata"]["name"] == "train-1"


def test_explain_never_later_and_now(kernel: Kernel) -> None:
    never = kernel.ok("%dra explain gpu=9").result
    assert never.startswith("gpu=9: can never be met here: asks for 9 GPU devices; 8x NVIDIA H200")
    assert "only 8 GPUs here (class gpu.nvidia.com), 9 needed" in never
    kernel.ok("c = %dra request gpu=6")
    later = kernel.ok("%dra explain gpu=4").result
    assert later.startswith("gpu=4: cannot be met now")
    assert "2 of the 8 matching GPUs are free, 4 needed" in later
    assert f"held now: {kernel.claims()[0].name}" in later
    now = kernel.ok("v = %dra explain gpu=2 --verbose\nv").result
    assert now.startswith("gpu=2: can be met now on gpu-node-1: gpu-")
    assert "match the device class" in now  # the funnel, with --verbose
    assert kernel.ok("print(v.answer)").stdout.strip() == "now"
    assert len(kernel.claims()) == 1  # explaining allocated nothing


def test_help_and_the_docstring_document_every_form(kernel: Kernel) -> None:
    text = kernel.ok("%dra help").stdout
    forms = ("devices", "request", "status", "release", "explain", "env", "yaml", "usage", "help")
    for form in forms:
        assert f"%dra {form}" in text
    assert "%%dra KEY=VALUE" in text
    assert "%dra request mig=3g.71gb" in text
    inspected = kernel.client.inspect("%dra", 4, detail_level=0)
    reply = kernel.client.get_shell_msg(timeout=60)
    assert reply["parent_header"]["msg_id"] == inspected
    doc = plain(reply["content"]["data"]["text/plain"])
    for form in forms:
        assert f"%dra {form}" in doc


def test_usage_is_a_dataframe_of_the_gpu_seconds_held(kernel: Kernel) -> None:
    kernel.ok("u = %dra request gpu=2 name=used-a\nu.release()")
    out = kernel.ok(
        "frame = %dra usage --since 1h --by claim\n"
        "row = frame.set_index('claim').loc['used-a']\n"
        "print(type(frame).__name__, row['gpu_seconds'] > 0, row['user'] == u.backend.owner.user)"
    )
    assert out.stdout.split() == ["DataFrame", "True", "True"]
    bad = kernel.run("%dra usage --by team")
    assert bad.status == "error"
    assert bad.error_lines() == [
        "dra usage by=team: by='team' is not known; use one of user, group, claim, device"
    ]


def test_release_of_several_says_what_was_released_and_what_was_not(kernel: Kernel) -> None:
    kernel.ok("a = %dra request gpu=1 name=kept-a")
    out = kernel.run("%dra release nb-404 kept-a")
    assert out.stdout.strip() == "dra: released kept-a"  # released, though nb-404 failed
    assert out.error_lines() == [
        "dra release: no claim nb-404 (already released?); %dra status lists your claims"
    ]
    assert kernel.claims() == []


def test_the_kernels_environment_is_what_it_holds_even_after_a_release_elsewhere(
    kernel: Kernel,
) -> None:
    """Issue: a second request replaced the first's devices, and a claim released behind
    the kernel's back (here as the server's idle release does it, in the ledger) stayed in
    CUDA_VISIBLE_DEVICES while ``%dra env`` said it was not set."""
    kernel.ok("import os; os.environ.pop('CUDA_VISIBLE_DEVICES', None)")
    kernel.ok("a = %dra request gpu=1\nb = %dra request gpu=1")
    env = "print(os.environ.get('CUDA_VISIBLE_DEVICES'))"
    both = kernel.ok(env).stdout.strip()
    first, second = (
        kernel.ok(f"print({v}.env['CUDA_VISIBLE_DEVICES'])").stdout.strip() for v in "ab"
    )
    assert both == f"{first},{second}"
    ledger = Ledger(kernel.ledger_path)
    (gone,) = [
        r for r in ledger.read_claims() if r.name == kernel.ok("print(a.name)").stdout.strip()
    ]
    with ledger.transaction() as conn:
        Ledger.delete(conn, gone, "idle")
    assert kernel.ok(env).stdout.strip() == second  # before this cell ran, a's GPU left
    shown = kernel.ok("%dra env").result
    assert f"CUDA_VISIBLE_DEVICES={second}" in shown
    assert "not set in this process" not in shown
    kernel.ok("b.release()")
    assert kernel.ok(env).stdout.strip() == "None"  # unset before the first claim: unset again

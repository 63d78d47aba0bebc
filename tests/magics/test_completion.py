"""Tab completion of ``%dra`` and ``%%dra`` through a real kernel's ``complete_request``
(simulated H200 in MIG mode)."""

from __future__ import annotations

from typing import Any

from tests.magics.conftest import Kernel, kernel_fixture

module_kernel = kernel_fixture("h200-mig")

PROFILES = ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]


def completed(kernel: Kernel, code: str) -> tuple[list[str], str]:
    """The matches, and the text each replaces (from cursor_start to the cursor)."""
    reply: dict[str, Any] = kernel.complete(code)
    assert reply["status"] == "ok"
    assert reply["cursor_end"] == len(code)
    return list(reply["matches"]), code[reply["cursor_start"] :]


def test_commands(kernel: Kernel) -> None:
    assert completed(kernel, "%dra ") == (
        [
            "devices",
            "request",
            "status",
            "release",
            "explain",
            "env",
            "yaml",
            "usage",
            "runs",
            "logs",
            "cancel",
            "help",
        ],
        "",
    )
    assert completed(kernel, "%dra re") == (["request", "release"], "re")
    assert completed(kernel, "c = %dra req") == (["request"], "req")


def test_keywords_not_yet_given(kernel: Kernel) -> None:
    matches, replaced = completed(kernel, "%dra request gpu=1 m")
    assert (matches, replaced) == (["mig=", "memory=", "model="], "m")
    matches, _ = completed(kernel, "%dra request gpu=1 ")
    assert "gpu=" not in matches
    assert {"mig=", "same=", "timeout=", "lease=", "device_class="} <= set(matches)
    assert "timeout=" not in completed(kernel, "%dra explain ti")[0]  # explain does not wait
    assert completed(kernel, "%dra explain --v") == (["--verbose"], "--v")


def test_mig_profiles_device_classes_models_and_attributes(kernel: Kernel) -> None:
    assert completed(kernel, "%dra request mig=") == (PROFILES, "")
    assert completed(kernel, "%dra request mig=1g.18") == (["1g.18gb", "1g.18gb+me"], "1g.18")
    assert completed(kernel, "%dra request mig=1g.18gb+") == (["1g.18gb+me"], "1g.18gb+")
    assert completed(kernel, "%dra yaml device_class=") == (
        ["gpu.nvidia.com", "mig.nvidia.com"],
        "",
    )
    assert completed(kernel, "%dra request model=nv") == (['"NVIDIA H200"'], "nv")
    assert completed(kernel, "%dra request same=p") == (["pcieRoot", "pciBusID", "parentUUID"], "p")


def test_the_first_line_of_a_cell_magic(kernel: Kernel) -> None:
    assert completed(kernel, "%%dra mig=3") == (["3g.71gb"], "3")
    matches, _ = completed(kernel, "%%dra mig=3g.71gb ")
    assert "timeout=" in matches
    assert "apply_env=" not in matches  # the cell always sets the environment
    # %%dra run: the run's keywords (a pod's, a Job's)
    assert completed(kernel, "%%dra r") == (["run"], "r")
    matches, _ = completed(kernel, "%%dra run gpu=1 ")
    assert {"nodes=", "queue=", "retries=", "wait=", "image=", "lease="} <= set(matches)
    assert completed(kernel, "%%dra run gpu=1 wait=") == (["true", "false"], "")
    # the body of the cell is Python: completed as usual
    body, _ = completed(kernel, "%%dra gpu=1\nimport o")
    assert "os" in body


def test_release_offers_this_users_claims(kernel: Kernel) -> None:
    kernel.ok("c = %dra request mig=1g.18gb name=small-one")
    assert completed(kernel, "%dra release ") == (["small-one", "--all"], "")
    assert completed(kernel, "%dra release sm") == (["small-one"], "sm")


def test_loading_twice_installs_the_completion_once_and_unloading_removes_it(
    kernel: Kernel,
) -> None:
    count = (
        "print(sum(getattr(m, 'matcher_identifier', '') == 'dra_jupyter.magics' "
        "for m in get_ipython().Completer.custom_matchers))"
    )
    kernel.ok("%load_ext dra_jupyter")
    kernel.ok("%reload_ext dra_jupyter")
    assert kernel.ok(count).stdout.strip() == "1"
    kernel.ok("%unload_ext dra_jupyter")
    assert kernel.ok(count).stdout.strip() == "0"
    kernel.ok("%load_ext dra_jupyter")
    assert completed(kernel, "%dra sta") == (["status"], "sta")

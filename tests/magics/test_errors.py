"""User errors at the ``%dra`` boundary: one line in an error output, no traceback, the cell
marked failed; bugs keep their traceback."""

from __future__ import annotations

import pytest

from tests.magics.conftest import Kernel, Outcome, kernel_fixture, waiting

module_kernel = kernel_fixture("h200-8x")


def one_line(outcome: Outcome) -> str:
    """The single line the failed cell showed, checked to be all it showed."""
    assert outcome.status == "error"
    [line] = outcome.error_lines()
    assert "Traceback" not in line and "File " not in line
    assert outcome.stderr == ""
    return line


@pytest.mark.parametrize(
    ("code", "line"),
    [
        (
            "%dra request gpux=1",
            "dra request: unknown keyword 'gpux' (did you mean gpu?); use gpu, tpu, mig, count, "
            "memory, model, selector, share, interval, threads, pinned_memory, device_class, same, "
            "distinct, alternatives, timeout, lease, name, apply_env, restart, join",
        ),
        (
            "%dra request gpu=99",
            "dra request gpu=99: gpu=99 exceeds the limit of 32 devices per claim; "
            "split the work over several claims",
        ),
        ("%dra request gpu=two", "dra request: gpu='two' is not a whole number; write e.g. gpu=2"),
        (
            "%dra request gpu=1 timeout=5x",
            "dra request gpu=1 timeout=5x: timeout: '5x' is not a duration; write e.g. '90s', "
            "'5m', '1h30m' "
            "or seconds",
        ),
        (
            "%dra request memory=lots",
            "dra request memory=lots: memory='lots' is not a quantity; write e.g. '80Gi' or '40G'",
        ),
        (
            "%dra bogus",
            "dra: unknown command 'bogus'; use devices, request, status, release, "
            "explain, env, yaml, usage, runs, logs, cancel, help (%dra help shows examples)",
        ),
        (
            "%dra reqest gpu=1",
            "dra: unknown command 'reqest' (did you mean request?); use devices, request, "
            "status, release, explain, env, yaml, usage, runs, logs, cancel, help (%dra help "
            "shows examples)",
        ),
        ("%dra gpu=1", "dra: 'gpu=1' is not a command; to hold devices write %dra request gpu=1"),
        ("%dra status --everything", "dra status: unknown flag '--everything'; it takes --all"),
        ("%dra env now", "dra env: takes no arguments, got 'now'"),
        (
            "%dra request selector='device.attributes",
            'dra: No closing quotation in "request selector=\'device.attributes"; close the quote',
        ),
        ("%dra release", "dra release: name the claims to release, or pass --all"),
        (
            "%dra release nb-404",
            "dra release: no claim nb-404 (already released?); %dra status lists your claims",
        ),
        (
            "%dra yaml gpu=1 lease=2h",
            "dra yaml: unknown keyword 'lease'; use gpu, tpu, mig, "
            "count, memory, model, selector, share, interval, threads, pinned_memory, "
            "device_class, same, distinct, alternatives, name",
        ),
        (
            "%dra request alternatives=gpu",
            "dra request: alternatives must be a list of dicts, e.g. "
            "alternatives=\"[{'gpu': 1, 'model': 'H200'}, {'gpu': 2}]\"",
        ),
    ],
)
def test_a_user_error_is_one_line(kernel: Kernel, code: str, line: str) -> None:
    assert one_line(kernel.run(code)) == line
    assert kernel.claims() == []


def test_a_request_that_can_never_be_met_says_why_in_one_line(kernel: Kernel) -> None:
    line = one_line(kernel.run("%dra request gpu=9"))
    assert line.startswith("dra request gpu=9: asks for 9 GPU devices; 8x NVIDIA H200")
    line = one_line(kernel.run("%dra request mig=3g.71gb"))
    assert line.startswith("dra request mig=3g.71gb: no MIG devices on 8x NVIDIA H200")


def test_busy_devices_are_explained_without_a_traceback(kernel: Kernel) -> None:
    kernel.ok("c = %dra request gpu=8")
    out = kernel.run("%dra request gpu=1")
    assert out.status == "error"
    [error] = out.errors
    text = "\n".join(error["traceback"])
    assert "the devices are busy" in text
    assert f"claims held now: {kernel.claims()[0].name}" in text
    assert "Traceback" not in text and "File " not in text
    assert len(kernel.claims()) == 1


def test_an_interrupted_wait_is_one_line_and_holds_nothing(kernel: Kernel) -> None:
    kernel.ok("c = %dra request gpu=8")
    holder = kernel.claims()[0].name
    out = kernel.start("d = %dra request gpu=2 timeout=10m", waiting).interrupt()
    assert out.status == "error"
    assert out.error_lines() == [
        "dra request gpu=2 timeout=10m: interrupted; %dra status lists your claims"
    ]
    assert [r.name for r in kernel.claims()] == [holder]
    assert kernel.ok("print('d' in globals())").stdout.strip() == "False"


def test_a_bug_keeps_its_traceback(kernel: Kernel) -> None:
    kernel.ok(
        "import dra_jupyter.magics.reports as _reports\n"
        "_saved = _reports.status_table\n"
        "_reports.status_table = lambda *a, **k: 1 / 0"
    )
    try:
        out = kernel.run("%dra status")
    finally:
        kernel.ok("_reports.status_table = _saved")
    assert out.status == "error"
    [error] = out.errors
    assert error["ename"] == "ZeroDivisionError"
    assert len(error["traceback"]) > 1
    assert "Traceback" in "\n".join(out.error_lines())


@pytest.mark.parametrize(
    ("code", "line"),
    [
        (
            "import dra_jupyter as dra\ndra.request(gpu=99)",
            "dra.request: gpu=99 exceeds the limit of 32 devices per claim; split the work over "
            "several claims",
        ),
        (
            "import dra_jupyter as dra\ndra.claim('nobody-1')",
            "claim nobody-1 does not exist (it may have been released)",
        ),
    ],
    ids=["invalid", "not found"],
)
def test_the_apis_user_errors_are_one_line_too(kernel: Kernel, code: str, line: str) -> None:
    """Not only the magics: a DraJupyterError raised by the Python API in a cell shows as
    its message, without a traceback (its ``_render_traceback_``), and fails the cell."""
    assert one_line(kernel.run(code)) == line


def test_tb_shows_the_full_traceback_of_an_api_error(kernel: Kernel) -> None:
    """The one line is what the cell shows; ``%tb`` afterwards shows where it came from."""
    assert one_line(kernel.run("import dra_jupyter as dra\ndra.request(gpu=99)")).startswith(
        "dra.request: gpu=99 exceeds the limit"
    )
    shown = kernel.ok("%tb")
    lines = "\n".join(shown.error_lines())
    assert "Traceback" in lines
    assert "dra.request(gpu=99)" in lines  # the user's own line
    assert "claimspec.py" in lines or "api.py" in lines  # and the package's frames
    assert "InvalidInputError" in lines

"""A notebook cell run again: the claims of its previous run are released before its new
requests (JupyterLab sends the cell's id, ``cellId``, with each execute request)."""

from __future__ import annotations

from tests.magics.conftest import Kernel, kernel_fixture

module_kernel = kernel_fixture("h200-8x")

REQUEST = "import dra_jupyter as dra; c = dra.request(gpu=2)"


def held(kernel: Kernel) -> list[tuple[str, int]]:
    return [(r.name, len(r.device_keys)) for r in kernel.claims()]


def test_a_cell_run_five_times_holds_one_claim(kernel: Kernel) -> None:
    first = kernel.run_cell(REQUEST + "; print(c.name)", "cell-a")
    assert first.status == "ok", first.reply
    names = [first.stdout.strip()]
    for _ in range(4):
        again = kernel.run_cell(REQUEST + "; print(c.name)", "cell-a")
        assert again.status == "ok", again.reply
        notice, name = again.stdout.strip().splitlines()
        assert notice.startswith(f"dra: released {names[-1]}, made when this cell ran before")
        assert again.stderr == ""  # information, not an error
        names.append(name)
    assert held(kernel) == [(names[-1], 2)]
    # the environment names the new claim's devices only
    kernel.ok(
        "import os; assert os.environ['CUDA_VISIBLE_DEVICES'] == c.env['CUDA_VISIBLE_DEVICES']"
    )


def test_requests_of_one_run_all_stay_and_other_cells_keep_theirs(kernel: Kernel) -> None:
    kernel.ok("import dra_jupyter as dra; other = dra.request(gpu=1)")  # no cell id: a console
    one = kernel.run_cell("a = dra.request(gpu=1); b = dra.request(gpu=1)", "cell-b")
    assert one.status == "ok", one.reply
    assert "released" not in one.stdout + one.stderr
    kernel.run_cell("d = dra.request(gpu=1)", "cell-c")
    assert len(held(kernel)) == 4
    again = kernel.run_cell("a = dra.request(gpu=1); b = dra.request(gpu=1)", "cell-b")
    assert again.status == "ok", again.reply
    names = {r.name for r in kernel.claims()}
    kernel.ok("assert {other.name, d.name, a.name, b.name} == " + repr(names))
    kernel.ok("assert len(os.environ['CUDA_VISIBLE_DEVICES'].split(',')) == 4")


def test_rerun_releases_can_be_turned_off(kernel: Kernel) -> None:
    kernel.ok("import dra_jupyter as dra; dra.configure(rerun_releases=False)")
    try:
        for _ in range(2):
            outcome = kernel.run_cell(REQUEST, "cell-d")
            assert outcome.status == "ok", outcome.reply
            assert "released" not in outcome.stdout + outcome.stderr
        assert [n for _, n in held(kernel)] == [2, 2]
    finally:
        kernel.ok("dra.configure()")


def test_busy_behind_its_own_claims_says_how_to_release_them(kernel: Kernel) -> None:
    for cell in ("e1", "e2", "e3", "e4"):
        kernel.run_cell(REQUEST, cell)
    busy = kernel.run_cell(REQUEST, "e5")
    assert busy.status == "error"
    text = "\n".join(busy.error_lines())
    assert "the devices are busy" in text
    assert "every claim held now is this process's own (" in text
    assert "dra.release_all() releases them" in text
    assert len(held(kernel)) == 4

"""A background run's end in a real JupyterLab (issue 42, item 3): a run of this user
(``dra.run``, started elsewhere) that the page saw running is announced once by how it
ended, not by its claim's release: ``train-1 failed (exit 3): last line …`` (a warning that
stays) and ``ok-1 finished (exit 0)``, each with **Output**, which opens the Devices panel on
the run's last lines. Each run waits for a file of the test before it ends, so that the
page sees it run whatever the machine's speed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dra_jupyter.api import Session
from dra_jupyter.settings import Settings
from tests.browser.conftest import WAIT_MS, Lab
from tests.lab.test_devices_panel import PANEL, TOAST, claims, open_lab, released, toast, until

__all__ = ["released"]  # the fixture: each test starts and ends with no claim held


def waiting(go: Path, code: int, last: str) -> list[str]:
    """A command that waits for ``go`` to exist, prints ``last`` and exits ``code``."""
    script = (
        "import pathlib, sys, time\n"
        f"while not pathlib.Path({str(go)!r}).exists():\n"
        "    time.sleep(0.05)\n"
        f"print({last!r}, flush=True)\n"
        f"sys.exit({code})\n"
    )
    return ["python", "-c", script]


def test_a_runs_end_is_said_by_how_it_ended_with_output_one_click_away(
    lab: Lab, page: Any, released: None, tmp_path: Path
) -> None:
    session = Session(Settings(ledger=lab.ledger, inventory="h200-8x", backend="local"))
    open_lab(page, lab)
    # the page sees the runs' claims, so it reads the runs while they may end
    with page.expect_response(lambda r: "/dra/api/runs?" in r.url, timeout=WAIT_MS):
        failing = session.run(
            waiting(tmp_path / "fail", 3, "ValueError: nan"), gpu=1, name="train-1"
        )
        passing = session.run(waiting(tmp_path / "pass", 0, "done"), gpu=1, name="ok-1")
    try:
        (tmp_path / "fail").touch()
        warning = toast(page, "train-1 failed (exit 3)")
        text = warning.inner_text()
        assert text.startswith("train-1 failed (exit 3)"), text
        assert "last line ValueError: nan" in text
        (tmp_path / "pass").touch()
        note = toast(page, "ok-1 finished (exit 0)")
        assert note.get_by_role("button", name="Output").count() == 1
        until("both claims released", lambda: claims(lab) == [])
        # the runs' claims' releases are not announced as releases "on request"
        assert page.locator(TOAST).filter(has_text="Released").count() == 0
        warning.get_by_role("button", name="Output").click()
        panel = page.locator(PANEL)
        panel.wait_for(state="visible")
        card = panel.locator('section.dra-runs li.dra-run[data-run="train-1"]')
        log = card.locator("pre.dra-run-log")
        until(
            "its output in the panel", lambda: "ValueError: nan" in "".join(log.all_inner_texts())
        )
        assert page.locator(TOAST).filter(has_text="train-1 failed").count() == 1  # once
    finally:
        for run in (failing, passing):
            if run.status.phase in ("Pending", "Running"):
                run.cancel()

"""The JupyterLab extension in a real JupyterLab with the real server extension, driven
in Debian's chromium: the Devices panel, the status bar item, notifications and commands.

Claims are made in notebook cells (Run All Cells, as a user does) and through the REST
API; the page must follow by itself. Every wait is for a state, with a deadline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from dra_jupyter.api import Session
from dra_jupyter.settings import Settings
from tests.browser.conftest import (
    WAIT_MS,
    Lab,
    open_notebook,
    run_all_cells,
    running_lab,
    screenshots_dir,
)
from tests.lab.conftest import lab_argv

PANEL = ".dra-DevicesPanel"
STATUS = ".dra-DeviceStatus"
TOAST = ".Toastify__toast"
X = "\N{MULTIPLICATION SIGN}"  # as in "2x H200", the way the page writes it


def until(what: str, check: Callable[[], Any], seconds: float = WAIT_MS / 1000) -> Any:
    """Poll ``check`` until it returns something true; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        time.sleep(0.1)


def claims(lab: Lab) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = lab.api("GET", "/dra/api/claims")["claims"]
    return found


def reset_workspace(lab: Lab) -> None:
    """Forget the layout an earlier test left (its open notebooks and panels), which
    JupyterLab would restore beside what this test opens."""
    try:
        lab.api("DELETE", "/lab/api/workspaces/default")
    except urllib.error.HTTPError as err:
        if err.code != 404:  # none saved yet
            raise


def notebook(page: Any, lab: Lab, name: str, cells: list[str]) -> None:
    """``open_notebook`` in a fresh layout: this notebook alone."""
    reset_workspace(lab)
    open_notebook(page, lab, name, cells)


def open_lab(page: Any, lab: Lab) -> None:
    """JupyterLab with the default layout (not the one an earlier test left)."""
    reset_workspace(lab)
    page.goto(f"{lab.url}/lab?token={lab.token}")
    page.locator(".jp-LabShell").wait_for(timeout=WAIT_MS)
    page.locator("#jp-main-statusbar").wait_for(timeout=WAIT_MS)  # the layout is restored


def open_panel(page: Any) -> Any:
    """Click the Devices tab of the left sidebar unless it is the open one (a click on the
    open tab closes it)."""
    tab = page.locator('.jp-SideBar li[data-id="dra-jupyter-devices"]')
    tab.wait_for(timeout=WAIT_MS)
    if "lm-mod-current" not in (tab.get_attribute("class") or ""):
        tab.click()
    panel = page.locator(PANEL)
    panel.wait_for(state="visible", timeout=WAIT_MS)
    return panel


def toast(page: Any, text: str | re.Pattern[str]) -> Any:
    found = page.locator(TOAST).filter(has_text=text)
    found.first.wait_for(timeout=WAIT_MS)
    return found.first


def cell_output(page: Any, index: int) -> str:
    """The text of the outputs of the notebook's code cell ``index``."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").nth(index)
    return "".join(cell.locator(".jp-OutputArea-output").all_inner_texts()).strip()


def run_cell(page: Any, index: int, output: str) -> None:
    """Run the notebook's code cell ``index`` alone (its editor, Ctrl+Enter), as a user
    does, until its output is ``output``. JupyterLab may not take the keys while it sets up
    the page or a kernel: the cell is run again while its prompt says it has not run."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").nth(index)
    prompt = cell.locator(".jp-InputPrompt")
    before = prompt.inner_text().strip()

    def ran() -> bool:
        if cell_output(page, index) == output and prompt.inner_text().strip() != before:
            return True
        if prompt.inner_text().strip() in (before, "[ ]:"):
            cell.locator(".jp-InputArea-editor").click()
            page.keyboard.press("Control+Enter")
            page.wait_for_timeout(500)
        return False

    until(f"cell {index} run, its output {output!r} (it shows {cell_output(page, index)!r})", ran)


ENV_CELL = "import os\nprint('env', os.environ.get('CUDA_VISIBLE_DEVICES'))"


@pytest.fixture
def released(lab: Lab) -> Iterator[None]:
    """Each test starts and ends with no claim held."""
    yield
    for c in claims(lab):
        lab.api("DELETE", f"/dra/api/claims/{c['name']}")


def test_the_panel_shows_the_devices_by_node(lab: Lab, page: Any, tmp_path: Path) -> None:
    open_lab(page, lab)
    panel = open_panel(page)
    rows = panel.locator("tr.dra-device")
    until("8 devices in the panel", lambda: rows.count() == 8)
    assert panel.get_by_text("(simulated)", exact=False).count() == 1
    assert "H200" in rows.first.inner_text()
    assert panel.get_by_text("You hold no devices", exact=False).count() == 1


def test_each_device_row_shows_its_memory_and_a_utilisation_sparkline_while_shown(
    lab: Lab, page: Any, released: None
) -> None:
    """GET /dra/api/metrics (the simulated source here) gives each row its memory used /
    total and a sparkline of its utilisation; it is asked for only while the panel is
    shown, and never counts as activity (no_track_activity)."""
    asked: list[str] = []  # the page's REST calls, in order
    page.on("request", lambda r: asked.append(r.url) if "/dra/api/" in r.url else None)
    open_lab(page, lab)
    panel = open_panel(page)
    rows = panel.locator("tr.dra-device")
    until("8 devices in the panel", lambda: rows.count() == 8)
    sparks = rows.locator("td.dra-device-util svg.dra-spark")
    until("a sparkline in every device row", lambda: sparks.count() == 8)
    # two samples or more make a line (the server samples every 2 s)
    lines = rows.locator("svg.dra-spark path[d*='L']")
    until("a line in every sparkline", lambda: lines.count() == 8)
    for memory in rows.locator("td.dra-device-memory").all_inner_texts():
        assert re.fullmatch(r"\d+(\.\d)?(Mi|Gi) / 140\.4Gi", memory.strip()), memory
    for util in rows.locator("td.dra-device-util .dra-num").all_inner_texts():
        assert re.fullmatch(r"\d+%", util.strip()), util
    metrics = [u for u in asked if "/dra/api/metrics" in u]
    assert metrics and all("no_track_activity=1" in u for u in metrics), metrics

    page.locator('.jp-SideBar li[data-id="dra-jupyter-devices"]').click()  # closes it
    panel.wait_for(state="hidden", timeout=WAIT_MS)
    closed = len(asked)

    def reads_of_claims() -> int:
        page.evaluate("0")  # Playwright hands the page's events over during its calls only
        return sum("/dra/api/claims" in u for u in asked[closed:])

    # a claim made and released elsewhere: the page reads its claims again on each event
    # (refreshes do not overlap: the second read starts once the first is done)
    made = lab.api("POST", "/dra/api/claims", {"gpu": 1})
    until("the claims read after the claim was made", lambda: reads_of_claims() >= 1)
    lab.api("DELETE", f"/dra/api/claims/{made['name']}")
    until("the claims read after its release", lambda: reads_of_claims() >= 2)
    assert not [u for u in asked[closed:] if "/dra/api/metrics" in u], asked[closed:]


def test_the_usage_section_shows_your_gpu_hours_of_the_week(
    lab: Lab, page: Any, released: None
) -> None:
    """A claim held and released before the page opens: the panel's Usage section says
    the GPU-hours of the last 7 days, that no sampler told how they were used, and draws
    the GPU-hours per day (GET /dra/api/usage)."""
    made = lab.api("POST", "/dra/api/claims", {"gpu": 2})
    lab.api("DELETE", f"/dra/api/claims/{made['name']}")
    open_lab(page, lab)
    panel = open_panel(page)
    line = panel.locator("section.dra-usage .dra-usage-line")
    line.wait_for(timeout=WAIT_MS)
    assert re.fullmatch(
        r"(\d+(\.\d)? GPU-hours|\d+ GPU-minutes?|under a GPU-minute) in 7 days, GPU use not "
        r"known",
        line.inner_text().strip(),
    ), line.inner_text()
    assert line.locator("svg.dra-spark").get_attribute("aria-label") == (
        "your GPU-hours per day, the last 7 days"
    )
    usage = lab.api("GET", "/dra/api/usage")
    assert usage["gpu_seconds"] > 0 and usage["idle_share"] is None


def test_a_notebook_claim_shows_in_panel_and_status_bar_and_release_gives_it_back(
    lab: Lab, page: Any, tmp_path: Path, released: None
) -> None:
    cells = [
        "import os\nbefore = os.environ.get('CUDA_VISIBLE_DEVICES')\nprint('env', before)",
        "import dra_jupyter as dra\nclaim = dra.request(gpu=2)\nclaim.name",
        ENV_CELL,
    ]
    notebook(page, lab, "claims.ipynb", cells)
    panel = open_panel(page)
    run_all_cells(page)
    [claim] = until("the notebook's claim", lambda: claims(lab))
    status = page.locator(STATUS)
    status.filter(has_text=re.compile(rf"^2{X} H200 · idle in \d+:\d\d")).wait_for(timeout=WAIT_MS)
    row = panel.locator(f'.dra-claim[data-claim="{claim["name"]}"]')
    row.wait_for(timeout=WAIT_MS)
    assert "claims.ipynb" in row.inner_text()
    assert f"2{X} H200" in row.inner_text()
    held = panel.locator("tr.dra-state-held")
    until("2 devices held in the panel", lambda: held.count() == 2)
    # held by the notebook, by its name, not by the claim's id (issue 42, item 7)
    states = held.locator("td.dra-device-state").all_inner_texts()
    assert states == ["held: claims.ipynb"] * 2, states
    page.wait_for_timeout(300)  # let the page settle for the picture (no state is waited on)
    page.screenshot(path=str(screenshots_dir(tmp_path) / "devices-panel.png"))

    # 2 GPUs go: asked first (issue 42, item 7); Cancel keeps them
    row.locator("button.dra-release").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=WAIT_MS)
    assert f"Release 2{X} H200?" in dialog.inner_text()
    assert "claims.ipynb loses them" in dialog.inner_text()
    dialog.locator("button.jp-mod-reject").click()
    dialog.wait_for(state="detached", timeout=WAIT_MS)
    assert [c["name"] for c in claims(lab)] == [claim["name"]]
    row.locator("button.dra-release").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Release").click()
    until("the claim released", lambda: claims(lab) == [])  # not announced: the user knows
    status.wait_for(state="hidden", timeout=WAIT_MS)
    until("no device held in the panel", lambda: held.count() == 0)
    # the kernel held the claim's devices in its environment; the next cell runs without
    # them: CUDA_VISIBLE_DEVICES is what it was before the claim
    unclaimed = cell_output(page, 0)
    assert cell_output(page, 2) == f"env {claim['env']['CUDA_VISIBLE_DEVICES']}"
    run_cell(page, 2, unclaimed)


def test_the_request_form_explains_why_gpu_9_cannot_be_met(
    lab: Lab, page: Any, released: None
) -> None:
    open_lab(page, lab)
    panel = open_panel(page)
    panel.locator(".dra-request summary").click()
    panel.locator('input[name="gpu"]').fill("9")
    panel.locator("button.dra-submit").click()
    error = panel.locator(".dra-request .dra-error")
    error.wait_for(timeout=WAIT_MS)
    message = error.inner_text()
    assert "9" in message and "8" in message, message
    assert "\n" not in message.strip()
    assert claims(lab) == []


def test_the_panel_shows_who_waits_in_line(lab: Lab, page: Any, released: None) -> None:
    """A command-line request waits behind this user's claim of all 8 GPUs: the panel
    shows the line (who, for what, since when), and no line once it got its devices."""
    held = lab.api("POST", "/dra/api/claims", {"gpu": 8})
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_JUPYTER_")}
    env.update(DRA_JUPYTER_LEDGER=str(lab.ledger), DRA_JUPYTER_INVENTORY="h200-8x",
               DRA_JUPYTER_POLL_INTERVAL="0.05")  # fmt: skip
    cli = [sys.executable, "-m", "dra_jupyter.cli"]
    argv = [*cli, "request", "gpu=2", "--timeout", "5m", "--lease", "5m", "--name", "in-line"]
    waiter = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    try:
        open_lab(page, lab)
        panel = open_panel(page)
        queue = panel.locator(".dra-queue")
        queue.wait_for(timeout=WAIT_MS)
        # the text, not as shown: the panel's headings are in capitals (CSS)
        assert "Waiting in line (1)" in (queue.locator("h3").text_content() or "")
        [entry] = queue.locator("li.dra-queue-entry").all_inner_texts()
        assert re.fullmatch(r".+: 2 GPUs, waiting \d+ s.*", entry), entry
        lab.api("DELETE", f"/dra/api/claims/{held['name']}")
        assert waiter.wait(timeout=120) == 0  # it got the devices
        queue.wait_for(state="detached", timeout=WAIT_MS)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
        subprocess.run([*cli, "release", "in-line"], env=env, capture_output=True, check=False)


def test_the_panel_lists_a_run_shows_its_output_and_cancels_it_when_asked_twice(
    lab: Lab, page: Any, released: None, tmp_path: Path
) -> None:
    """A background run of this user (dra.run, started elsewhere): the panel's Your runs
    shows it running on its GPU; Output shows its last lines; Cancel asks first, Keep it
    running leaves it, Cancel run stops it, and its card says Cancelled."""
    session = Session(Settings(ledger=lab.ledger, inventory="h200-8x", backend="local"))
    command = ["python", "-c", "import time; print('ready', flush=True); time.sleep(300)"]
    run = session.run(command, gpu=1, name="panel-run")
    try:
        open_lab(page, lab)
        panel = open_panel(page)
        card = panel.locator('section.dra-runs li.dra-run[data-run="panel-run"]')
        card.wait_for(timeout=WAIT_MS)
        until("the run's card says Running", lambda: "Running" in card.inner_text())
        assert f"1{X} H200" in card.locator(".dra-run-devices").inner_text()
        held = panel.locator("li.dra-claim .dra-claim-where")  # its claim, the run's
        texts = held.all_inner_texts
        until("its claim says its run", lambda: "run panel-run (Your runs)" in texts())
        card.locator(".dra-run-output summary").click()
        log = card.locator("pre.dra-run-log")
        until("its output in the card", lambda: "ready" in (log.all_inner_texts() or [""])[0])
        card.locator("button.dra-run-cancel").click()
        question = card.locator(".dra-run-confirm")
        question.wait_for(timeout=WAIT_MS)
        assert "Cancel run panel-run?" in question.inner_text()
        page.screenshot(path=str(screenshots_dir(tmp_path) / "devices-panel-runs.png"))
        card.locator("button.dra-run-cancel-no").click()
        question.wait_for(state="detached", timeout=WAIT_MS)
        assert run.status.phase == "Running"
        card.locator("button.dra-run-cancel").click()
        card.locator("button.dra-run-cancel-yes").click()
        until("the run's card says Cancelled", lambda: "Cancelled" in card.inner_text())
        assert card.locator("button.dra-run-cancel").count() == 0
        ended = run.status  # read again
        assert ended.phase == "Cancelled"
        # finished runs can be cleared off the list (issue 42, item 7: it only grew), also
        # after a reload of the page; dra.runs() still lists them
        panel.locator("section.dra-runs button.dra-runs-clear").click()
        card.wait_for(state="detached", timeout=WAIT_MS)
        assert panel.locator("section.dra-runs h3").text_content() == "Your runs"  # no count
        page.reload()
        panel = open_panel(page)
        panel.locator("section.dra-runs .dra-empty").wait_for(timeout=WAIT_MS)
        assert panel.locator('li.dra-run[data-run="panel-run"]').count() == 0
        assert [r.name for r in session.runs()] == ["panel-run"]
    finally:
        run.cancel()


def test_restart_with_claims_from_the_kernel_menu_keeps_the_devices(
    lab: Lab, page: Any, released: None
) -> None:
    cells = ["import dra_jupyter as dra\nclaim = dra.request(gpu=1)", ENV_CELL]
    notebook(page, lab, "restart.ipynb", cells)
    run_all_cells(page)
    [before] = until("the notebook's claim", lambda: claims(lab))
    page.locator(STATUS).filter(has_text=re.compile(rf"^1{X} H200")).wait_for(timeout=WAIT_MS)
    idle = page.locator("#jp-main-statusbar .jp-StatusBar-TextItem").filter(
        has_text=re.compile(r"\|\s*Idle")
    )
    idle.first.wait_for(timeout=WAIT_MS)
    page.get_by_role("menuitem", name="Kernel", exact=True).click()
    page.get_by_role("menuitem", name="Restart kernel with its devices").click()
    toast(page, f"Kernel restarted with 1{X} H200")
    # JupyterLab knows the kernel restarted: it reads Idle at once, not "Starting" until a
    # cell runs (a deadline for a hang, generous under load)
    page.wait_for_timeout(2000)  # past the restart's own status changes
    idle.first.wait_for(timeout=20_000)
    [after] = claims(lab)
    assert (after["name"], after["devices"], after["kernel_id"]) == (
        before["name"],
        before["devices"],
        before["kernel_id"],
    )
    page.locator(STATUS).filter(has_text=re.compile(rf"^1{X} H200")).wait_for(timeout=WAIT_MS)
    # the new kernel's process starts with the claim's devices in its environment
    visible = after["env"]["CUDA_VISIBLE_DEVICES"]
    assert visible and cell_output(page, 1) == f"env {visible}"
    run_cell(page, 1, f"env {visible}")


def test_release_all_from_the_palette(lab: Lab, page: Any, released: None) -> None:
    for name in ("one", "two"):
        lab.api("POST", "/dra/api/claims", {"gpu": 1, "name": name})
    open_lab(page, lab)
    page.locator(".jp-Launcher").wait_for(timeout=WAIT_MS)  # it takes the focus when it opens
    palette = page.locator(".lm-CommandPalette-input")
    item = page.locator(".lm-CommandPalette-item").filter(has_text="Release all my devices")

    def chosen() -> bool:
        # JupyterLab may not take keys yet while it sets up the page, and the palette
        # closes when something else takes the focus: open it and choose again then
        if not palette.is_visible():
            page.locator("#jp-main-dock-panel").click()
            page.keyboard.press("Control+Shift+c")
            page.wait_for_timeout(200)
            if not palette.is_visible():
                return False
        palette.fill("Release all my devices")
        try:
            item.click(timeout=2000)
        except PlaywrightTimeout:
            return False
        return True

    until("Release all my devices chosen in the command palette", chosen)
    page.locator(".jp-Dialog").get_by_role("button", name="Release").click()
    until("every claim released", lambda: claims(lab) == [])


@pytest.fixture(scope="module")
def idle_lab(tmp_path_factory: pytest.TempPathFactory, built_extension: Path) -> Iterator[Lab]:
    """Idle release after 12 s, warned 10 s before: the warning comes 2 s after a cell."""
    tmp = tmp_path_factory.mktemp("lab-idle")
    idle = ["--DRAExtensionApp.idle_timeout=12", "--DRAExtensionApp.idle_warning=10"]
    with running_lab(tmp, lab_argv(tmp, built_extension, *idle)) as server:
        yield server


def test_the_idle_warning_keep_resets_the_deadline_and_the_release_names_idle(
    idle_lab: Lab, page: Any, tmp_path: Path
) -> None:
    lab = idle_lab
    cells = ["import dra_jupyter as dra\nclaim = dra.request(gpu=1)"]
    notebook(page, lab, "idle.ipynb", cells)
    run_all_cells(page)
    [claim] = until("the notebook's claim", lambda: claims(lab))
    warning = toast(page, "will be released as idle")
    assert claim["name"] in warning.inner_text()
    page.screenshot(path=str(screenshots_dir(tmp_path) / "idle-warning.png"))
    before = claims(lab)[0]["idle_deadline"]
    warning.get_by_role("button", name="Keep").click()
    until("a later idle deadline", lambda: claims(lab)[0]["idle_deadline"] > before)
    # nothing runs: the claim is released as idle, and the notification says so
    toast(page, f"(claim {claim['name']}): its kernel was idle for the idle timeout")
    assert claims(lab) == []


def test_without_the_server_extension_the_panel_says_how_to_install_it(
    tmp_path_factory: pytest.TempPathFactory, built_extension: Path, page: Any
) -> None:
    tmp = tmp_path_factory.mktemp("lab-plain")
    argv = [f"--LabApp.extra_labextensions_path={built_extension}"]
    argv.append("--ServerApp.jpserver_extensions=dra_jupyter=False")
    with running_lab(tmp, argv) as lab:
        open_lab(page, lab)
        panel = open_panel(page)
        error = panel.locator(".dra-error")
        error.wait_for(timeout=WAIT_MS)
        assert "server extension is unavailable" in error.inner_text()
        assert "pip install dra-jupyter" in error.inner_text()
        assert page.locator(STATUS).is_hidden()


# Everything the panel shows lies within its width: nothing is cut off at the right. An
# element that cuts its own text (an ellipsis) lies within too; its full text is its title.
OUTSIDE = """panel => {
    const right = panel.getBoundingClientRect().right + 0.5;
    return [...panel.querySelectorAll('*')]
        .filter(e => e.getClientRects().length > 0 && e.getBoundingClientRect().right > right)
        .map(e => `${e.tagName.toLowerCase()}.${e.className.baseVal ?? e.className}`
                  + ` (${Math.round(e.getBoundingClientRect().right - right)} px): `
                  + (e.textContent || '').slice(0, 40));
}"""


def sidebar_width(page: Any, width: int) -> None:
    """Make the left sidebar ``width`` px wide, as a user's drag of its edge does."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
    box = handle.bounding_box()
    panel = page.locator(PANEL).bounding_box()
    assert box is not None and panel is not None
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + (panel["x"] + width - (box["x"])), y, steps=5)
    page.mouse.up()
    until(
        f"the panel {width} px wide",
        lambda: abs((page.locator(PANEL).bounding_box() or {"width": 0})["width"] - width) <= 2,
        seconds=10,
    )


def test_the_panel_fits_the_default_sidebar_width(lab: Lab, page: Any, released: None) -> None:
    """At JupyterLab's default sidebar width (about 250 px) nothing is cut off: the request
    form is one column, a device row wraps to two lines, long words wrap or end in an
    ellipsis with their full text on hover; wider, the form takes two columns."""
    lab.api("POST", "/dra/api/claims", {"gpu": 2, "name": "a-rather-long-claim-name-that-wraps"})
    open_lab(page, lab)
    panel = open_panel(page)
    until("8 devices in the panel", lambda: panel.locator("tr.dra-device").count() == 8)
    panel.locator(".dra-claim").wait_for(timeout=WAIT_MS)
    panel.locator(".dra-request summary").click()
    sidebar_width(page, 250)
    assert panel.evaluate(OUTSIDE) == []
    labels = panel.locator(".dra-request-grid label")
    lefts = {round(box["x"]) for box in (labels.nth(i).bounding_box() for i in range(6)) if box}
    assert len(lefts) == 1, lefts  # one column
    node = panel.locator("h4.dra-node-name").first
    assert node.get_attribute("title") == node.inner_text()  # its full text on hover
    sidebar_width(page, 480)
    assert panel.evaluate(OUTSIDE) == []
    lefts = {round(box["x"]) for box in (labels.nth(i).bounding_box() for i in range(6)) if box}
    assert len(lefts) >= 2, lefts  # it grows into columns


def cli_env(lab: Lab) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRA_JUPYTER_")}
    env.update(DRA_JUPYTER_LEDGER=str(lab.ledger), DRA_JUPYTER_INVENTORY="h200-8x")
    return env


def test_an_idle_warning_stays_true_one_per_claim_withdrawn_on_keep_and_release(
    idle_lab: Lab, page: Any
) -> None:
    """The warning says the clock time of the deadline (as true 2 s later as at once); a
    Keep in the panel withdraws it; the next round's warning is the claim's only one; a
    release withdraws that, leaving no Keep or Release buttons of a claim that is gone."""
    lab = idle_lab
    notebook(
        page, lab, "idle-rounds.ipynb", ["import dra_jupyter as dra\nclaim = dra.request(gpu=1)"]
    )
    panel = open_panel(page)
    run_all_cells(page)
    [claim] = until("the notebook's claim", lambda: claims(lab))
    name = claim["name"]
    warnings = page.locator(TOAST).filter(has_text="will be released as idle")
    first = toast(page, f"(claim {name})")
    text = first.inner_text()
    deadline = claims(lab)[0]["idle_deadline"]
    assert f"at {time.strftime('%H:%M:%S', time.localtime(deadline))}" in text, text
    page.wait_for_timeout(2000)
    assert first.inner_text() == text  # still true: no frozen countdown
    assert warnings.count() == 1

    row = panel.locator(f'.dra-claim[data-claim="{name}"]')
    row.locator("button.dra-keep").click()  # a Keep that is not the notification's
    until("the warning withdrawn after the Keep", lambda: warnings.count() == 0, seconds=20)
    until("the next round's warning", lambda: warnings.count() >= 1)
    page.wait_for_timeout(1500)
    assert warnings.count() == 1  # one warning for one claim
    assert claims(lab)[0]["idle_deadline"] > deadline

    row.locator("button.dra-release").click()
    until("the claim released", lambda: claims(lab) == [])
    until("the warning withdrawn after the release", lambda: warnings.count() == 0, seconds=20)
    stale = (
        page.locator(TOAST).filter(has_text=f"(claim {name})").get_by_role("button", name="Keep")
    )
    assert stale.count() == 0


def test_a_request_for_the_notebooks_kernel_offers_the_restart_with_its_devices(
    lab: Lab, page: Any, released: None
) -> None:
    """The panel's request "for the current notebook's kernel" says that the running kernel
    started without the devices, and offers the restart with them right there: after it,
    the notebook's cells see the devices."""
    notebook(page, lab, "attach.ipynb", [ENV_CELL])
    run_all_cells(page)
    until("the kernel ran the cell", lambda: cell_output(page, 0).startswith("env "))
    panel = open_panel(page)
    panel.locator(".dra-request summary").click()
    # the checkbox names the notebook (issue 42, item 6: "for the current notebook's kernel")
    attach = panel.locator("label.dra-attach")
    assert attach.inner_text().strip() == "for attach.ipynb\u2019s kernel", attach.inner_text()
    assert "lease" in (attach.get_attribute("title") or "")
    panel.locator('input[name="gpu"]').fill("1")
    panel.locator("button.dra-submit").click()
    message = panel.locator(".dra-request .dra-ok")
    message.wait_for(timeout=WAIT_MS)
    assert "attach.ipynb" in message.inner_text() and "restart" in message.inner_text()
    [claim] = claims(lab)
    # asked first, as JupyterLab's own Restart asks (issue 42, item 5): Cancel keeps the kernel
    message.locator("button.dra-restart").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=WAIT_MS)
    assert "its variables are lost" in dialog.inner_text()
    dialog.locator("button.jp-mod-reject").click()
    dialog.wait_for(state="detached", timeout=WAIT_MS)
    message.locator("button.dra-restart").click()
    page.locator(".jp-Dialog button.jp-mod-accept").click()
    panel.locator(".dra-request .dra-ok").filter(has_text="restarted with its devices").wait_for(
        timeout=WAIT_MS
    )
    # its card now offers no restart: the kernel has the devices
    card = panel.locator(f'.dra-claim[data-claim="{claim["name"]}"]')
    card.wait_for(timeout=WAIT_MS)
    assert card.locator("button.dra-restart").count() == 0
    visible = claim["env"]["CUDA_VISIBLE_DEVICES"]
    run_cell(page, 0, f"env {visible}")
    assert [c["name"] for c in claims(lab)] == [claim["name"]]
    # the form's answer goes with its claim, not stale after it (issue 42, item 7)
    answer = panel.locator(".dra-request .dra-ok")
    assert answer.evaluate("e => e.getBoundingClientRect().bottom <= window.innerHeight")
    lab.api("DELETE", f"/dra/api/claims/{claim['name']}")
    answer.wait_for(state="detached", timeout=WAIT_MS)


def test_a_cell_waiting_in_line_shows_in_the_status_bar(
    lab: Lab, page: Any, released: None
) -> None:
    """All 8 GPUs are held elsewhere; the notebook's cell asks for 2 and waits: the status
    bar says that its kernel waits in line (JupyterLab's own item may read Idle), and then
    what it got."""
    held = lab.api("POST", "/dra/api/claims", {"gpu": 8})
    cells = ["import dra_jupyter as dra\nclaim = dra.request(gpu=2, timeout='5m')"]
    notebook(page, lab, "in-line.ipynb", cells)
    run_all_cells(page)
    status = page.locator(STATUS)
    status.filter(has_text="waiting in line for 2 GPUs (number 1)").wait_for(timeout=WAIT_MS)
    lab.api("DELETE", f"/dra/api/claims/{held['name']}")
    status.filter(has_text=re.compile(rf"^2{X} H200")).wait_for(timeout=WAIT_MS)
    assert "waiting" not in status.inner_text()


def test_a_restart_with_its_devices_is_activity_it_withdraws_the_idle_warning(
    idle_lab: Lab, page: Any
) -> None:
    """A restart with the devices starts the idle countdown again: the warning shown before
    it goes, the deadline is a full idle timeout after the restart, and JupyterLab reads
    the new kernel Idle."""
    lab = idle_lab
    notebook(
        page, lab, "idle-restart.ipynb", ["import dra_jupyter as dra\nclaim = dra.request(gpu=1)"]
    )
    run_all_cells(page)
    [claim] = until("the notebook's claim", lambda: claims(lab))
    warnings = page.locator(TOAST).filter(has_text="will be released as idle")
    toast(page, f"(claim {claim['name']})")
    before = claims(lab)[0]["idle_deadline"]
    page.get_by_role("menuitem", name="Kernel", exact=True).click()
    started = time.time()
    page.get_by_role("menuitem", name="Restart kernel with its devices").click()
    toast(page, f"Kernel restarted with 1{X} H200")
    until("the warning withdrawn after the restart", lambda: warnings.count() == 0, seconds=20)
    after = claims(lab)[0]["idle_deadline"]
    assert after > before and after >= started + 12 - 1, (before, after, started)
    idle = page.locator("#jp-main-statusbar .jp-StatusBar-TextItem").filter(
        has_text=re.compile(r"\|\s*Idle")
    )
    idle.first.wait_for(timeout=20_000)
    lab.api("DELETE", f"/dra/api/claims/{claim['name']}")


def test_the_panel_in_the_dark_theme_at_the_default_width(
    lab: Lab, page: Any, tmp_path: Path, released: None
) -> None:
    """JupyterLab Dark, the sidebar as it opens: a notebook's claim and the devices, nothing
    cut off (the picture is docs/images/devices-panel-dark.png)."""
    themes = "/lab/api/settings/@jupyterlab/apputils-extension:themes"
    lab.api("PUT", themes, {"raw": json.dumps({"theme": "JupyterLab Dark"})})
    try:
        cells = ["import dra_jupyter as dra\nclaim = dra.request(gpu=2)"]
        notebook(page, lab, "dark.ipynb", cells)
        page.wait_for_function(
            "() => document.body.dataset.jpThemeLight === 'false'", timeout=WAIT_MS
        )
        panel = open_panel(page)
        run_all_cells(page)
        until("the notebook's claim", lambda: claims(lab))
        held = panel.locator("tr.dra-state-held")
        until("2 devices held in the panel", lambda: held.count() == 2)
        assert panel.evaluate(OUTSIDE) == []
        page.wait_for_timeout(300)  # let the page settle for the picture
        page.screenshot(path=str(screenshots_dir(tmp_path) / "devices-panel-dark.png"))
    finally:
        lab.api("PUT", themes, {"raw": json.dumps({"theme": "JupyterLab Light"})})

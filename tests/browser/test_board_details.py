"""The board and the card in JupyterLab's dark theme, in a window 900 pixels wide: pills
readable (dark text on their pale colours), the holder column wide enough, and a claim's
holder said once, not on each of its devices' rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.browser.conftest import (
    HELD,
    WAIT_MS,
    Lab,
    open_notebook,
    run_all_cells,
    screenshots_dir,
)

CELLS = ["%load_ext dra_jupyter\nc = dra.request(gpu=4)\nc", "%dra devices"]

# WCAG's contrast ratio of an element's text colour against its own background colour
CONTRAST = """(e) => {
  const rgb = (s) => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = (c) => {
    const [r, g, b] = c.map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const style = getComputedStyle(e);
  const [a, b] = [lum(rgb(style.color)), lum(rgb(style.backgroundColor))];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


def test_dark_theme_at_900_pixels(lab: Lab, page: Any, tmp_path: Path) -> None:
    page.set_viewport_size({"width": 900, "height": 900})
    theme = {"raw": json.dumps({"theme": "JupyterLab Dark"})}  # Settings > Theme, saved
    lab.api("PUT", "/lab/api/settings/@jupyterlab/apputils-extension:themes", theme)
    open_notebook(page, lab, "details.ipynb", CELLS)
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=WAIT_MS)
    run_all_cells(page)
    board = page.locator(".dra-board")
    board.wait_for(timeout=WAIT_MS)
    page.wait_for_function(HELD.format(4), timeout=WAIT_MS)
    board.screenshot(path=str(screenshots_dir(tmp_path) / "board-dark-900.png"))
    page.locator(".dra-card").screenshot(path=str(screenshots_dir(tmp_path) / "card-dark.png"))

    pills = page.locator(
        ".dra-board .dra-pill-held, .dra-board .dra-pill-free, .dra-card .dra-pill"
    )
    assert pills.count() >= 9
    for i in range(pills.count()):
        ratio = pills.nth(i).evaluate(CONTRAST)
        assert ratio >= 4.5, (pills.nth(i).inner_text(), ratio)

    holders = board.locator("td.dra-holder")
    texts = [t for t in holders.all_inner_texts() if t.strip()]
    assert len(texts) == 4
    assert sum("kernel " in t for t in texts) == 1  # the holder once, then the claim's name
    assert all(t.strip() == texts[1].strip() for t in texts[1:])
    width = holders.first.evaluate("(e) => e.getBoundingClientRect().width")
    name = board.locator(".dra-claim-name").first.evaluate("(e) => e.getBoundingClientRect().width")
    assert width >= 100 and width >= name, (width, name)

"""The board and the card in JupyterLab's dark theme, in a window 900 pixels wide: pills
and the memory bar's label readable, node names on one line, the holder column wide
enough and the same on each of a claim's devices (its notebook by name); at 700 pixels the
holder is cut with an ellipsis, its full text on hover."""

from __future__ import annotations

import json
import re
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
    # all at once: the card re-renders its countdown every second, and a pill read one by
    # one can be a node it has just replaced (no style: CI's "reading 'slice'" of null)
    ratios = pills.evaluate_all(f"(pills) => pills.map((e) => [e.innerText, ({CONTRAST})(e)])")
    assert len(ratios) >= 9
    for text, ratio in ratios:
        assert ratio >= 4.5, (text, ratio)

    holders = board.locator("td.dra-holder")
    texts = [t for t in holders.all_inner_texts() if t.strip()]
    assert len(texts) == 4
    # the same on each of the claim's devices, the notebook by its name (no kernel id)
    strip = [re.sub(r"idle release in \S+", "", t).strip() for t in texts]
    assert all(t == strip[0] for t in strip), texts
    assert "details.ipynb" in texts[0] and "kernel " not in texts[0], texts
    width = holders.first.evaluate("(e) => e.getBoundingClientRect().width")
    name = board.locator(".dra-claim-name").first.evaluate("(e) => e.getBoundingClientRect().width")
    assert width >= 100 and width >= name, (width, name)
    # node names on one line: not broken at their hyphen
    node = board.locator(".dra-node").first
    assert node.evaluate("(e) => e.getClientRects().length") == 1
    lines = node.evaluate(
        "(e) => e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).fontSize)"
    )
    assert lines < 2, lines  # in font sizes: one line is about 1.2
    # the memory bar's label reads on its fill (WCAG AA for its text)
    fill = board.locator(".dra-bar-fill").first.evaluate(
        "(e) => getComputedStyle(e).backgroundColor"
    )
    label = board.locator(".dra-bar-label").first.evaluate("(e) => getComputedStyle(e).color")
    assert contrast(label, fill) >= 4.5, (label, fill)

    # 700 px: the holder is cut with an ellipsis (its full text on hover), inside the page
    page.set_viewport_size({"width": 700, "height": 900})
    line = board.locator("td.dra-holder .dra-claim").first
    assert line.evaluate("(e) => getComputedStyle(e).textOverflow") == "ellipsis"
    assert "details.ipynb" in (line.get_attribute("title") or "")


def contrast(a: str, b: str) -> float:
    """WCAG's contrast ratio of two CSS rgb() colours."""

    def lum(css: str) -> float:
        r, g, b = (float(v) / 255 for v in re.findall(r"[\d.]+", css)[:3])
        c = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in (r, g, b)]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

    x, y = lum(a), lum(b)
    return (max(x, y) + 0.05) / (min(x, y) + 0.05)

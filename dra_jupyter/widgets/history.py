"""A small SVG chart of a utilisation history (``claim.history()``, ``dra.history()``),
without matplotlib: ``HistoryChart(claim.history())`` in a notebook cell."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

COLORS = ("#1976d2", "#e65100", "#2e7d32", "#6a1b9a", "#c62828", "#00838f", "#5d4037", "#455a64")


class HistoryChart:
    """Utilisation (%) over time, one line per device; the frame is kept as ``.frame``."""

    def __init__(
        self,
        frame: pd.DataFrame,
        *,
        column: str = "utilization",
        width: int = 560,
        height: int = 160,
    ) -> None:
        self.frame = frame
        self.column = column
        self.width = width
        self.height = height

    def _repr_svg_(self) -> str:
        return self.svg()

    def svg(self) -> str:
        w, h, left, bottom = self.width, self.height, 36, 18
        plot_w, plot_h = w - left - 8, h - bottom - 8
        frame = self.frame.dropna(subset=[self.column])
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            f'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="10">',
            f'<rect x="{left}" y="8" width="{plot_w}" height="{plot_h}" fill="none" '
            'stroke="#bbb"/>',
        ]
        top = 100.0 if self.column == "utilization" else max(float(frame[self.column].max()), 1.0)
        for tick in (0.0, 0.5, 1.0):
            y = 8 + plot_h * (1 - tick)
            label = f"{tick * top:.0f}" + ("%" if self.column == "utilization" else "")
            parts.append(f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end">{label}</text>')
        if frame.empty:
            parts.append(f'<text x="{left + 8}" y="{8 + plot_h / 2}">no samples</text>')
        else:
            origin = frame["time"].min()
            times = (frame["time"] - origin).dt.total_seconds()
            start, span = 0.0, max(float(times.max()), 1.0)
            for i, (device, rows) in enumerate(frame.groupby("device", sort=False)):
                t = (rows["time"] - origin).dt.total_seconds()
                points = " ".join(
                    f"{left + plot_w * (float(x) - start) / span:.1f},"
                    f"{8 + plot_h * (1 - min(float(v) / top, 1.0)):.1f}"
                    for x, v in zip(t, rows[self.column], strict=True)
                )
                color = COLORS[i % len(COLORS)]
                parts.append(
                    f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                    f'points="{points}"><title>{html.escape(str(device))}</title></polyline>'
                )
                name = html.escape(str(device).rsplit("/", 1)[-1])
                parts.append(f'<text x="{left + 6}" y="{20 + 12 * i}" fill="{color}">{name}</text>')
            minutes = span / 60
            parts.append(
                f'<text x="{left + plot_w}" y="{h - 4}" text-anchor="end">'
                f"last {minutes:.1f} min</text>"
            )
        if len(self.frame) and bool(self.frame["simulated"].any()):
            parts.append(
                f'<text x="{left + plot_w - 4}" y="20" text-anchor="end" fill="#b06f00" '
                'font-weight="bold">SIMULATED</text>'
            )
        parts.append("</svg>")
        return "".join(parts)

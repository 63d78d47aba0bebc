"""Tables (Markdown) and the plot of a placement run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from benchmarks.placement.metrics import Summary


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


SERVICE = ("1 GPU", "2 GPUs", "4 GPUs", "8 GPUs", "MIG 1g.18gb", "MIG 2g.35gb", "MIG 3g.71gb")


def service_table(summaries: Sequence[Summary]) -> str:
    head = ["load", "policy", *SERVICE, "MIG slices", "shares", "all", "GPU-h served"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        shares = [s.served[k] * s.offered[k] for k in s.served if k.startswith("shared")]
        offered = sum(s.offered[k] for k in s.offered if k.startswith("shared"))
        row = [
            f"{s.load:.0%}",
            s.policy,
            *(_pct(s.served[k]) for k in SERVICE),
            _pct(s.mig_slices_served),
            _pct(sum(shares) / offered if offered else None),
            _pct(s.served_all),
            f"{s.gpu_hours:,.0f}",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def quality_table(summaries: Sequence[Summary]) -> str:
    head = [
        "load",
        "policy",
        "2-GPU on one PCIe root",
        "4-GPU on one NUMA node",
        "free nodes at an 8-GPU arrival",
        "stranded GPUs then",
        "MIG slices stranded for a 3g",
        "busy GPUs",
        "losses a repack would avoid",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        if s.policy == "bound":
            continue
        row = [
            f"{s.load:.0%}",
            s.policy,
            _pct(s.root_local_2),
            _pct(s.numa_local_4),
            _num(s.free_nodes_at_8),
            _num(s.stranded_gpus_at_8),
            _num(s.stranded_mig_at_3g),
            _num(s.busy_gpus),
            _pct(s.repackable),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


PANELS: tuple[tuple[str, str], ...] = (
    ("8-GPU claims served on arrival", "8 GPUs"),
    ("MIG memory slices served on arrival", "mig_slices_served"),
    ("MIG 3g.71gb claims served on arrival", "MIG 3g.71gb"),
    ("2-GPU claims on one PCIe root", "root_local_2"),
    ("4-GPU claims on one NUMA node", "numa_local_4"),
    ("stranded GPUs at an 8-GPU arrival", "stranded_gpus_at_8"),
)


def plot(summaries: Sequence[Summary], path: Path, title: str) -> None:
    """One panel per quality metric, over offered load, one line per policy."""
    import matplotlib  # noqa: PLC0415  (a dev dependency, loaded only to plot)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    policies = list(dict.fromkeys(s.policy for s in summaries))
    fig, axes = plt.subplots(2, 3, figsize=(14, 8))
    for ax, (label, metric) in zip(axes.flat, PANELS, strict=True):
        for policy in policies:
            mine = sorted((s for s in summaries if s.policy == policy), key=lambda s: s.load)
            values = [
                s.served.get(metric) if metric in s.served else getattr(s, metric, None)
                for s in mine
            ]
            points = [
                (s.load * 100, v * (1 if metric == "stranded_gpus_at_8" else 100))
                for s, v in zip(mine, values, strict=True)
                if v is not None and not (policy == "bound" and metric not in s.served)
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(
                    xs, ys, marker="o", label=policy, linestyle="--" if policy == "bound" else "-"
                )
        ax.set_title(label)
        ax.set_xlabel("offered load (%)")
        ax.set_ylabel("GPUs" if metric == "stranded_gpus_at_8" else "%")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)

"""Run the notebooks of ``examples/`` in real kernels and read their outputs by cell tag."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TIMEOUT = 180  # seconds a cell may run before nbclient gives up (a hang, not a timing)


def kernel_env(ledger: Path, inventory: str = "h200-8x") -> dict[str, str]:
    """This process's environment, with the example's ledger and inventory and no device
    variable, kernel id or strategy of the machine."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DRA_JUPYTER_") and not k.endswith("_VISIBLE_DEVICES")
    }
    env.update(DRA_JUPYTER_LEDGER=str(ledger), DRA_JUPYTER_INVENTORY=inventory)
    return env


def read(name: str) -> Any:
    return nbformat.read(EXAMPLES / name, as_version=4)  # type: ignore[no-untyped-call]


def execute(name: str, env: Mapping[str, str], cwd: Path) -> Any:
    """The notebook, executed top to bottom; a cell that raises fails the test."""
    nb = read(name)
    client = NotebookClient(
        nb,
        timeout=TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
        store_widget_state=True,
    )
    client.execute(env=dict(env), cwd=str(cwd))
    return nb


def cell(nb: Any, tag: str) -> Any:
    found = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(found) == 1, f"one cell tagged {tag!r} expected, found {len(found)}"
    return found[0]


def text(nb: Any, tag: str) -> str:
    """Everything a cell showed as text: streams, and the text/plain of results."""
    parts = []
    for out in cell(nb, tag).outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.append(out.data.get("text/plain", ""))
        elif out.output_type == "error":
            parts.append("\n".join(out.traceback))
    return "".join(parts)


def streams(nb: Any, tag: str, name: str) -> str:
    return "".join(
        o.text for o in cell(nb, tag).outputs if o.output_type == "stream" and o.name == name
    )


def html(nb: Any, tag: str) -> str:
    return "".join(
        o.data.get("text/html", "")
        for o in cell(nb, tag).outputs
        if o.output_type in ("execute_result", "display_data")
    )


def widget_models(nb: Any, tag: str) -> list[str]:
    """The ids of the widget models a cell displayed."""
    return [
        o.data[WIDGET_VIEW]["model_id"]
        for o in cell(nb, tag).outputs
        if o.output_type in ("execute_result", "display_data") and WIDGET_VIEW in o.data
    ]


def widget_state(nb: Any, model_id: str) -> dict[str, Any]:
    """The last state of a widget model, as nbclient stored it in the notebook."""
    state: dict[str, Any] = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"][
        "state"
    ][model_id]["state"]
    return state

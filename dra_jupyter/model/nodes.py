"""core/v1 NodeSelector matching, as upstream ``corev1/nodeaffinity`` does it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dra_jupyter.model.objects import Node, NodeSelection


def _requirement_matches(req: Mapping[str, Any], value: str | None) -> bool:
    op = req.get("operator")
    values: Sequence[str] = req.get("values") or ()
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def selector_matches(selector: Mapping[str, Any], node: Node | None) -> bool:
    """Whether ``node`` satisfies a NodeSelector: any term, all requirements of a term.

    A term without requirements matches nothing, as upstream; ``None`` (no node) matches nothing.
    """
    if node is None:
        return False
    for term in selector.get("nodeSelectorTerms") or ():
        expressions = term.get("matchExpressions") or ()
        fields = term.get("matchFields") or ()
        if not expressions and not fields:
            continue
        if all(
            _requirement_matches(r, node.labels.get(r.get("key", ""))) for r in expressions
        ) and all(
            _requirement_matches(r, node.name if r.get("key") == "metadata.name" else None)
            for r in fields
        ):
            return True
    return False


def selection_matches(selection: NodeSelection, node: Node | None) -> bool:
    """Upstream ``NodeMatches``: a node name, all nodes, or a node selector."""
    if selection.node_name is not None:
        return node is not None and node.name == selection.node_name
    if selection.all_nodes:
        return True
    if selection.node_selector is not None:
        return selector_matches(selection.node_selector, node)
    return False

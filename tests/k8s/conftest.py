"""tests/k8s: the fixtures of the control plane are in :mod:`tests.k8s.fixtures` (a plugin
of the whole suite, so that tests/hub shares the one control plane)."""

from tests.k8s.fixtures import INVENTORY, NODES, WAIT_S, wait_for

__all__ = ["INVENTORY", "NODES", "WAIT_S", "wait_for"]

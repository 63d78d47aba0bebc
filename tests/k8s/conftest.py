"""tests/k8s: the fixtures of the control plane are in :mod:`tests.k8s.fixtures` (a plugin
of the whole suite, so that tests/hub shares the one control plane), those of the test run's
real node in :mod:`tests.k8s.nodefixtures` (a plugin too); the GPU kernels' server fixtures
are :mod:`tests.k8s.kernelserver`'s."""

from tests.k8s.fixtures import INVENTORY, NODES, WAIT_S, wait_for
from tests.k8s.kernelserver import idle_server, server

__all__ = ["INVENTORY", "NODES", "WAIT_S", "idle_server", "server", "wait_for"]

"""The embedded DRA allocator: pure, thread-safe, with upstream Kubernetes semantics.

>>> from dra_jupyter.allocator import Allocator
>>> Allocator(slices, classes).allocate(claims, node="gpu-1")   # doctest: +SKIP
"""

from dra_jupyter.allocator.core import STRATEGIES, Allocator, Strategy
from dra_jupyter.allocator.explain import Explanation, NodeReport, RequestReport
from dra_jupyter.model.objects import AllocationResult, DeviceResult

__all__ = [
    "STRATEGIES",
    "AllocationResult",
    "Allocator",
    "DeviceResult",
    "Explanation",
    "NodeReport",
    "RequestReport",
    "Strategy",
]

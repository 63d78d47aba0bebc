"""dra-jupyter: GPUs, MIG slices and TPUs for Jupyter through Kubernetes DRA, without YAML.

Importing the package does no I/O: nothing probes hardware or clusters until asked.
The embedded allocator lives in :mod:`dra_jupyter.allocator`.
"""

from dra_jupyter.errors import (
    AllocationError,
    DraJupyterError,
    InvalidInputError,
    ObjectError,
    SelectorError,
)

__version__ = "0.1.0"

__all__ = [
    "AllocationError",
    "DraJupyterError",
    "InvalidInputError",
    "ObjectError",
    "SelectorError",
    "__version__",
]

"""DRA CEL selectors: ``device.driver == "gpu.nvidia.com" && ...``, as Kubernetes evaluates them.

Compile each expression once with :func:`compile_selector` (cached by text), convert each device
once with :func:`device_view`, then call :meth:`CompiledSelector.matches`. Compilation applies
upstream's validation: at most :data:`MAX_EXPRESSION_LENGTH` bytes, only the ``device`` variable
and the functions of the Kubernetes environment, and an estimated cost of at most
:data:`MAX_COST` (see :mod:`dra_jupyter.selectors.cost`). What the engine cannot do is listed in
:mod:`dra_jupyter.selectors.engine`.
"""

from dra_jupyter.selectors.engine import (
    MAX_COST,
    MAX_EXPRESSION_LENGTH,
    CelEvaluationError,
    CompiledSelector,
    DeviceView,
    compile_selector,
    device_view,
)

__all__ = [
    "MAX_COST",
    "MAX_EXPRESSION_LENGTH",
    "CelEvaluationError",
    "CompiledSelector",
    "DeviceView",
    "compile_selector",
    "device_view",
]

"""The one error hierarchy of dra-jupyter.

Every error a user can cause or meet derives from :class:`DraJupyterError`,
and its message says where (which object, claim, request or field), what is
wrong, and what to do about it::

    DraJupyterError
    ├── InvalidInputError          input that can never be accepted (exit code 2)
    │   ├── ObjectError            a malformed Kubernetes object or field
    │   └── SelectorError          CEL that does not compile, is too costly,
    │                              or fails while it is evaluated on a device
    ├── AllocationError            a claim that cannot be allocated (exit code 1);
    │                              carries the structured explanation
    └── ClusterError               the Kubernetes API server could not be reached, or
                                   refused a request (exit code 3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dra_jupyter.allocator.explain import Explanation


class DraJupyterError(Exception):
    """Base class of every error raised by dra-jupyter."""


class InvalidInputError(DraJupyterError):
    """Input that can never be accepted, whatever the state of the devices."""


class ObjectError(InvalidInputError):
    """A Kubernetes object, or one of its fields, is malformed or out of limits.

    ``where`` names the object (``ResourceClaim default/nb-7``) and ``field``
    the path inside it (``spec.devices.requests[0].exactly.count``).
    """

    def __init__(self, where: str, field: str, problem: str, remedy: str = "") -> None:
        self.where = where
        self.field = field
        self.problem = problem
        self.remedy = remedy
        text = f"{where}, {field}: {problem}" if field else f"{where}: {problem}"
        if remedy:
            text = f"{text}; {remedy}"
        super().__init__(text)


class SelectorError(InvalidInputError):
    """A CEL selector does not compile, exceeds a limit, or fails on a device."""

    def __init__(self, where: str, problem: str, remedy: str = "") -> None:
        self.where = where
        self.problem = problem
        self.remedy = remedy
        text = f"{where}: {problem}"
        if remedy:
            text = f"{text}; {remedy}"
        super().__init__(text)


class DraJupyterWarning(UserWarning):
    """Something the user should know that does not stop the work (e.g. CUDA already loaded)."""


class AllocationError(DraJupyterError):
    """No allocation exists for the claims now; ``explanation`` says why."""

    def __init__(self, message: str, explanation: Explanation | None = None) -> None:
        self.explanation = explanation
        super().__init__(message)


class ClusterError(DraJupyterError):
    """The Kubernetes API server could not be reached or refused a request.

    ``status`` is the HTTP status it answered (0 when it could not be reached).
    """

    def __init__(self, message: str, status: int = 0) -> None:
        self.status = status
        super().__init__(message)

"""Kubernetes feature gates that change what the allocator or the API validation does.

The defaults are those of Kubernetes 1.37 with default flags (kube-apiserver and
kube-scheduler). ``DRAFractionalCapacityRange`` is off there: its default-on entry needs
a minimum compatibility version of 1.37, and 1.37 components default to 1.36. With it
off, a consumable capacity's ``validRange`` is checked and rounded on whole numbers
(``Quantity.Value()``, which rounds up); with it on, on milli-units where the range
or default has a fraction.

:func:`use_features` switches gates for the code it wraps (a context variable: threads
and asyncio tasks each see their own); :func:`current` reads them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Features:
    """Gates, by their Kubernetes names in snake case."""

    dra_fractional_capacity_range: bool = False
    # off in 1.37: list-valued attributes are read (CEL sees lists), but a constraint takes
    # only scalar values (allocator/constraints.py); on: a list acts as a set there
    dra_list_type_attributes: bool = False


DEFAULT = Features()
_CURRENT: contextvars.ContextVar[Features] = contextvars.ContextVar("features", default=DEFAULT)


def current() -> Features:
    return _CURRENT.get()


@contextlib.contextmanager
def use_features(**gates: bool) -> Iterator[Features]:
    """``with use_features(dra_fractional_capacity_range=True): ...``"""
    features = dataclasses.replace(current(), **gates)
    token = _CURRENT.set(features)
    try:
        yield features
    finally:
        _CURRENT.reset(token)

"""Device attribute values as ResourceSlices publish them."""

from __future__ import annotations

from dataclasses import dataclass

import semver


@dataclass(frozen=True, order=False)
class Version:
    """A ``version`` attribute: a strict semantic version (semver 2.0.0), as upstream requires."""

    text: str

    def __post_init__(self) -> None:
        if not semver.Version.is_valid(self.text):
            raise ValueError(
                f"{self.text!r} is not a semantic version (expected MAJOR.MINOR.PATCH)"
            )

    @property
    def parsed(self) -> semver.Version:
        return semver.Version.parse(self.text)

    def __str__(self) -> str:
        return self.text


Scalar = bool | int | str | Version
"""One attribute value: ``bool``, ``int`` (int64), ``string`` (<= 64 chars) or ``version``."""

AttributeValue = Scalar | tuple[bool, ...] | tuple[int, ...] | tuple[str, ...] | tuple[Version, ...]
"""A scalar, or a list (``bools``/``ints``/``strings``/``versions``; DRAListTypeAttributes)."""


def as_set(value: AttributeValue) -> frozenset[Scalar]:
    """The value as a set: a scalar is a singleton (the set semantics of list-type constraints)."""
    if isinstance(value, tuple):
        return frozenset(value)
    return frozenset((value,))

"""Fixtures of the service tier: real Unix users (root only) and a real daemon."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.service.accounts import User, unix_users


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, User]]:
    """``alice``, ``bob`` and ``carol`` (an admin), removed after the module."""
    if os.geteuid() != 0:
        pytest.skip("the service tier makes real Unix users: run it as root (CI does)")
    with unix_users("alice", "bob", "carol", admin_group="dsvadm") as made:
        yield made

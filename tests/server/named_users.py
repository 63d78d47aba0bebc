"""An identity provider that names real users, as JupyterHub's does: the server's token
authenticates, and the ``X-Test-User`` header says who calls (``alice`` without one). One
server then serves several users, each seeing their own claims and runs."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from jupyter_server.auth.identity import IdentityProvider, User

USER_HEADER = "X-Test-User"


class NamedUsers(IdentityProvider):
    async def get_user(self, handler: Any) -> User | None:
        found = super().get_user(handler)
        user = await found if isinstance(found, Awaitable) else found
        if user is None:  # no token: not authenticated
            return None
        return User(username=handler.request.headers.get(USER_HEADER, "alice"))


def as_user(name: str) -> dict[str, str]:
    """The headers of a call by ``name``."""
    return {USER_HEADER: name}

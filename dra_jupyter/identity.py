"""Who owns a claim: one rule for the kernel, the REST API, the CLI and the magics.

1. Under JupyterHub, the hub's user: ``JUPYTERHUB_USER``, which the hub's spawner puts in
   the single-user server's environment, and which the server's kernels inherit. The
   notebook's OS user there is often a shared one (``jovyan``), so it says nothing.
2. For a REST call, the server's identity provider's user, when that provider names real
   users (JupyterHub's does); jupyter_server's own token and password providers make an
   anonymous user per browser, so everyone they let in is the server's owner: rule 1 or 3.
3. Else the OS user of the process.

Claims carry that user on both backends (the ledger's owner, the ``dra-jupyter/user``
label of a ResourceClaim). This decides ownership among cooperating processes; it does
not protect against a user who writes the embedded ledger file directly (the
shared-machine service identifies callers by their kernel credentials instead).
"""

from __future__ import annotations

import functools
import getpass
import os
from collections.abc import Mapping

HUB_USER_ENV = "JUPYTERHUB_USER"


def current_user(environ: Mapping[str, str] | None = None) -> str:
    """This process's user: JupyterHub's (rule 1), else the OS user (rule 3)."""
    env = os.environ if environ is None else environ
    return env.get(HUB_USER_ENV, "").strip() or _os_user(
        os.getuid() if hasattr(os, "getuid") else -1,
        tuple(os.environ.get(name, "") for name in _LOGIN_ENV),
    )


_LOGIN_ENV = ("LOGNAME", "USER", "LNAME", "USERNAME")  # what getpass.getuser reads first


@functools.lru_cache(maxsize=16)
def _os_user(uid: int, login_env: tuple[str, ...]) -> str:
    """``getpass.getuser()``, once per uid and login variables: its password-database
    lookup took about a millisecond, on every REST call."""
    return getpass.getuser()


def request_user(provider_user: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The owner of a REST call's claims: the identity provider's user when it names real
    users (``provider_user``), else :func:`current_user` (rule 2)."""
    return provider_user or current_user(environ)

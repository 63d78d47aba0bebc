"""What a process that reads the cluster answers a kernel that asks whether its request could
be met (:mod:`dra_jupyter.kernel.asking`): the Jupyter server from its watched views
(:mod:`dra_jupyter.server.kernelasks`), or, for a server under a hub's shared view, the
shared view from its own (:mod:`dra_jupyter.hub.sharedview`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dra_jupyter.claimspec import REQUEST_KEYS
from dra_jupyter.errors import DraJupyterError, NeverPossibleError

if TYPE_CHECKING:
    from dra_jupyter.api.session import Session


def asked(
    session: Session, spec: Mapping[str, Any], name: str, *, never: bool = True
) -> tuple[list[str] | None, str]:
    """``(classes, never)``: the cluster's DeviceClass names where ``spec`` (``dra.request``'s
    keywords, named ``name``) could be met on ``session``'s idle devices; else None and, where
    it could never be met and ``never`` is asked for, the one line that says why (the
    refusal's message, without its caller), else "" (a keyword that is wrong, the cluster not
    readable: the kernel checks it itself and says what is wrong in its own words). Not
    ``never``: nothing is worked out to say why (the caller leaves that to the kernel)."""
    try:
        claim = session.build(dict(spec), name, REQUEST_KEYS)
        session.check_possible(spec, claim, why=never)
        return session.class_names(), ""
    except NeverPossibleError as err:
        return None, err.message if never else ""
    except DraJupyterError:
        return None, ""

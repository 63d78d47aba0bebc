"""The daemon's op table: every op of the protocol served, and no other, in its order."""

from __future__ import annotations

import pytest

from dra_jupyter.service import protocol
from dra_jupyter.service.ops import HANDLERS, checked


def test_the_daemon_serves_every_op_of_the_protocol_and_no_other() -> None:
    assert tuple(HANDLERS) == protocol.OPS
    assert all(handler.__doc__ for handler in HANDLERS.values())


def test_a_table_that_is_not_the_protocols_is_refused() -> None:
    fewer = {op: handler for op, handler in HANDLERS.items() if op != "metrics"}
    with pytest.raises(RuntimeError, match=r"not served \['metrics'\]"):
        checked(fewer)
    more = {**HANDLERS, "drop": HANDLERS["release"]}
    with pytest.raises(RuntimeError, match=r"not in protocol.OPS \['drop'\]"):
        checked(more)
    with pytest.raises(RuntimeError, match="another order"):
        checked(dict(reversed(HANDLERS.items())))

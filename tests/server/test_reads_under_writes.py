"""Reads never wait behind writes: a GET is answered while another process holds the
ledger's write lock, and while a POST of this server waits for that lock; a 201 means
committed (the group commit answers only after its commit).

Nothing here asserts a duration: the lock is held until the test lets it go, so a read
that waited for it could not answer before (it would wait out the ledger's busy timeout,
then fail)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dra_jupyter.local.ledger import Ledger
from tests.server.conftest import Fetch

# Another process: take the ledger's write lock, say so, hold it until stdin closes.
_HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


@contextlib.contextmanager
def write_lock_held(ledger: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds the ledger's write lock inside the block."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(ledger)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
        holder.stdout.close()


def body(response: Any) -> Any:
    return json.loads(response.body)


async def post(jp_fetch: Fetch, payload: Any) -> Any:
    return await jp_fetch(
        "dra", "api", "claims", method="POST", body=json.dumps(payload), raise_error=False
    )


async def test_reads_are_answered_while_another_process_holds_the_write_lock(
    jp_fetch: Fetch, ledger_path: Path
) -> None:
    made = body(await post(jp_fetch, {"gpu": 2}))
    with write_lock_held(ledger_path) as holder:
        listed = body(await jp_fetch("dra", "api", "claims"))["claims"]
        one = body(await jp_fetch("dra", "api", "claims", made["name"]))
        devices = body(await jp_fetch("dra", "api", "devices"))["devices"]
        assert holder.poll() is None  # still holding the lock: the reads did not wait for it
    assert [c["name"] for c in listed] == [made["name"]]
    assert one["devices"] == made["devices"]
    assert sum(d["state"] == "held" for d in devices) == 2


async def test_a_read_is_answered_while_a_write_of_this_server_waits(
    jp_fetch: Fetch, ledger: Ledger
) -> None:
    with write_lock_held(ledger.path) as holder:  # on a ledger that exists (as a server's)
        writing = asyncio.ensure_future(post(jp_fetch, {"gpu": 1}))
        await asyncio.sleep(0)  # the POST is sent first
        listed = body(await jp_fetch("dra", "api", "claims"))["claims"]
        assert not writing.done()  # the write waits for the lock; the read did not
        assert holder.poll() is None
    made = await writing
    assert made.code == 201, made.body
    assert listed == []
    after = body(await jp_fetch("dra", "api", "claims"))["claims"]
    assert [c["name"] for c in after] == [body(made)["name"]]


async def test_an_answered_write_is_committed(jp_fetch: Fetch, ledger_path: Path) -> None:
    """Concurrent POSTs and DELETEs (batched into shared commits): every answer is already
    in the ledger as another connection reads it, the moment it arrives."""

    def names() -> set[str]:
        with contextlib.closing(sqlite3.connect(ledger_path)) as conn:
            return {row[0] for row in conn.execute("SELECT name FROM claims")}

    async def one() -> None:
        r = await post(jp_fetch, {"gpu": 1})
        assert r.code == 201, r.body
        name = body(r)["name"]
        assert name in names()
        r = await jp_fetch("dra", "api", "claims", name, method="DELETE")
        assert r.code == 204
        assert name not in names()

    for _ in range(3):
        await asyncio.gather(*(one() for _ in range(8)))
    assert names() == set()

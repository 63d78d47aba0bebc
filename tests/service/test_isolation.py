"""The service between real Unix users: what one user cannot do to another's claims, what
the daemon reclaims, what holds under concurrency and across a daemon killed with SIGKILL.

Every user is real (``useradd``, removed afterwards), every caller a real process of that
user (forked, then ``setuid``), the daemon a real ``dra-jupyter service`` process; nothing
is faked. The inventory is the simulated ``h200-8x`` (8 GPUs).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import socket
import sqlite3
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from dra_jupyter.api import Session
from dra_jupyter.claimspec import build_claim
from dra_jupyter.errors import DraJupyterError
from dra_jupyter.inventory.resolve import resolve_inventory
from dra_jupyter.local.backend import LocalBackend
from dra_jupyter.local.ledger import SCHEMA_VERSION, Ledger
from dra_jupyter.server.claims import Caller, ClaimService
from dra_jupyter.settings import Settings
from dra_jupyter.types import USER_LABEL, Owner
from tests.local.ledger_v1 import write_v1
from tests.service.accounts import (
    Child,
    Service,
    User,
    cli,
    raw_connect,
    read_line,
    run_as,
    service,
    wait_for,
)

MAGIC_IMPORTS = ("email.parser", "email.feedparser", "mimetypes", "importlib.readers")


def admin_policy(users: dict[str, User], extra: str = "") -> str:
    return f'admin_groups = ["{users["_admin_group"].name}"]\nvisibility = "own"\n{extra}'


def read(svc: Service, query: str) -> list[Any]:
    """Rows of the ledger, read as root (the daemon's user) while the daemon runs."""
    conn = sqlite3.connect(svc.ledger, timeout=30)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def live(svc: Service) -> list[dict[str, Any]]:
    """The live claims."""
    rows = read(svc, "SELECT name, owner, allocation FROM claims")
    return [
        {
            "name": name,
            "owner": json.loads(owner),
            "devices": [r["device"] for r in json.loads(allocation)["devices"]["results"]],
        }
        for name, owner, allocation in rows
    ]


def released(svc: Service) -> dict[str, str]:
    return dict(read(svc, "SELECT name, reason FROM releases ORDER BY id"))


def released_by(admin: User, svc: Service) -> dict[str, str]:
    """Who released each claim, as an admin's ``dra-jupyter usage --by claim`` says it."""
    answer = run_as(admin, svc.env(), lambda: cli(["usage", "--by", "claim", "-o", "json"]))
    assert answer["ok"]["code"] == 0, answer
    return {r["claim"]: r["released_by"] for r in json.loads(answer["ok"]["out"])}


def session() -> Session:
    return Session(Settings.from_env())


def error_of(call: Any) -> str:
    try:
        call()
    except DraJupyterError as err:
        return f"{type(err).__name__}: {err}"
    return "no error"


def test_another_user_cannot_see_release_keep_or_take_a_claim(users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    with service(admin_policy(users)) as svc:
        made = run_as(alice, svc.env(), lambda: cli(["request", "gpu=2", "--name", "alice-nb"]))
        assert made["ok"]["code"] == 0, made
        name = f"{alice.name}-alice-nb"  # a user's names are their own (visibility own)
        [claim] = live(svc)
        assert claim["owner"]["user"] == alice.name
        held = claim["devices"]

        # Bob's environment says he is alice: the daemon asks the kernel instead.
        forged = {
            **svc.env(),
            "USER": alice.name,
            "LOGNAME": alice.name,
            "JUPYTERHUB_USER": alice.name,
        }

        def bob_cli() -> list[dict[str, Any]]:
            return [
                cli(["claims", "--all"]),
                cli(["release", "alice-nb"]),
                cli(["release", "--all"]),
                cli(["devices"]),
            ]

        listed, release, release_all, devices = run_as(bob, forged, bob_cli)["ok"]
        assert listed["code"] == 0 and "alice-nb" not in listed["out"]
        assert alice.name not in listed["out"]
        assert release["code"] == 2  # to bob, alice's claim is as one that does not exist
        assert release["err"] == "error: release: no claim named 'alice-nb' (already released?)\n"
        assert release_all["out"] == "released: nothing\n"
        assert devices["out"].count("another user") == 2  # held, by nobody he may name

        def bob_api() -> dict[str, str]:
            s = session()
            return {
                "release": str(s.backend.release(name, any_owner=True)),
                "keep": str(s.backend.touch(name, 0.0)),
                "record": str(s.backend.record(name)),
                "same name": s.request(gpu=1, name="alice-nb", apply_env=False).name,
                "all of them": error_of(lambda: s.request(gpu=8)),
                "user": s.backend.hello()["user"],  # type: ignore[attr-defined]
                "label": s.request(gpu=1).to_dict()["metadata"]["labels"][USER_LABEL],
            }

        api = run_as(bob, forged, bob_api)["ok"]
        assert api["release"] == api["keep"] == "False"  # as a claim that does not exist
        assert api["record"] == "None"
        assert api["same name"] == f"{bob.name}-alice-nb"  # his own name, free
        assert api["all of them"].startswith("BusyError: the devices are busy")
        assert alice.name not in api["all of them"]  # not who holds them either
        assert api["user"] == bob.name
        assert api["label"] == bob.name  # not the alice his environment names

        def open_ledger() -> list[str]:
            out = []
            for attempt in (
                lambda: svc.ledger.open("rb").close(),
                lambda: list(svc.ledger.parent.iterdir()),
            ):
                try:
                    attempt()
                    out.append("opened")
                except PermissionError:
                    out.append("permission denied")
            try:
                sqlite3.connect(f"file:{svc.ledger}?mode=ro", uri=True).execute(
                    "SELECT * FROM claims"
                )
                out.append("read")
            except sqlite3.Error as err:
                out.append(f"sqlite: {err}")
            return out

        opened = run_as(bob, forged, open_ledger)["ok"]
        assert opened[:2] == ["permission denied", "permission denied"]
        assert opened[2].startswith("sqlite: unable to open")

        [still] = [c for c in live(svc) if c["owner"]["user"] == alice.name]
        assert still["name"] == name and still["devices"] == held
        assert still["owner"]["user"] == alice.name
        mine = run_as(alice, svc.env(), lambda: cli(["claims"]))["ok"]
        assert "alice-nb" in mine["out"]


def test_an_admin_sees_and_releases_every_claim(users: dict[str, User]) -> None:
    alice, carol = users["alice"], users["carol"]
    with service(admin_policy(users)) as svc:
        name = f"{alice.name}-1"
        made = run_as(alice, svc.env(), lambda: cli(["request", "gpu=1", "--name", name]))
        assert made["ok"]["code"] == 0, made
        listed, done = run_as(
            carol, svc.env(), lambda: [cli(["claims", "--all"]), cli(["release", name])]
        )["ok"]
        assert name in listed["out"]
        assert done == {"code": 0, "out": f"released: {name}\n", "err": ""}
        assert live(svc) == []
        assert released(svc) == {name: "admin"}  # the owner is told who: carol
        assert released_by(carol, svc) == {name: carol.name}  # and the usage book keeps it


def test_a_user_cannot_release_with_the_services_reasons(users: dict[str, User]) -> None:
    """A non-admin's release that says ``admin`` (or ``expired``, ``device-failed``, …) is
    refused and the claim kept: the usage book would read as if an admin or the service had
    released it (issue 42, item 18). His own words pass; an admin may say any."""
    from tests.service.test_costly import ask  # noqa: PLC0415

    alice, carol = users["alice"], users["carol"]
    with service(admin_policy(users)) as svc:
        names = [f"{alice.name}-r{i}" for i in range(2)]

        def made_and_refused() -> list[Any]:
            for name in names:
                assert cli(["request", "gpu=1", "--name", name])["code"] == 0
            return [
                ask(svc.socket, "release", {"name": names[0], "reason": reason})
                for reason in ("admin", "device-failed", "expired", "kernel-shutdown")
            ]

        answer = run_as(alice, svc.env(), made_and_refused)
        assert "ok" in answer, answer
        admin, failed, expired, own = answer["ok"]
        assert admin["error"] == {
            "type": "ForbiddenError",
            "message": "release: reason 'admin' is what the service or an admin says of a "
            "release; give your own reason, or none ('user')",
        }
        assert failed["error"]["type"] == expired["error"]["type"] == "ForbiddenError"
        assert own["ok"] is True and own["result"] is True
        by_admin = run_as(
            carol,
            svc.env(),
            lambda: ask(svc.socket, "release", {"name": names[1], "reason": "device-failed"}),
        )
        assert by_admin["ok"]["ok"] is True, by_admin
        assert released(svc) == {names[0]: "kernel-shutdown", names[1]: "device-failed"}
        # the usage book says who: the admin by name; a rule's reason in parentheses
        assert released_by(carol, svc) == {names[0]: "(kernel-shutdown)", names[1]: carol.name}


def test_the_claims_of_a_killed_process_are_reclaimed(users: dict[str, User]) -> None:
    alice = users["alice"]
    with service(admin_policy(users)) as svc:
        holder = Child(
            alice, svc.env(), lambda: session().request(gpu=1, name="kept").name, hold=True
        )
        try:
            assert holder.result() == {"ok": f"{alice.name}-kept"}
            [claim] = live(svc)
            assert claim["owner"]["pid"] == holder.pid
            assert claim["owner"]["start_time"] is not None
        finally:
            holder.kill()  # SIGKILL: nothing of the process's own runs
        wait_for("the killed process's claim is released", lambda: live(svc) == [])
        assert released(svc) == {f"{alice.name}-kept": "reclaimed"}
        assert released_by(users["carol"], svc) == {f"{alice.name}-kept": "(reclaimed)"}


def test_a_request_waits_in_line_until_the_devices_are_released(users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    with service(admin_policy(users)) as svc:
        made = run_as(alice, svc.env(), lambda: cli(["request", "gpu=8", "--name", "all"]))
        assert made["ok"]["code"] == 0, made

        def wait() -> dict[str, Any]:
            return {"name": session().request(gpu=2, timeout=60, name="next").name}

        waiter = Child(bob, svc.env(), wait)
        try:
            wait_for("bob waits in line", lambda: "waits in line" in svc.log.read_text())

            def line() -> list[list[str]]:
                return [[w.owner.user, w.what] for w in session().backend.waiting()]

            # the holder sees that someone waits, and for what, but not who (visibility own)
            assert run_as(alice, svc.env(), line)["ok"] == [["another user", "2 gpu.nvidia.com"]]
            assert run_as(bob, svc.env(), line)["ok"] == [[bob.name, "2 gpu.nvidia.com"]]
            assert run_as(alice, svc.env(), lambda: cli(["release", "all"]))["ok"]["code"] == 0
            assert waiter.result()["ok"]["name"] == f"{bob.name}-next"
        finally:
            waiter.kill()
        assert released(svc)[f"{alice.name}-all"] == "user"


def test_limits_hold_under_16_concurrent_requests(users: dict[str, User]) -> None:
    alice = users["alice"]
    policy = admin_policy(users, f"[groups.{alice.name}]\ngpus = 2\n")
    with service(policy) as svc:
        go_r, go_w = os.pipe()

        def request() -> dict[str, Any]:
            os.read(go_r, 1)  # all 16 start together
            return cli(["request", "gpu=1"])

        children = [Child(alice, svc.env(), request) for _ in range(16)]
        try:
            os.write(go_w, b"x" * 16)
            results = [c.result()["ok"] for c in children]
        finally:
            for c in children:
                c.finish()
            os.close(go_r)
            os.close(go_w)
        codes = Counter(r["code"] for r in results)
        assert codes == {0: 2, 1: 14}, results
        refusals = {r["err"].strip() for r in results if r["code"] == 1}
        assert refusals <= {
            f"user {alice.name}: limit 2 GPUs (group {alice.name}), holds 2; "
            "the request needs 1 more"
        }
        held = [d for c in live(svc) for d in c["devices"]]
        assert len(held) == 2 and len(set(held)) == 2


def test_a_daemon_killed_and_restarted_loses_no_claim_and_allocates_nothing_twice(
    users: dict[str, User],
) -> None:
    alice, bob = users["alice"], users["bob"]
    with service(admin_policy(users)) as svc:
        made = run_as(alice, svc.env(), lambda: cli(["request", "gpu=2", "--name", "cli"]))
        assert made["ok"]["code"] == 0, made
        stays = Child(
            alice, svc.env(), lambda: session().request(gpu=1, name="stays").name, hold=True
        )
        dies = Child(
            alice, svc.env(), lambda: session().request(gpu=1, name="dies").name, hold=True
        )
        try:
            stays_name, dies_name = f"{alice.name}-stays", f"{alice.name}-dies"
            assert stays.result() == {"ok": stays_name}
            assert dies.result() == {"ok": dies_name}
            before = {c["name"]: c["devices"] for c in live(svc)}
            svc.kill()  # SIGKILL
            dies.kill()  # its process ends while the daemon is down
            svc.start()
            after = {c["name"]: c["devices"] for c in live(svc)}
            assert after == {k: v for k, v in before.items() if k != dies_name}
            assert released(svc) == {dies_name: "reclaimed"}

            def take() -> list[dict[str, Any]]:  # the CLI's claims outlive its process
                return [cli(["request", "gpu=5", "--name", "rest"]), cli(["request", "gpu=1"])]

            rest, more = run_as(bob, svc.env(), take)["ok"]
            assert rest["code"] == 0, rest
            assert more["code"] == 1 and "the devices are busy" in more["err"]
            held = [d for c in live(svc) for d in c["devices"]]
            assert len(held) == 8 and len(set(held)) == 8  # every device, each once
        finally:
            stays.finish()  # watched again after the restart: released when it ends
        wait_for(
            "the claim of the process that ended after the restart is released",
            lambda: stays_name not in {c["name"] for c in live(svc)},
        )
        assert released(svc)[stays_name] == "reclaimed"


def test_malformed_and_oversized_frames_are_refused_while_others_are_served(
    users: dict[str, User],
) -> None:
    bob = users["bob"]
    with service(admin_policy(users)) as svc:
        bad = raw_connect(svc.socket)
        frames = [
            (os.urandom(512).replace(b"\n", b" ") + b"\n", "not JSON"),
            (b'{"v": 1, "id": 1, "op": "hel\n', "not JSON"),  # truncated
            (b"[1, 2]\n", "a JSON list"),
            (b'{"v": 2, "id": 3, "op": "hello"}\n', "protocol version 2"),
            (b'{"v": 1, "id": 4, "op": "format-disk"}\n', "op 'format-disk' is not known"),
            (b'{"v": 1, "id": 5, "op": "release", "args": {"name": 7}}\n', "not a claim name"),
        ]
        for frame, problem in frames:
            bad.sendall(frame)
            answer = read_line(bad)
            assert answer["ok"] is False and problem in answer["error"]["message"], answer
            assert "\n" not in answer["error"]["message"]
        bad.sendall(b'{"v": 1, "id": 6, "op": "hello"}\n')  # the same connection still serves
        assert read_line(bad)["result"]["user"] == "root"

        huge = raw_connect(svc.socket)
        sent: list[str] = []

        def flood() -> None:
            try:
                huge.sendall(b"x" * (100 << 20))  # 100 MB without a newline
                sent.append("all")
            except OSError as err:
                sent.append(type(err).__name__)

        sender = threading.Thread(target=flood)
        sender.start()
        try:
            served = run_as(bob, svc.env(), lambda: session().request(gpu=1).name)
            assert served == {"ok": f"{bob.name}-1"}
            answer = read_line(huge)
            assert "a frame over 1048576 bytes" in answer["error"]["message"]
        finally:
            sender.join(60)
        assert sent and sent[0] != "all"  # the daemon stopped reading and closed it

        # A client that sends and does not read: the daemon stops reading its frames while
        # their answers back up (a bounded backlog), serves others, then goes on.
        piped = raw_connect(svc.socket)
        count = 300  # about 1.6 MB of answers, over the backlog of 1 MiB
        piped.sendall(
            b"".join(b'{"v": 1, "id": %d, "op": "inventory"}\n' % i for i in range(count))
        )
        assert run_as(bob, svc.env(), lambda: session().backend.hello()["user"])  # type: ignore[attr-defined]
        stream = piped.makefile("rb")
        ids = [json.loads(stream.readline())["id"] for _ in range(count)]
        assert ids == list(range(count))
        stream.close()
        piped.close()
        cut = raw_connect(svc.socket)
        cut.sendall(b'{"v": 1, "id": 9, "op": "hel')
        cut.close()  # a frame cut by the end of the connection
        bad.sendall(b'{"v": 1, "id": 7, "op": "hello"}\n')
        assert read_line(bad)["ok"] is True
        bad.close()
        huge.close()


def test_the_policy_is_read_again_on_sighup(users: dict[str, User]) -> None:
    bob = users["bob"]
    with service(admin_policy(users, "[limits]\ngpus = 1\n")) as svc:
        first = run_as(bob, svc.env(), lambda: error_of(lambda: session().request(gpu=2)))["ok"]
        assert first == (
            f"LimitError: user {bob.name}: limit 1 GPU (default), holds 0; the request needs 2 more"
        )
        svc.write_policy(admin_policy(users, "[limits]\ngpus = 3\n"))
        svc.hup()
        wait_for("the policy is reloaded", lambda: "policy reloaded" in svc.log.read_text())
        again = run_as(bob, svc.env(), lambda: session().request(gpu=2).name)
        assert again == {"ok": f"{bob.name}-1"}
        svc.config.write_text("[service\n")  # broken: the policy in force stays
        svc.hup()
        wait_for("the broken policy is refused", lambda: "not reloaded" in svc.log.read_text())
        limits = run_as(bob, svc.env(), lambda: session().backend.hello()["limits"])  # type: ignore[attr-defined]
        assert limits["ok"]["gpus"] == {"value": 3.0, "source": "default"}


@pytest.mark.parametrize("version", [1, SCHEMA_VERSION])
def test_an_embedded_ledger_is_imported(
    users: dict[str, User], tmp_path: Path, version: int
) -> None:
    alice = users["alice"]
    old = tmp_path / "embedded.sqlite"
    scratch = tmp_path / "scratch.sqlite"
    inventory = resolve_inventory("h200-8x")
    classes = [c["metadata"]["name"] for c in inventory.device_classes]
    host = socket.gethostname()
    made = []
    for name, pid in (("kept", 0), ("gone", 2**22 + 1)):  # a pid above any pid_max: gone
        owner = Owner(user=alice.name, host=host, pid=pid, start_time=None)
        backend = LocalBackend(inventory, Ledger(scratch if version == 1 else old), owner)
        made.append(backend.allocate(build_claim(name, {"gpu": 2}, classes=classes), lease=3600))
    if version == 1:  # the same claims, in a ledger that version 1 of the schema wrote
        write_v1(old, made, [])
    before = sqlite_dump(old)
    with service(admin_policy(users), ("--import-ledger", str(old))) as svc:
        [claim] = live(svc)
        assert claim["name"] == "kept" and claim["owner"]["user"] == alice.name
        assert "claim gone of" in svc.log.read_text()  # left, and said why
        done = run_as(alice, svc.env(), lambda: cli(["release", "kept"]))["ok"]
        assert done["out"] == "released: kept\n"
    assert sqlite_dump(old) == before  # read as it was: not migrated, nothing changed


def sqlite_dump(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return list(conn.iterdump())


def test_the_magics_cannot_release_another_users_claim(users: dict[str, User]) -> None:
    # What IPython and the magics import on first use, imported while still root (the
    # interpreter's library may be in a folder the test users cannot open).
    for module in MAGIC_IMPORTS:
        importlib.import_module(module)
    alice, bob = users["alice"], users["bob"]
    with service(admin_policy(users)) as svc:
        made = run_as(alice, svc.env(), lambda: cli(["request", "gpu=1", "--name", "alice-m"]))
        assert made["ok"]["code"] == 0, made

        def magics() -> list[str]:
            os.environ["IPYTHONDIR"] = tempfile.mkdtemp()  # bob's own
            shell = InteractiveShell.instance()
            shell.run_line_magic("load_ext", "dra_jupyter")
            out = []
            for line in ("release alice-m", "status --all"):
                printed = io.StringIO()
                try:
                    with contextlib.redirect_stdout(printed):
                        shown = shell.run_line_magic("dra", line)
                    out.append(f"ok: {shown} {printed.getvalue()}")
                except DraJupyterError as err:
                    out.append(f"{type(err).__name__}: {err}")
            return out

        forged = {**svc.env(), "USER": alice.name, "JUPYTERHUB_USER": alice.name}
        answer = run_as(bob, forged, magics)
        assert "ok" in answer, answer
        release, status = answer["ok"]
        assert release.startswith("MagicError: dra release: no claim alice-m"), release
        assert status.startswith("ok: ") and "alice-m" not in status, status
        assert [c["name"] for c in live(svc)] == [f"{alice.name}-alice-m"]


def test_a_jupyter_server_of_another_user_cannot_release_a_claim(users: dict[str, User]) -> None:
    """The server extension's REST layer (``ClaimService``) in a server run by bob, whose
    identity provider says the caller is alice: the daemon goes by the process's uid."""
    alice, bob = users["alice"], users["bob"]
    with service(admin_policy(users)) as svc:
        made = run_as(alice, svc.env(), lambda: cli(["request", "gpu=1", "--name", "alice-r"]))
        assert made["ok"]["code"] == 0, made

        def rest() -> dict[str, Any]:
            claims = ClaimService(Settings.from_env(), live_kernels=list)
            caller = Caller(user=alice.name, admin=True)  # what a provider may say
            return {
                "release": error_of(lambda: claims.release(caller, "alice-r")),
                "keep": error_of(lambda: claims.backend.touch("alice-r", 0.0)),
                "listed": [r.name for r in claims.claims(caller)],
                "made": claims.create(caller, {"gpu": 1}).owner.user,
            }

        answer = run_as(bob, svc.env(), rest)
        assert "ok" in answer, answer
        assert answer["ok"]["release"].startswith("ClaimNotFoundError"), answer  # unseen
        assert answer["ok"]["keep"] == "no error"  # False: as a claim that does not exist
        assert "alice-r" not in answer["ok"]["listed"]
        assert answer["ok"]["made"] == bob.name
        assert f"{alice.name}-alice-r" in [c["name"] for c in live(svc)]


def test_a_claim_released_by_the_cli_reads_as_released_in_a_jupyter_server(
    users: dict[str, User],
) -> None:
    """GET claims/{name} (``claim_or_released``) of a claim that another process (the CLI)
    released: the ledger keeps its end, so the server says why, not 404; another user is
    told nothing of it."""
    alice, bob = users["alice"], users["bob"]
    with service(admin_policy(users)) as svc:
        made = run_as(alice, svc.env(), lambda: cli(["request", "gpu=1", "--name", "alice-e"]))
        assert made["ok"]["code"] == 0, made
        gone = run_as(alice, svc.env(), lambda: cli(["release", "alice-e"]))
        assert gone["ok"]["code"] == 0, gone

        def card(user: str) -> Any:
            claims = ClaimService(Settings.from_env(), live_kernels=list)
            try:
                record, ended = claims.claim_or_released(Caller(user=user), "alice-e")
            except DraJupyterError as err:
                return type(err).__name__
            assert ended is not None
            return [record.name, record.owner.user, record.device_keys, ended.reason]

        answer = run_as(alice, svc.env(), lambda: card(alice.name))
        assert answer["ok"][:2] == [f"{alice.name}-alice-e", alice.name], answer
        assert len(answer["ok"][2]) == 1 and answer["ok"][3] == "user"
        assert run_as(bob, svc.env(), lambda: card(alice.name)) == {"ok": "ClaimNotFoundError"}


def test_a_socket_of_another_user_is_not_taken_for_the_service(users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    path = Path(f"/tmp/dra-fake-{bob.name}.sock")  # /tmp: root's folder, anyone may write
    kept: list[socket.socket] = []

    def pose() -> str:
        fake = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        fake.bind(str(path))
        path.chmod(0o777)
        fake.listen(8)
        kept.append(fake)
        return "listening"

    poser = Child(bob, {}, pose, hold=True)
    try:
        assert poser.result() == {"ok": "listening"}
        env = {"DRA_JUPYTER_BACKEND": "service", "DRA_JUPYTER_SOCKET": str(path)}
        answer = run_as(alice, env, lambda: error_of(session().backend.claims))
        assert answer["ok"].startswith(
            f"UnavailableError: the process listening at {path} runs as uid {bob.uid}"
        ), answer
    finally:
        poser.kill()
        path.unlink(missing_ok=True)


def sweep_until_released(claims: ClaimService, caller: Caller) -> None:
    """Sweep as a board's poll does until the daemon has released one of the caller's
    claims (a bound, not a timing: the daemon ticks by 1s)."""
    deadline = time.monotonic() + 60
    while claims.released.empty() and time.monotonic() < deadline:
        claims.claims(caller)
        time.sleep(0.2)

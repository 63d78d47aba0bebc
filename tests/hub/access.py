"""What real Unix users need to run this checkout's Python: the interpreter, its libraries
and the checkout itself, reachable by them for as long as a test runs.

A checkout (and its ``.venv``) may sit where other users cannot go: under ``/root`` (mode
0700) in CI, say. :func:`reachable` looks at every folder on the way to what the users must
run or import, and where others may not pass (no ``x`` for others; no ``r`` either on a
folder Python lists to import from), lets those users pass for the test:
``setfacl -m u:<uid>:r-x`` where ``setfacl`` exists (only them, nothing else changes), else
``chmod o+rx``; and takes it back afterwards (``setfacl -x``, or the old mode). Nothing is
changed where the users can pass already, which is the usual case (``/work`` is 0755). It
then checks, as each user, that the imports the test needs work, and fails saying what is
missing if not: it never skips.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.service.accounts import DEADLINE, User

REPO = Path(__file__).resolve().parents[2]


def needed() -> list[tuple[Path, bool]]:
    """What the users must reach: the interpreter (its folders passed through) and every
    folder Python imports from (listed too), this checkout first."""
    out: list[tuple[Path, bool]] = [(Path(sys.executable).resolve(), False)]
    for entry in [str(REPO), *sys.path[1:]]:
        path = Path(entry).resolve()
        if path.is_dir():
            out.append((path, True))
    return out


@contextlib.contextmanager
def reachable(users: Sequence[User], imports: str) -> Iterator[list[str]]:
    """Let ``users`` reach this checkout's Python (see the module's docstring) while the
    block runs; yields what was changed (in words, for the test's log)."""
    undo: list[list[str] | tuple[Path, int]] = []
    changed: list[str] = []
    acl = shutil.which("setfacl")
    try:
        seen: set[Path] = set()
        for target, listed in needed():
            for folder in [*reversed(target.parents), target]:
                if folder in seen or not folder.is_dir():
                    continue
                seen.add(folder)
                want = stat.S_IXOTH | (stat.S_IROTH if listed and folder == target else 0)
                mode = folder.stat().st_mode
                if mode & want == want:
                    continue
                if acl is not None:
                    for user in users:
                        subprocess.run(
                            [acl, "-m", f"u:{user.uid}:r-x", str(folder)],
                            check=True,
                            timeout=DEADLINE,
                        )
                        undo.append([acl, "-x", f"u:{user.uid}", str(folder)])
                    changed.append(f"setfacl -m u:<test users>:r-x {folder}")
                else:
                    undo.append((folder, stat.S_IMODE(mode)))
                    folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH | stat.S_IROTH)
                    changed.append(f"chmod o+rx {folder}")
        for user in users:
            _check(user, imports)
        yield changed
    finally:
        for step in reversed(undo):
            if isinstance(step, tuple):
                step[0].chmod(step[1])
            else:
                subprocess.run(step, check=False, timeout=DEADLINE)


def _check(user: User, imports: str) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path[1:]]),
        "HOME": "/nonexistent",
    }
    done = subprocess.run(
        [sys.executable, "-c", f"import {imports}"],
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"user {user.name} cannot run {sys.executable} -c 'import {imports}' from this "
            f"checkout ({REPO}), even with the folders on the way opened to them: "
            f"{done.stderr.strip()[-1500:]}"
        )

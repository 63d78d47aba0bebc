"""Ours against upstream on the same worlds: the exit code and every claim's
``status.allocation`` (node selector, devices per request, config, consumedCapacity,
shareID, tolerations, adminAccess) must be the same.

Ours is ``dra-jupyter allocate -f WORLD -o json --strategy first-fit``; upstream is the Go
harness (``tools/upstream-allocator``, :mod:`tests.upstream.build`) in batch mode, one
process for all worlds. shareIDs are random on both sides: each is replaced by its place
of first appearance before comparing.

    python -m tests.upstream.differential --worlds 10000 [--first-seed S] [--out DIR]

runs more worlds than ``make test`` does (``make fuzz-upstream N=...``), counts agreement
per feature, and shrinks every mismatch into a small reproducer (written to ``--out``).
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_jupyter.cli import main as cli_main
from tests.upstream import build
from tests.upstream.worlds import Wire, feature_names, world

Outcome = tuple[int, Any]  # exit code, normalized allocations (None unless exit 0)


class Upstream:
    """The Go harness, kept running: one JSON world in, one JSON answer out."""

    def __init__(self, binary: Path | None = None) -> None:
        self.process = subprocess.Popen(
            [str(binary or build.build())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

    def answer(self, objects: list[Wire], node: str | None = None) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        line = {"objects": objects, **({"node": node} if node else {})}
        self.process.stdin.write(json.dumps(line) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError("upstream-allocator ended without an answer")
        answer: dict[str, Any] = json.loads(reply)
        return answer

    def outcome(self, objects: list[Wire]) -> Outcome:
        return self.outcome_of(self.answer(objects))

    @staticmethod
    def outcome_of(answer: dict[str, Any]) -> Outcome:
        if answer["exit"] != 0:
            return answer["exit"], None
        return 0, normalize([item["status"]["allocation"] for item in answer["items"]])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> Upstream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def ours(objects: list[Wire]) -> tuple[int, str, Any]:
    """Exit code, standard error and the allocations of ``dra-jupyter allocate -o json``."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump({"apiVersion": "v1", "kind": "List", "items": objects}, file)
        file.flush()
        out, err = io.StringIO(), io.StringIO()
        argv = ["allocate", "-f", file.name, "--strategy", "first-fit", "-o", "json"]
        code = cli_main(argv, out, err)  # first-fit: kube-scheduler's choice
    if code != 0:
        return code, err.getvalue(), None
    items = json.loads(out.getvalue())["items"]
    return 0, "", [item["status"]["allocation"] for item in items]


def our_outcome(objects: list[Wire]) -> Outcome:
    code, _, allocations = ours(objects)
    return code, normalize(allocations) if allocations is not None else None


def _pruned(value: Any) -> Any:
    """Without empty lists, maps and nulls: what Kubernetes' omitempty leaves out."""
    if isinstance(value, dict):
        pruned = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def normalize(allocations: list[Wire]) -> list[Wire]:
    """shareIDs by order of first appearance, empty fields left out; the rest as printed."""
    allocations = [_pruned(a) for a in allocations]
    seen: dict[str, str] = {}
    for allocation in allocations:
        for result in allocation.get("devices", {}).get("results", []):
            share = result.get("shareID")
            if share is not None:
                result["shareID"] = seen.setdefault(share, f"<share-{len(seen)}>")
    return allocations


@dataclass
class Mismatch:
    seed: int
    objects: list[Wire]
    ours: Outcome
    upstream: Outcome

    def describe(self) -> str:
        return (
            f"seed {self.seed}: ours exit {self.ours[0]}, upstream exit {self.upstream[0]}\n"
            f"  ours:     {json.dumps(self.ours[1])}\n"
            f"  upstream: {json.dumps(self.upstream[1])}\n"
            f"  world:    {json.dumps(self.objects)}"
        )


KNOWN = {
    "unknown-class": (
        "a request names a DeviceClass that does not exist: ours refuses the input (exit 2, "
        "naming the field), kube-scheduler leaves the pod pending until the class exists "
        "(unschedulable: exit 1)"
    ),
}


def known_divergence(mine: Outcome, answer: dict[str, Any]) -> str | None:
    """The name of a :data:`KNOWN` divergence that explains the two outcomes, if one does."""
    error = answer.get("error", "")
    if (
        mine[0] == 2
        and answer["exit"] == 1
        and re.search(r"device class \S+ does not exist", error)
    ):
        return "unknown-class"
    return None


def differs(upstream: Upstream, objects: list[Wire]) -> tuple[Outcome, Outcome] | None:
    """The two outcomes where they differ (other than by a :data:`KNOWN` divergence)."""
    mine, answer = our_outcome(objects), upstream.answer(objects)
    theirs = upstream.outcome_of(answer)
    if mine == theirs or known_divergence(mine, answer) is not None:
        return None
    return mine, theirs


def compare(
    upstream: Upstream, seeds: Iterable[int]
) -> tuple[list[Mismatch], Counter[str], Counter[str]]:
    """Every seed's world through both; mismatches, and worlds/agreements per feature (and
    per upstream exit code, and per known divergence)."""
    mismatches: list[Mismatch] = []
    total: Counter[str] = Counter()
    agree: Counter[str] = Counter()
    for seed in seeds:
        objects, features = world(seed)
        mine, answer = our_outcome(objects), upstream.answer(objects)
        theirs = upstream.outcome_of(answer)
        known = known_divergence(mine, answer) if mine != theirs else None
        found = None if mine == theirs or known else (mine, theirs)
        outcome = f"known: {known}" if known else f"exit {theirs[0]} (upstream)"
        for name in {"any", *features, outcome}:
            total[name] += 1
            agree[name] += found is None
        if found is not None:
            mismatches.append(Mismatch(seed, objects, *found))
    return mismatches, total, agree


# --- shrinking -------------------------------------------------------------------------------

KEEP = {"apiVersion", "kind", "metadata", "name", "namespace", "spec", "driver", "pool"}


def _candidates(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths of list items and optional dict keys, biggest first."""
    if isinstance(value, list):
        for i in range(len(value)):
            yield (*path, i)
        for i, item in enumerate(value):
            yield from _candidates(item, (*path, i))
    elif isinstance(value, dict):
        for key in value:
            if key not in KEEP:
                yield (*path, key)
        for key, item in value.items():
            yield from _candidates(item, (*path, key))


def _without(objects: list[Wire], path: tuple[Any, ...]) -> list[Wire]:
    out = copy.deepcopy(objects)
    parent: Any = out
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    return out


def shrink(
    objects: list[Wire], still: Callable[[list[Wire]], bool], budget: int = 2000
) -> list[Wire]:
    """A smaller world for which ``still`` holds: drop list items and optional fields one at
    a time while the mismatch stays (greedy, to a fixed point or ``budget`` tries)."""
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        for path in list(_candidates(objects)):
            tries += 1
            try:
                smaller = _without(objects, path)
            except (KeyError, IndexError, TypeError):
                continue
            if still(smaller):
                objects = smaller
                progress = True
                break
            if tries >= budget:
                break
    return objects


def shrink_mismatch(upstream: Upstream, mismatch: Mismatch) -> list[Wire]:
    """The world made small while the same exit codes differ the same way; Nodes are kept
    (without them, ours allocates on no node at all, upstream on none)."""
    codes = (mismatch.ours[0], mismatch.upstream[0])
    nodes = sum(o.get("kind") == "Node" for o in mismatch.objects)

    def still(objects: list[Wire]) -> bool:
        if sum(o.get("kind") == "Node" for o in objects) != nodes:
            return False
        if not any(o.get("kind") == "ResourceClaim" and "status" not in o for o in objects):
            return False
        found = differs(upstream, objects)
        return found is not None and (found[0][0], found[1][0]) == codes

    return shrink(mismatch.objects, still)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fuzz-upstream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--worlds", type=int, default=10_000)
    parser.add_argument("--first-seed", type=int, default=1_000_000)
    parser.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "dra-jupyter-fuzz-upstream"
    )
    parser.add_argument("--shrink", type=int, default=20, help="shrink at most this many")
    args = parser.parse_args(argv)
    seeds = range(args.first_seed, args.first_seed + args.worlds)
    with Upstream() as upstream:
        mismatches, total, agree = compare(upstream, seeds)
        print(f"seeds {seeds.start}..{seeds.stop - 1}: {agree['any']}/{total['any']} agree")
        for name in sorted(total):
            print(f"  {name:28} {agree[name]:6}/{total[name]:<6}")
        if mismatches:
            args.out.mkdir(parents=True, exist_ok=True)
        for mismatch in mismatches[: args.shrink]:
            small = shrink_mismatch(upstream, mismatch)
            found = differs(upstream, small)
            path = args.out / f"seed-{mismatch.seed}.json"
            path.write_text(
                json.dumps(
                    {
                        "seed": mismatch.seed,
                        "features": sorted(feature_names(small)),
                        "ours": found[0] if found else None,
                        "upstream": found[1] if found else None,
                        "objects": small,
                    },
                    indent=1,
                )
            )
            print(f"mismatch: seed {mismatch.seed} -> {path}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

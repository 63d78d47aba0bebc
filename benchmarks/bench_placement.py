"""Placement quality: every policy serves the same seeded trace of claims (issue 7).

Run with ``make bench-placement`` (or ``.venv/bin/python benchmarks/bench_placement.py``).
Prints Markdown tables (service per claim size; locality and fragmentation), and writes
the figures as JSON and the plot as PNG when asked. See ``benchmarks/placement`` for the
cluster, the trace, the policies and the free-repacking bound, and BENCHMARKS.md for
what each figure means.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.placement import bound, policies, report, simulate
from benchmarks.placement.cluster import Cluster
from benchmarks.placement.metrics import Summary, summarize
from benchmarks.placement.trace import KINDS, generate

POLICIES = ("first-fit", "spread", "topology", "bound")


def run(args: argparse.Namespace) -> list[Summary]:
    cluster = Cluster(args.nodes, args.mig_nodes, args.shared_nodes)
    out: list[Summary] = []
    for load in args.loads:
        arrivals = generate(args.seed, load, cluster.gpus, args.hours)
        for name in args.policies:
            start = time.perf_counter()
            note = ""
            if name == "bound":
                packing = bound.Packing(cluster, KINDS)
                records = simulate.run_bound(cluster, arrivals, packing)
                note = f", {packing.unknown} CP-SAT solves stopped at the time limit"
            else:
                records = simulate.run(
                    policies.make(name, cluster), cluster, arrivals, repack_check=args.repack_check
                )
            out.append(summarize(name, load, cluster, records, args.warmup))
            print(
                f"# load {load:.0%}, {name}: {len(arrivals)} arrivals in "
                f"{time.perf_counter() - start:.1f} s{note}",
                flush=True,
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--mig-nodes", type=int, default=2)
    parser.add_argument("--shared-nodes", type=int, default=2)
    parser.add_argument(
        "--loads", type=lambda s: [float(x) for x in s.split(",")], default=[0.6, 0.8, 1.0]
    )
    parser.add_argument("--hours", type=float, default=60.0, help="trace length")
    parser.add_argument("--warmup", type=float, default=4.0, help="hours left out of figures")
    parser.add_argument(
        "--policies", type=lambda s: s.split(","), default=list(POLICIES), help=",".join(POLICIES)
    )
    parser.add_argument(
        "--no-repack-check",
        dest="repack_check",
        action="store_false",
        help="skip asking the bound's model about every claim not served",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--markdown", type=Path, help="write the tables here too")
    parser.add_argument("--plot", type=Path, help="write the PNG plot here")
    args = parser.parse_args()
    for name in args.policies:
        if name not in POLICIES:
            parser.error(f"unknown policy {name!r}; use {', '.join(POLICIES)}")
    summaries = run(args)
    tables = "\n\n".join(
        [
            f"seed {args.seed}, {args.nodes} nodes x 8 GPUs ({args.mig_nodes} MIG, "
            f"{args.shared_nodes} shared), {args.hours:g} h, first {args.warmup:g} h left out",
            report.service_table(summaries),
            report.quality_table(summaries),
        ]
    )
    print()
    print(tables)
    if args.markdown:
        args.markdown.write_text(tables + "\n")
    if args.json:
        args.json.write_text(json.dumps([s.to_json() for s in summaries], indent=1) + "\n")
    if args.plot:
        report.plot(
            summaries,
            args.plot,
            f"{args.nodes} nodes x 8 H200 ({args.mig_nodes} MIG, {args.shared_nodes} shared), "
            f"seed {args.seed}, {args.hours:g} h trace",
        )


if __name__ == "__main__":
    main()

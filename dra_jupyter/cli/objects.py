"""``dra-jupyter allocate | explain -f OBJECTS.yaml``: a cluster's objects, allocated or
explained offline by the embedded allocator, as kube-scheduler would; ``explain
KEY=VALUE...`` asks this machine instead (:func:`dra_jupyter.cli.local.explain_keywords`)."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from dra_jupyter.allocator import STRATEGIES, Allocator
from dra_jupyter.cli.command import Runner, Subparsers
from dra_jupyter.cli.local import explain_keywords
from dra_jupyter.errors import EXIT_OK, EXIT_UNSATISFIABLE, InvalidInputError
from dra_jupyter.model.taintrules import apply_taint_rules
from dra_jupyter.objectfile import ObjectSet, dump_yaml, load_objects
from dra_jupyter.settings import Settings


def add_commands(sub: Subparsers) -> None:
    for name, helptext in (
        ("allocate", "allocate the claims that have no status.allocation, together, on one node"),
        (
            "explain",
            "say, per node and request, why the claims can or cannot be allocated; or, "
            "with KEY=VALUE keywords as in dra.request (explain gpu=9), whether that request "
            "can be met on this machine now, later or never, and why",
        ),
    ):
        p = sub.add_parser(name, help=helptext, description=helptext)
        if name == "explain":
            p.add_argument("spec", nargs="*", metavar="KEY=VALUE")
            p.add_argument("--inventory", help="with KEY=VALUE: auto, nvml, a bundled name, ...")
            p.add_argument("--ledger", help="with KEY=VALUE: the ledger file (default: per user)")
            p.add_argument("--verbose", action="store_true", help="with KEY=VALUE: every stage")
        p.add_argument(
            "-f",
            "--filename",
            required=name == "allocate",
            metavar="OBJECTS.yaml",
            help="multi-document YAML (or a List) of DeviceClasses, ResourceSlices, "
            "ResourceClaims and optionally Nodes and DeviceTaintRules; '-' reads standard input",
        )
        p.add_argument(
            "--strategy",
            choices=STRATEGIES,
            default=None,
            help="topology places by locality and packing; first-fit reproduces "
            "kube-scheduler's choice (default: $DRA_JUPYTER_STRATEGY, else topology)",
        )
        p.add_argument("--node", help="only consider this node")
        formats = ("yaml", "json") if name == "allocate" else ("text", "json")
        p.add_argument("-o", "--output", choices=formats, default=formats[0])


def _allocator(objects: ObjectSet, strategy: str | None) -> Allocator:
    """The file's slices with its DeviceTaintRules applied, as kube-scheduler sees them."""
    return Allocator(
        apply_taint_rules(objects.slices, objects.taint_rules),
        objects.classes,
        objects.allocated,
        strategy or Settings.from_env().strategy,  # type: ignore[arg-type]
        nodes=objects.nodes,
    )


def run_allocate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    objects = load_objects(args.filename)
    allocator = _allocator(objects, args.strategy)
    claims = objects.pending_claims()
    results = allocator.allocate(claims, node=args.node)
    if results is None:
        explanation = allocator.explain(claims, node=args.node)
        err.write("no allocation exists for the claims:\n" + explanation.summary() + "\n")
        return EXIT_UNSATISFIABLE
    items = []
    for raw, result in zip(claims, results, strict=True):
        claim: dict[str, Any] = json.loads(json.dumps(raw))
        claim.setdefault("status", {})["allocation"] = result.to_dict()
        items.append(claim)
    document = {"apiVersion": "v1", "kind": "List", "items": items}
    out.write(
        json.dumps(document, indent=2) + "\n" if args.output == "json" else dump_yaml(document)
    )
    return EXIT_OK


def run_explain(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.spec and args.filename:
        raise InvalidInputError(
            "explain: give KEY=VALUE keywords (this machine's devices) or -f OBJECTS.yaml, not both"
        )
    if args.spec:
        return explain_keywords(args, out)
    if not args.filename:
        raise InvalidInputError(
            "explain: give a request as KEY=VALUE keywords (explain gpu=2 same=pcieRoot) "
            "or -f OBJECTS.yaml (claims of a cluster's objects)"
        )
    objects = load_objects(args.filename)
    allocator = _allocator(objects, args.strategy)
    explanation = allocator.explain(objects.pending_claims(), node=args.node)
    if args.output == "json":
        out.write(json.dumps(explanation.to_dict(), indent=2) + "\n")
    else:
        out.write(explanation.to_text() + "\n")
    return EXIT_OK


COMMANDS: dict[str, Runner] = {"allocate": run_allocate, "explain": run_explain}

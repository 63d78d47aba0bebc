"""The ``dra-jupyter`` command line.

    dra-jupyter allocate -f OBJECTS.yaml [--strategy first-fit|topology] [--node NODE]
                         [-o yaml|json]
    dra-jupyter explain  -f OBJECTS.yaml [--strategy ...] [--node NODE] [-o text|json]
    dra-jupyter explain  KEY=VALUE... [--inventory ...] [--ledger ...] [-o text|json]
    dra-jupyter demo     [--service]
    dra-jupyter service  [--config FILE.toml] [--socket PATH] [--import-ledger LEDGER]
    dra-jupyter publish-slices --inventory NAME [--nodes N] [--kubeconfig PATH]

Exit codes, by the class of the error (:mod:`dra_jupyter.errors`): 0 allocated (or
explained), 1 no allocation exists (:class:`AllocationError`), 2 invalid input, an unknown
claim or another user's, 3 something we depend on failed (:class:`UnavailableError`: the
Kubernetes API server, the ledger, NVML), 4 an internal error (a bug: the traceback follows).
Errors go to standard error: for 2 and 3 one line (``error: ...``, at most
:data:`MAX_LINE` characters); warnings (:class:`DraJupyterWarning`) one line each
(``warning: ...``), each once.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from dra_jupyter.allocator import STRATEGIES, Allocator
from dra_jupyter.cli_kube import KUBE_COMMANDS, add_kube_commands, run_kube
from dra_jupyter.cli_local import add_local_commands, explain_keywords, run_local
from dra_jupyter.demo import run_demo
from dra_jupyter.errors import (
    AllocationError,
    DraJupyterError,
    DraJupyterWarning,
    InvalidInputError,
    UnavailableError,
)
from dra_jupyter.objectfile import ObjectSet, dump_yaml, load_objects
from dra_jupyter.settings import Settings

EXIT_OK, EXIT_UNSATISFIABLE, EXIT_INVALID, EXIT_CLUSTER, EXIT_INTERNAL = 0, 1, 2, 3, 4
MAX_LINE = 1000  # characters of an error line; messages cut what they echo well before


def _line(text: object) -> str:
    """One line of at most MAX_LINE characters: what exit codes 2 and 3 print."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


def _show_warning(err: TextIO) -> Callable[..., None]:
    def show(message: Warning | str, *_: Any, **__: Any) -> None:
        err.write(_line(f"warning: {message}") + "\n")

    return show


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-jupyter",
        description="Allocate DRA devices (resource.k8s.io/v1) offline, as Kubernetes would.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
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
            "ResourceClaims and optionally Nodes; '-' reads standard input",
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
    p = sub.add_parser("demo", help="allocate claims of a few shapes on a bundled 8x H200 node")
    p.add_argument(
        "--service",
        action="store_true",
        help="instead: start the shared-machine service in a temporary folder and show it "
        "serving several users (as root: two temporary Unix users; else this one)",
    )
    p = sub.add_parser(
        "service",
        help="run the shared-machine allocator service (one per machine, as root)",
        description="Own this machine's devices and ledger; serve every user over a Unix "
        "socket, identified by the kernel (SO_PEERCRED). SIGHUP reloads the config.",
    )
    p.add_argument("--config", metavar="FILE.toml", help="the policy (every knob: README)")
    p.add_argument(
        "--socket", metavar="PATH", help="the Unix socket (default /run/dra-jupyter/socket)"
    )
    p.add_argument(
        "--import-ledger",
        metavar="LEDGER",
        help="take over the live claims of an embedded ledger file at start",
    )
    add_local_commands(sub)
    add_kube_commands(sub)
    return parser


def _allocator(objects: ObjectSet, strategy: str | None) -> Allocator:
    return Allocator(
        objects.slices,
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


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # argparse printed the usage and the problem
        return int(exit_.code or 0)
    with warnings.catch_warnings():
        warnings.simplefilter("default", DraJupyterWarning)  # each one once, as one line
        warnings.showwarning = _show_warning(err)
        return _run(args, out, err)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        if args.command == "allocate":
            return run_allocate(args, out, err)
        if args.command == "explain":
            return run_explain(args, out, err)
        if args.command == "demo" and args.service:
            from dra_jupyter.demo_service import run_service_demo  # noqa: PLC0415  # on use

            return run_service_demo(out)
        if args.command == "demo":
            return run_demo(out)
        if args.command == "service":
            from pathlib import Path  # noqa: PLC0415

            from dra_jupyter.service.daemon import run_service  # noqa: PLC0415  # on use

            return run_service(
                Path(args.config) if args.config else None,
                Path(args.socket) if args.socket else None,
                Path(args.import_ledger) if args.import_ledger else None,
            )
        if args.command in KUBE_COMMANDS:
            return run_kube(args, out)
        return run_local(args, out)
    except AllocationError as error:
        err.write(f"{error}\n")
        return EXIT_UNSATISFIABLE
    except UnavailableError as error:
        err.write(_line(f"error: {error}") + "\n")
        return EXIT_CLUSTER
    except DraJupyterError as error:
        err.write(_line(f"error: {error}") + "\n")
        return EXIT_INVALID
    except Exception as error:  # a bug: say so, with what is needed to report it
        err.write("".join(traceback.format_exception(error)))
        err.write(
            f"internal error (a bug in dra-jupyter, not in your input): {type(error).__name__}: "
            f"{_line(error)[:200]}; please report it with the traceback above\n"
        )
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

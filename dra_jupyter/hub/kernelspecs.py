"""Kernel specs with devices, from a cluster's choices: ``python -m dra_jupyter.hub.kernelspecs
FOLDER`` writes ``FOLDER/kernels/dra-<slug>/kernel.json`` for each choice of the spawn form
with devices (:func:`dra_jupyter.hub.choices.kernel_specs`: "Python 3 · 1x NVIDIA H200 ...",
the ``dra-kubernetes`` provisioner, which runs the kernel in a pod of its own with those
devices), read from the cluster as ``cluster_profiles`` reads it and filtered by the admin's
rules (``--rules``: a JSON list of rows, as ``c.DRAProfiles.rules``) for ``--user`` and
``--group``. FOLDER is a Jupyter data folder (``jupyter --paths``; ``$JUPYTER_PATH``), so
JupyterLab's launcher and kernel picker show the specs. Kernel specs of an earlier run that
the cluster no longer offers (``dra-*`` folders) are removed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from dra_jupyter.errors import DraJupyterError
from dra_jupyter.hub.choices import ChoicePolicy, choices, kernel_specs, restrict
from dra_jupyter.hub.form import service_world
from dra_jupyter.kube.connect import api_client
from dra_jupyter.kube.spawn import ServerDevices


def write_kernel_specs(folder: Path, specs: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """``folder/kernels/<name>/kernel.json`` for each spec; ``dra-*`` specs not among them
    removed; the files written."""
    kernels = folder / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    for old in kernels.glob("dra-*"):
        if old.name not in specs and (old / "kernel.json").is_file():
            shutil.rmtree(old)
    written = []
    for name, spec in specs.items():
        path = kernels / name / "kernel.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(spec, indent=1, ensure_ascii=False) + "\n")
        written.append(path)
    return written


def cluster_kernel_specs(
    kubeconfig: str | None,
    namespace: str,
    user: str,
    groups: Collection[str] = (),
    policy: ChoicePolicy | None = None,
) -> dict[str, dict[str, Any]]:
    """The kernel specs of the choices ``user`` may make on the cluster now."""
    with api_client(kubeconfig) as api:
        inventory, holders = ServerDevices(api, namespace).devices()
    offered = restrict(choices(service_world(inventory, holders)), user, groups, policy)
    return kernel_specs(offered)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dra_jupyter.hub.kernelspecs",
        description="Write kernel specs with devices (pods of their own) from a cluster's "
        "choices into a Jupyter data folder.",
    )
    parser.add_argument("folder", type=Path, help="a Jupyter data folder (kernels/ goes in it)")
    parser.add_argument("--namespace", default="default", help="where the claims are read")
    parser.add_argument("--kubeconfig", default=None, help="default: in-cluster, $KUBECONFIG")
    parser.add_argument("--user", default="", help="whose choices (the admin's rules)")
    parser.add_argument("--group", action="append", default=[], help="a group of the user")
    parser.add_argument("--rules", type=Path, help="a JSON list of rule rows")
    args = parser.parse_args(argv)
    try:
        rows = json.loads(args.rules.read_text()) if args.rules else []
        policy = ChoicePolicy.from_table(rows)
        specs = cluster_kernel_specs(args.kubeconfig, args.namespace, args.user, args.group, policy)
    except (DraJupyterError, OSError, ValueError) as error:
        sys.stderr.write(f"kernelspecs: {error}\n")
        return 2 if isinstance(error, ValueError) else getattr(error, "exit_code", 4)
    for path in write_kernel_specs(args.folder, specs):
        spec = json.loads(path.read_text())
        print(f"{path.parent.name}: {spec['display_name']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

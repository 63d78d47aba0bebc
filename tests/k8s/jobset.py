"""Real JobSet for the test control plane: built from the Go module proxy at a pinned version,
cached beside Kubernetes (:mod:`.k8sbuild`), and started against a running :class:`Cluster`.

``sigs.k8s.io/jobset`` has no ``replace`` directive, so one throwaway module that requires it
builds its controller (the module's root package, ``main.go``); its CRD and webhook manifests
are copied from the module's download into the cache, so starting needs no network.
:func:`start` runs the controller on loopback as one more component of the cluster
(``Cluster.stop`` stops it):

* the webhook server on 127.0.0.1 with a certificate of the cluster's CA (its internal
  certificate management off), and the webhook configurations of the manifests with their
  Service replaced by that URL; the pod webhooks see only pods of JobSets (an object selector
  on the label JobSet puts on its pods), so the other tests' pods never pass through JobSet;
* no leader election, no metrics, the admin's kubeconfig.

Installing the CRD changes what ``dra.run`` does on that cluster (it uses JobSet when the API
is served), so tests start JobSet only on a control plane of their own.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

from tests.k8s.k8sbuild import TestenvError, _Go, _tools_go, locked

JOBSET_VERSION = "v0.11.1"  # the version Kueue v0.17.0 requires; served by the Go module proxy
GO_DIRECTIVE = "1.25.0"  # what sigs.k8s.io/jobset v0.11.1 declares
PACKAGE = "sigs.k8s.io/jobset"  # the controller: the module's root main.go
POD_LABEL = "jobset.sigs.k8s.io/jobset-name"  # JobSet puts it on every pod of a JobSet
START_TIMEOUT_S = 120.0


def cache_dir() -> Path:
    from tests.k8s.k8sbuild import cache_dir as k8s_cache  # noqa: PLC0415

    return k8s_cache().parent / f"jobset-{JOBSET_VERSION}"


def binary() -> Path:
    return cache_dir() / "bin" / "jobset"


def is_built() -> bool:
    stamp = cache_dir() / "stamp.json"
    try:
        built = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return (
        built == {"jobset": JOBSET_VERSION}
        and binary().is_file()
        and (cache_dir() / "crds").is_dir()
        and (cache_dir() / "webhooks.yaml").is_file()
    )


def build(*, force: bool = False, log: Any = None) -> Path:
    """Build the controller and copy its CRD and webhook manifests, unless done already."""
    import sys  # noqa: PLC0415

    out = log or sys.stderr
    root = cache_dir()
    with locked(root.parent / f"{root.name}.lock"):
        if is_built() and not force:
            return binary()
        start = time.monotonic()
        root.mkdir(parents=True, exist_ok=True)
        log_path = root / "build.log"
        log_path.write_text("")
        out.write(
            f"k8s-testenv: building JobSet {JOBSET_VERSION} into {root} (once per machine; "
            f"a few minutes on 2 cores; log: {log_path})\n"
        )
        out.flush()
        go = _Go(out, log_path)
        module = root / "module"
        module.mkdir(exist_ok=True)
        (module / "go.mod").write_text(
            f"module jobsettestenv\n\ngo {GO_DIRECTIVE}\n\nrequire {PACKAGE} {JOBSET_VERSION}\n"
        )
        (module / "tools.go").write_text(_tools_go([PACKAGE]))
        info = json.loads(
            go.run(
                ["mod", "download", "-json", f"{PACKAGE}@{JOBSET_VERSION}"],
                module,
                f"downloading {PACKAGE} {JOBSET_VERSION}",
            )
        )
        go.run(["mod", "tidy"], module, "resolving the JobSet modules (go mod tidy)")
        (root / "bin").mkdir(exist_ok=True)
        go.run(
            ["build", "-ldflags", "-s -w", "-o", str(binary()), PACKAGE],
            module,
            "building JobSet",
        )
        source = Path(info["Dir"]) / "config" / "components"
        crds = root / "crds"
        shutil.rmtree(crds, ignore_errors=True)
        crds.mkdir()
        for crd in sorted((source / "crd" / "bases").glob("*.yaml")):
            shutil.copyfile(crd, crds / crd.name)
        shutil.copyfile(source / "webhook" / "manifests.yaml", root / "webhooks.yaml")
        (root / "stamp.json").write_text(json.dumps({"jobset": JOBSET_VERSION}))
        out.write(f"k8s-testenv: built JobSet in {time.monotonic() - start:.0f} s\n")
        return binary()


# --- configuration (pure) ---------------------------------------------------------------------


def manager_config(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """JobSet's Configuration for the test control plane (see the module)."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def webhook_configurations(manifests: str, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """The manifests' webhook configurations with each webhook served at ``url`` + its path;
    the pod webhooks see only pods of JobSets (see the module)."""
    configurations = []
    for document in yaml.safe_load_all(manifests):
        if not document:
            continue
        for hook in document.get("webhooks") or ():
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
            if "pods" in {r for rule in hook.get("rules") or () for r in rule["resources"]}:
                hook["objectSelector"] = {
                    "matchExpressions": [{"key": POD_LABEL, "operator": "Exists"}]
                }
            hook["timeoutSeconds"] = 10
        document["metadata"] = {"name": f"jobset-{document['metadata']['name']}"}
        configurations.append(document)
    return configurations


# --- running ----------------------------------------------------------------------------------


def start(cluster: Any, timeout: float = START_TIMEOUT_S) -> None:
    """Start JobSet against ``cluster`` (a :class:`tests.k8s.testenv.Cluster`) and return once
    its CRD is established and its webhooks answer (see the module)."""
    import base64  # noqa: PLC0415
    import ssl  # noqa: PLC0415
    import urllib.error  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    from dra_jupyter.kube.connect import api_client  # noqa: PLC0415
    from tests.k8s.kueue import _create, _serving_certificate  # noqa: PLC0415
    from tests.k8s.testenv import _spawn, _wait, free_port  # noqa: PLC0415

    if not is_built():
        raise TestenvError(
            f"k8s-testenv: JobSet is not built in {cache_dir()}; run `scripts/k8s-testenv build`"
        )
    deadline = time.monotonic() + timeout
    state = cluster.state_dir / "jobset"
    pki = cluster.state_dir / "pki"
    _serving_certificate(pki, state / "certs")
    webhook_port, health_port = free_port(), free_port()
    config = state / "config.yaml"
    config.write_text(yaml.safe_dump(manager_config(webhook_port, health_port, state / "certs")))
    with api_client(str(cluster.kubeconfig)) as api:
        extensions = client.ApiextensionsV1Api(api)
        names = []
        for path in sorted((cache_dir() / "crds").glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            names.append(crd["metadata"]["name"])
            _create(extensions.create_custom_resource_definition, crd)

        def established() -> tuple[bool, str]:
            for name in names:
                crd = extensions.read_custom_resource_definition(name)
                listed = crd.status.conditions if crd.status else None
                conditions = {c.type: c.status for c in listed or ()}
                if conditions.get("Established") != "True":
                    return False, f"CRD {name} not established"
            return True, ""

        _wait(cluster, "JobSet's CRD", established, deadline)
        _spawn(
            cluster,
            "jobset",
            [
                f"--config={config}",
                f"--kubeconfig={cluster.kubeconfig}",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{health_port}",
                "--leader-elect=false",
            ],
            program=[str(binary())],
        )

        def ready() -> tuple[bool, str]:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=5) as r:
                return r.status == 200, r.read().decode()

        _wait(cluster, "JobSet's /readyz", ready, deadline)
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))

        def webhooks() -> tuple[bool, str]:
            # any answer over TLS with our CA (404 too): the webhook server serves
            with contextlib.suppress(urllib.error.HTTPError):
                urllib.request.urlopen(
                    f"https://127.0.0.1:{webhook_port}/", timeout=5, context=context
                ).close()
            return True, ""

        _wait(cluster, "JobSet's webhook server", webhooks, deadline)
        bundle = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
        admission = client.AdmissionregistrationV1Api(api)
        url = f"https://127.0.0.1:{webhook_port}"
        for configuration in webhook_configurations(
            (cache_dir() / "webhooks.yaml").read_text(), url, bundle
        ):
            mutating = configuration["kind"] == "MutatingWebhookConfiguration"
            kind = "mutating" if mutating else "validating"
            name = configuration["metadata"]["name"]
            # a previous start's (on another port) goes first
            with contextlib.suppress(ApiException):
                getattr(admission, f"delete_{kind}_webhook_configuration")(name)
            getattr(admission, f"create_{kind}_webhook_configuration")(configuration)

"""Add-on controllers for the test control plane (Kueue: :mod:`.kueue`; JobSet: :mod:`.jobset`),
what they share: built from the Go module proxy at a pinned version, cached beside Kubernetes
(:mod:`.k8sbuild`), started against a running :class:`~tests.k8s.testenv.Cluster`, and a
control plane of a test module's own with one of them running.

* :class:`GoAddon` says what to build. The add-on's module has no ``replace`` directive, so
  one throwaway module that requires it builds its command; its CRDs and webhook manifests
  are copied from the module's download into the cache, so starting needs no network.
* :func:`start` runs the controller on loopback as one more component of the cluster
  (``Cluster.stop`` stops it): its CRDs applied and established, its webhook server on
  127.0.0.1 with a certificate of the cluster's CA, and the webhook configurations of its
  manifests rewritten by the add-on's own rules to that URL (``url:``, not a Service).
* :func:`own_cluster` starts a control plane with the add-on and a stand-in kubelet, for a
  test module whose add-on would change what the session cluster's other tests see.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from tests.helpers import free_port
from tests.k8s import k8sbuild, testenv
from tests.k8s.k8sbuild import TestenvError, _Go, _tools_go, locked

if TYPE_CHECKING:
    import pytest
    from kubernetes import client

    from tests.k8s.podrunner import PodRunner

START_TIMEOUT_S = 120.0
Manifest = dict[str, Any]


@dataclass(frozen=True)
class GoAddon:
    """An add-on built from the Go module proxy: the command ``package`` of ``module`` at
    ``version``, built as ``bin/<name>`` into ``<name>-<version>/`` beside Kubernetes' cache,
    with the module's CRDs (``crds/``) and webhook manifests (``webhooks.yaml``) and a stamp
    ``{name: version}`` that says the build is complete."""

    name: str  # the cache's, the binary's, the component's (logs/<name>.log) and the stamp's
    title: str  # the add-on in what the build and start say
    module: str
    version: str
    go_directive: str  # what the module's go.mod declares
    package: str  # the command built

    def cache_dir(self) -> Path:
        return k8sbuild.cache_dir().parent / f"{self.name}-{self.version}"

    def binary(self) -> Path:
        return self.cache_dir() / "bin" / self.name

    def is_built(self) -> bool:
        root = self.cache_dir()
        try:
            built = json.loads((root / "stamp.json").read_text())
        except (OSError, ValueError):
            return False
        return (
            built == {self.name: self.version}
            and self.binary().is_file()
            and (root / "crds").is_dir()
            and (root / "webhooks.yaml").is_file()
        )

    def build(self, *, force: bool = False, log: TextIO | None = None) -> Path:
        """Build the command and copy the CRDs and webhook manifests, unless done already."""
        out = log or sys.stderr
        root = self.cache_dir()
        with locked(root.parent / f"{root.name}.lock"):
            if self.is_built() and not force:
                return self.binary()
            start = time.monotonic()
            root.mkdir(parents=True, exist_ok=True)
            log_path = root / "build.log"
            log_path.write_text("")
            out.write(
                f"k8s-testenv: building {self.title} {self.version} into {root} (once per "
                f"machine; a few minutes on 2 cores; log: {log_path})\n"
            )
            out.flush()
            go = _Go(out, log_path)
            module = root / "module"
            module.mkdir(exist_ok=True)
            (module / "go.mod").write_text(
                f"module {self.name}testenv\n\ngo {self.go_directive}\n\n"
                f"require {self.module} {self.version}\n"
            )
            (module / "tools.go").write_text(_tools_go([self.package]))
            info = json.loads(
                go.run(
                    ["mod", "download", "-json", f"{self.module}@{self.version}"],
                    module,
                    f"downloading {self.module} {self.version}",
                )
            )
            go.run(["mod", "tidy"], module, f"resolving the {self.title} modules (go mod tidy)")
            (root / "bin").mkdir(exist_ok=True)
            go.run(
                ["build", "-ldflags", "-s -w", "-o", str(self.binary()), self.package],
                module,
                f"building {self.title}",
            )
            source = Path(info["Dir"]) / "config" / "components"
            crds = root / "crds"
            shutil.rmtree(crds, ignore_errors=True)
            crds.mkdir()
            for crd in sorted((source / "crd" / "bases").glob("*.yaml")):
                shutil.copyfile(crd, crds / crd.name)
            shutil.copyfile(source / "webhook" / "manifests.yaml", root / "webhooks.yaml")
            (root / "stamp.json").write_text(json.dumps({self.name: self.version}))
            out.write(f"k8s-testenv: built {self.title} in {time.monotonic() - start:.0f} s\n")
            return self.binary()

    def require_built(self) -> None:
        if not self.is_built():
            raise TestenvError(
                f"k8s-testenv: {self.title} is not built in {self.cache_dir()}; run "
                "`scripts/k8s-testenv build`"
            )


# --- running ----------------------------------------------------------------------------------


def serving_certificate(pki: Path, certs: Path, name: str) -> None:
    """``tls.crt`` and ``tls.key`` for 127.0.0.1 (subject ``name``), signed by the cluster's
    CA (``pki``), written into ``certs``."""
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    from tests.k8s.pki import certificate, pem_key  # noqa: PLC0415

    ca = (
        x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes()),
        serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None),
    )
    cert, key = certificate(name, issuer=ca, hosts=("127.0.0.1",))
    certs.mkdir(parents=True, exist_ok=True)
    (certs / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (certs / "tls.key").write_bytes(pem_key(key))


def _create(call: Any, *args: Any) -> None:
    """Create, or leave what exists (a second start on the same cluster)."""
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    try:
        call(*args)
    except ApiException as error:
        if error.status != 409:
            raise


def _no_flags(health_port: int) -> Sequence[str]:
    return ()


def start(
    cluster: testenv.Cluster,
    addon: GoAddon,
    config: Callable[[int, int, Path], Manifest],
    webhooks: Callable[[str, str, str], list[Manifest]],
    *,
    flags: Callable[[int], Sequence[str]] = _no_flags,
    namespace: str | None = None,
    timeout: float = START_TIMEOUT_S,
) -> None:
    """Start ``addon`` against ``cluster`` and return once its CRDs are established and its
    webhooks answer (see the module).

    ``config(webhook_port, health_port, cert_dir)`` is the controller's configuration file;
    ``webhooks(manifests, url, ca_bundle)`` the webhook configurations to create from the
    manifests; ``flags(health_port)`` its flags after ``--config`` and ``--kubeconfig``;
    ``namespace``, if any, is created before the controller starts."""
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    from dra_jupyter.kube.connect import api_client  # noqa: PLC0415

    addon.require_built()
    deadline = time.monotonic() + timeout
    state = cluster.state_dir / addon.name
    pki = cluster.state_dir / "pki"
    serving_certificate(pki, state / "certs", f"{addon.name}-webhook")
    webhook_port, health_port = free_port(), free_port()
    config_file = state / "config.yaml"
    config_file.write_text(yaml.safe_dump(config(webhook_port, health_port, state / "certs")))
    with api_client(str(cluster.kubeconfig)) as api:
        extensions = client.ApiextensionsV1Api(api)
        names = []
        for path in sorted((addon.cache_dir() / "crds").glob("*.yaml")):
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

        crds = "CRDs" if len(names) > 1 else "CRD"
        testenv._wait(cluster, f"{addon.title}'s {crds}", established, deadline)
        if namespace is not None:
            _create(
                client.CoreV1Api(api).create_namespace,
                client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)),
            )
        testenv._spawn(
            cluster,
            addon.name,
            [
                f"--config={config_file}",
                f"--kubeconfig={cluster.kubeconfig}",
                *flags(health_port),
            ],
            program=[str(addon.binary())],
        )

        def ready() -> tuple[bool, str]:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=5) as r:
                return r.status == 200, r.read().decode()

        testenv._wait(cluster, f"{addon.title}'s /readyz", ready, deadline)
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))

        def serving() -> tuple[bool, str]:
            # any answer over TLS with our CA (404 too): the webhook server serves
            with contextlib.suppress(urllib.error.HTTPError):
                urllib.request.urlopen(
                    f"https://127.0.0.1:{webhook_port}/", timeout=5, context=context
                ).close()
            return True, ""

        testenv._wait(cluster, f"{addon.title}'s webhook server", serving, deadline)
        bundle = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
        admission = client.AdmissionregistrationV1Api(api)
        url = f"https://127.0.0.1:{webhook_port}"
        for configuration in webhooks(
            (addon.cache_dir() / "webhooks.yaml").read_text(), url, bundle
        ):
            mutating = configuration["kind"] == "MutatingWebhookConfiguration"
            kind = "mutating" if mutating else "validating"
            name = configuration["metadata"]["name"]
            # a previous start's (on another port) goes first
            with contextlib.suppress(ApiException):
                getattr(admission, f"delete_{kind}_webhook_configuration")(name)
            getattr(admission, f"create_{kind}_webhook_configuration")(configuration)


# --- a control plane of a test module's own ---------------------------------------------------


@dataclass
class OwnCluster:
    """A control plane with an add-on running: its admin's API client and the stand-in
    kubelet (``with own.runner.serving(namespace):``)."""

    cluster: testenv.Cluster
    api: client.ApiClient
    runner: PodRunner


@contextlib.contextmanager
def own_cluster(
    tmp: pytest.TempPathFactory, addon: GoAddon, start: Callable[[testenv.Cluster], None]
) -> Iterator[OwnCluster]:
    """Build (once per machine) and start a control plane (in ``<name>-k8s``, killed with
    this process), ``start`` the add-on on it, publish the session cluster's simulated
    slices, and run the pods of the namespaces that ask (from ``<name>-pods``); the runner has
    no problem at the end, and the control plane is stopped."""
    from dra_jupyter.cli import main as cli_main  # noqa: PLC0415
    from dra_jupyter.kube.connect import api_client  # noqa: PLC0415
    from tests.k8s.fixtures import INVENTORY, NODES, ROOT  # noqa: PLC0415
    from tests.k8s.podrunner import PodRunner  # noqa: PLC0415

    addon.build()
    with testenv.started(tmp.mktemp(f"{addon.name}-k8s")) as cluster:
        start(cluster)
        argv = ["publish-slices", "--inventory", INVENTORY, "--nodes", str(NODES)]
        assert cli_main([*argv, "--kubeconfig", str(cluster.kubeconfig)]) == 0
        env = {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "HOME": os.environ.get("HOME", "/root"),
        }
        with api_client(str(cluster.kubeconfig)) as api:
            runner = PodRunner(
                api,
                tmp.mktemp(f"{addon.name}-pods"),
                pki=cluster.state_dir / "pki",
                namespaces=(),
                base_env=env,
                backoff_s=1.0,
            )
            with runner:
                yield OwnCluster(cluster, api, runner)
            assert not runner.problems, runner.problems

"""The extension's traits that are :class:`~dra_jupyter.settings.Settings` fields, each
written once: its name and type are the field's, its default is the field's as
:meth:`Settings.from_env <dra_jupyter.settings.Settings.from_env>` reads it, and its help
is here.

``backend = settings_trait("backend")`` in the app's class makes
``c.DRAExtensionApp.backend``: an ``Enum`` of the field's names (``auto`` is resolved by the
default, so it is none of them), whose default is read from the environment
(``$DRA_JUPYTER_BACKEND``) when the trait is first read, so that the server's config wins
over the environment. The server's settings are the environment's with these traits'
values (:func:`settings_of`); its kernels get them too
(:func:`dra_jupyter.server.kernels.kernel_env`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from traitlets import Bool, Enum, Float, HasTraits, Int, TraitType, Unicode

from dra_jupyter.backends import resolve_backend
from dra_jupyter.settings import Settings, default_server_id


@dataclass(frozen=True)
class Field:
    """A field of Settings that is a trait of the extension."""

    help: str
    # a file, made absolute: kernels start in their notebook's folder and must find it
    file: bool = False
    # the trait's default from the environment's settings, where it is not the field itself
    default: Callable[[Settings], Any] | None = None


FIELDS: dict[str, Field] = {
    "backend": Field(
        """Where the claims of this server's kernels and REST API are made: 'local'
        (this machine's devices, the embedded allocator and the SQLite ledger), 'service'
        (this machine's dra-jupyter service, over $DRA_JUPYTER_SOCKET) or 'kubernetes'
        (ResourceClaims in a namespace, allocated by kube-scheduler for the pods that use
        them). Kernels get the same backend. Default: $DRA_JUPYTER_BACKEND ('auto':
        kubernetes in a pod with a service account, else service where it is installed,
        else local), else 'service' where the service is installed (its socket
        $DRA_JUPYTER_SOCKET or its policy file $DRA_JUPYTER_SERVICE_CONFIG exists), else
        'local'.""",
        default=resolve_backend,
    ),
    "namespace": Field(
        """Kubernetes backend: the namespace of the claims. Default:
        $DRA_JUPYTER_NAMESPACE, else the pod's, else the kubeconfig context's, else
        'default'."""
    ),
    "kubeconfig": Field(
        """Kubernetes backend: a kubeconfig file (given to the kernels too). Default:
        $DRA_JUPYTER_KUBECONFIG, else the pod's service account, $KUBECONFIG,
        ~/.kube/config.""",
        file=True,
    ),
    "shared_view_url": Field(
        """Kubernetes backend: the URL of the hub's shared view of the cluster's devices
        (the JupyterHub service dra_jupyter.hub.sharedview; a hub with DRAKubeSpawner sets
        it from dra_shared_view_url). Where set, this server asks it, with its own
        $JUPYTERHUB_API_TOKEN, for the cluster's counts per device shape and the devices of
        its user's claims (GET /dra/api/devices), and watches only its namespace: it needs
        no RBAC on ResourceSlices or on other namespaces' claims. Unreachable, the server
        keeps serving its own claims and says that cluster counts are unavailable.
        Default: $DRA_JUPYTER_SHARED_VIEW_URL, else '' (the server watches the cluster
        itself)."""
    ),
    "server_id": Field(
        """This server's id, a Kubernetes label value: every claim of its kernels and
        REST API is labelled dra-jupyter/server=<id>, and the server releases the claims
        so labelled whose kernel is gone (at start too: what a restarted server finds of
        its previous kernels). It must be stable across restarts and unique per
        namespace. Default: $DRA_JUPYTER_SERVER_ID, else the host name as a DNS label (a
        notebook pod's name, e.g. jupyter-alice under zero-to-jupyterhub); two servers on
        one host that share a namespace need their own.""",
        default=lambda settings: settings.server_id or default_server_id(),
    ),
    "inventory": Field(
        """Where devices come from: 'auto' (NVML when it finds GPUs, else the simulated
        'h200-8x'), 'nvml', a bundled simulated inventory ('h200-8x', 'h100-8x', 'h200-mig',
        'workstation-4gpu', 'tpu-v5e-8', 'mi300x-8') or a YAML file of ResourceSlices.
        Default: $DRA_JUPYTER_INVENTORY, else 'auto'."""
    ),
    "ledger": Field(
        """Path of the claim ledger (a SQLite file shared by every process and user of
        the machine). Default: $DRA_JUPYTER_LEDGER, else
        $XDG_STATE_HOME/dra-jupyter/ledger.sqlite.""",
        file=True,
    ),
    "reclaim": Field(
        """On the embedded ledger: reclaim under pressure (while a request waits, idle
        holders whose release would let it in are warned, then released), given to the
        kernels too. Default: $DRA_JUPYTER_RECLAIM, else True."""
    ),
    "reclaim_grace": Field(
        """On the embedded ledger: seconds from a reclaim warning to the release, given
        to the kernels too. Default: $DRA_JUPYTER_RECLAIM_GRACE, else 300."""
    ),
    "keeps_under_pressure": Field(
        """On the embedded ledger: Keeps a warned holder may use while someone waits,
        given to the kernels too. Default: $DRA_JUPYTER_KEEPS_UNDER_PRESSURE, else 1."""
    ),
    "reclaim_idle": Field(
        """On the embedded ledger: seconds without activity (a cell, a Keep) before a
        holder counts as idle for reclaim under pressure, given to the kernels too.
        Default: $DRA_JUPYTER_RECLAIM_IDLE, else 600."""
    ),
}


class _FromEnvironment(TraitType[Any, Any]):
    """A trait of a Settings field: its default is the environment's, read when the trait
    is first read (the ``default`` that traitlets registers as the trait's default
    generator, as ``@default`` would); a value from the config is never replaced by it."""

    field = ""  # the Settings field, which is the trait's name too

    def class_init(self, cls: type[HasTraits], name: str | None) -> None:
        if name != self.field:
            raise TypeError(
                f"{cls.__name__}.{name}: the trait of the Settings field {self.field!r} "
                "has the field's name"
            )
        super().class_init(cls, name)

    def default(self, obj: Any = None) -> Any:
        return environment_default(self.field)


def _from_environment(kind: type[TraitType[Any, Any]]) -> Any:
    """``kind`` with its default from the environment, under its own name (what ``jupyter
    server --help-all`` shows: ``--DRAExtensionApp.backend=<Enum>``)."""
    return type(kind.__name__, (_FromEnvironment, kind), {"__module__": __name__})


# The trait of each type of a Settings field
_KINDS: dict[type, Any] = {
    bool: _from_environment(Bool),
    int: _from_environment(Int),
    float: _from_environment(Float),
    str: _from_environment(Unicode),
    Path: _from_environment(Unicode),
}
_ENUM = _from_environment(Enum)
_AUTO = "auto"  # a name that the default resolves (resolve_backend): never a trait's value
_HINTS = get_type_hints(Settings)  # the fields' types


def _optional(hint: Any) -> bool:
    return get_origin(hint) in (Union, UnionType) and NoneType in get_args(hint)


def settings_trait(field: str) -> TraitType[Any, Any]:
    """The trait of the Settings field ``field`` (one of :data:`FIELDS`), configurable as
    ``c.DRAExtensionApp.<field>``: Bool, Int, Float, Unicode (a path, or an optional text
    whose None is ''), or an Enum of a Literal's names."""
    if field not in FIELDS or field not in _HINTS:
        raise TypeError(f"{field!r} is not a Settings field of the extension (FIELDS)")
    hint = _HINTS[field]
    if get_origin(hint) is Literal:
        values = [name for name in get_args(hint) if name != _AUTO]
        trait: _FromEnvironment = _ENUM(values, config=True, help=FIELDS[field].help)
    else:
        kinds = [kind for kind in get_args(hint) if kind is not NoneType] or [hint]
        trait = _KINDS[kinds[0]](config=True, help=FIELDS[field].help)
    trait.field = field
    return trait


def environment_default(field: str) -> Any:
    """The default of the trait of ``field``: the field as the environment sets it
    (:meth:`Settings.from_env`), a path as text and None as ''."""
    settings = Settings.from_env()
    resolve = FIELDS[field].default
    value = resolve(settings) if resolve is not None else getattr(settings, field)
    if value is None:
        return ""
    return str(value) if isinstance(value, Path) else value


def settings_of(traits: HasTraits) -> Settings:
    """The server's settings: the environment's, with the values of the traits of
    :data:`FIELDS` (a file absolute, '' None where the field may be None)."""
    values: dict[str, Any] = {}
    for field, spec in FIELDS.items():
        value, hint = getattr(traits, field), _HINTS[field]
        if value == "" and _optional(hint):
            value = None
        elif spec.file:
            path = Path(value).expanduser().resolve()
            value = path if hint is Path else str(path)
        values[field] = value
    return replace(Settings.from_env(), **values)

"""API limits and name rules of ``resource.k8s.io/v1`` (as the apiserver validates them)."""

from __future__ import annotations

import re

from dra_jupyter.errors import shown

API_VERSION = "resource.k8s.io/v1"  # the API of these limits and rules
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # Kubernetes' integers are int64

MAX_REQUESTS_PER_CLAIM = 32
MAX_RESULTS_PER_CLAIM = 32  # AllocationResultsMaxSize: devices one claim may get
MAX_SUBREQUESTS = 8
MAX_SELECTORS = 32
MAX_CONSTRAINTS = 32
MAX_CONFIGS = 32
MAX_TOLERATIONS = 16
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_EXTRAS = 64  # when a device uses taints, counters or list attributes
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_STRING_LENGTH = 64
MAX_ATTRIBUTE_VALUES_PER_DEVICE = 48  # scalars and the items of list values, together
MAX_COUNTER_SETS_PER_SLICE = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMES_COUNTERS = 2
MAX_TAINTS = 16
MAX_BINDING_CONDITIONS = 4
MAX_DRIVER_NAME_LENGTH = 63

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def dns_label_problem(name: str) -> str | None:
    """Why ``name`` is not an RFC 1123 DNS label, or None."""
    if not name:
        return "must not be empty"
    if len(name) > 63:
        return f"{shown(name)} is longer than 63 characters"
    if not _DNS_LABEL.match(name):
        return (
            f"{shown(name)} is not a DNS label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit)"
        )
    return None


def dns_subdomain_problem(name: str, max_length: int = 253) -> str | None:
    """Why ``name`` is not an RFC 1123 DNS subdomain, or None."""
    if not name:
        return "must not be empty"
    if len(name) > max_length:
        return f"{shown(name)} is longer than {max_length} characters"
    for part in name.split("."):
        if dns_label_problem(part) is not None:
            return (
                f"{shown(name)} is not a DNS subdomain (dot-separated lower-case labels of "
                "letters, digits and '-')"
            )
    return None


def label_name_problem(name: str) -> str | None:
    """Why ``name`` is not a label key (Kubernetes ``IsQualifiedName``: an optional DNS
    subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and
    ending with a letter or digit), or None: a binding condition's name."""
    prefix, sep, ident = name.rpartition("/")
    if sep and dns_subdomain_problem(prefix) is not None:
        return f"{shown(name)} has an invalid prefix {shown(prefix)} (a DNS subdomain)"
    if not ident or len(ident) > 63 or not _LABEL_NAME.match(ident):
        return (
            f"{shown(name)} is not a qualified name (at most 63 letters, digits, '-', '_' "
            "or '.', starting and ending with a letter or digit, after an optional prefix/)"
        )
    return None


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a label value (at most 63 letters, digits, '-', '_' or '.',
    starting and ending with a letter or digit; or empty), or None: a taint's value."""
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return (
            f"{shown(value)} is not a label value (at most 63 letters, digits, '-', '_' or "
            "'.', starting and ending with a letter or digit)"
        )
    return None


def driver_name_problem(name: str) -> str | None:
    """Why ``name`` is not a driver's name (a DNS subdomain of at most 63 characters), or None."""
    return dns_subdomain_problem(name, MAX_DRIVER_NAME_LENGTH)


def pool_name_problem(name: str) -> str | None:
    if not name:
        return "must not be empty"
    if len(name) > 253:
        return f"{shown(name)} is longer than 253 characters"
    for part in name.split("/"):
        if dns_subdomain_problem(part) is not None:
            return f"{shown(name)} is not a pool name ('/'-separated DNS subdomains)"
    return None


def qualified_name_problem(name: str, *, fully: bool = False) -> str | None:
    """Why ``name`` is not a QualifiedName (``[domain/]identifier``), or None.

    With ``fully``, the domain is required (constraints name attributes that way).
    """
    domain, sep, ident = name.rpartition("/")
    if not sep:
        if fully:
            return (
                f"{shown(name)} must be fully qualified as <domain>/<name>, "
                f"e.g. gpu.nvidia.com/{name[:32]}"
            )
        ident = name
    elif dns_subdomain_problem(domain, 63) is not None:
        return (
            f"{shown(name)} has an invalid domain {shown(domain)} (a DNS subdomain of at most "
            "63 characters)"
        )
    if not ident or len(ident) > 32 or not (_C_IDENTIFIER.match(ident) or _DNS_LABEL.match(ident)):
        return (
            f"{shown(name)}: {shown(ident)} is not a C identifier or DNS label of at most "
            "32 characters"
        )
    return None

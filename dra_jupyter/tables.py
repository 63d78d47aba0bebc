"""Tables of devices and claims: rows as dataclasses, shown as text, HTML or pandas."""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dra_jupyter.model.objects import Device, ResourceSlice, Taint, Wire
from dra_jupyter.model.parse import parse_many, parse_resource_slice
from dra_jupyter.model.quantity import Quantity
from dra_jupyter.types import ClaimRecord, run_of

if TYPE_CHECKING:
    import pandas as pd

Row = TypeVar("Row")


def human_bytes(q: Quantity | None) -> str:
    """``143771Mi`` → ``140.4Gi``: memory as people read it."""
    if q is None:
        return ""
    value = q.value
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20)):
        if value >= size:
            shown = value / size
            if shown.denominator == 1:
                return f"{shown.numerator}{unit}"
            tenths = math.floor(shown * 10)  # rounded down: never more than the device has
            return f"{tenths // 10}.{tenths % 10}{unit}"
    return str(q)


def _attr(device: Device, *names: str) -> str:
    """The first of the attributes the device publishes, as text (a list's items joined)."""
    for name in names:
        value = device.attributes.get(name)
        if value is None or value == "":
            continue
        if isinstance(value, tuple):
            return ", ".join(map(str, value))
        return str(value)
    return ""


@dataclass(frozen=True)
class DeviceRow:
    device: str  # driver/pool/device
    kind: str  # gpu, mig, tpu, amdgpu, ...
    model: str
    memory: str
    mig_profile: str
    node: str
    numa_node: str  # resource.kubernetes.io/numaNode, "" when not published
    pcie_root: str  # resource.kubernetes.io/pcieRoot, "" when not published
    # free, held, shared, blocked (a partition or the whole GPU is taken), tainted (taken
    # out: a NoSchedule or NoExecute taint keeps every new claim off it; a holder keeps it)
    state: str
    holder: str  # claim (user)
    # its taints, "key=value:effect" each (a failed GPU's, an admin's, a DeviceTaintRule's):
    # no new claim gets a device with a NoSchedule or NoExecute taint
    taints: str = ""


@dataclass(frozen=True)
class ClaimRow:
    claim: str
    user: str
    kernel: str  # the kernel that holds it, or "run NAME": a run's (released with its run)
    devices: str
    created: str
    last_activity: str
    lease_expires: str


@dataclass(frozen=True)
class ClusterClaimRow(ClaimRow):
    """A claim of the Kubernetes backend: also its state (pending until a pod uses it,
    allocated, reserved while a pod holds it) and the pods that use it now (its
    ``status.reservedFor``: several where kernels joined it, ``dra.request(join=...)``)."""

    state: str
    used_by: str = ""


class Table(Generic[Row]):
    """Rows with a text form (``print``), an HTML form (notebooks) and ``to_pandas()``;
    ``notes``: lines shown under the rows (not rows: ``to_pandas()`` leaves them out)."""

    def __init__(
        self,
        rows: Sequence[Row],
        columns: Sequence[str],
        title: str = "",
        notes: Sequence[str] = (),
    ) -> None:
        self.rows = list(rows)
        self.columns = list(columns)
        self.title = title
        self.notes = list(notes)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Any:
        return iter(self.rows)

    def __getitem__(self, index: int) -> Row:
        return self.rows[index]

    def _columns(self) -> list[str]:
        return self.columns

    def to_records(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in self.rows]  # type: ignore[call-overload]

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd  # noqa: PLC0415  # pandas is heavy: loaded only when asked for

        return pd.DataFrame.from_records(self.to_records(), columns=self._columns())

    def __str__(self) -> str:
        columns = self._columns()
        lines = [self.title] if self.title else []
        if not self.rows:
            return "\n".join([*lines, "(none)", *self.notes])
        cells = [[str(v) for v in r.values()] for r in self.to_records()]
        widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
        lines.append("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
        lines.extend(
            "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
            for row in cells
        )
        return "\n".join([*lines, *self.notes])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        columns = self._columns()
        head = f"<p>{html.escape(self.title)}</p>" if self.title else ""
        header = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = (
            "".join(
                "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r.values()) + "</tr>"
                for r in self.to_records()
            )
            or f'<tr><td colspan="{len(columns)}">(none)</td></tr>'
        )  # as the text says
        notes = "".join(f"<p>{html.escape(note)}</p>" for note in self.notes)
        return f"{head}<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>{notes}"


def device_rows(
    slices: Sequence[Wire | ResourceSlice], held: Sequence[ClaimRecord]
) -> list[DeviceRow]:
    """One row per device of the inventory, with who holds it and what blocks it.

    The slices are read through the model (:mod:`dra_jupyter.model.parse`), as the
    allocator reads them: a capacity or counter without ``value`` is zero, attributes may be
    lists; an invalid slice raises :class:`~dra_jupyter.errors.ObjectError`."""
    parsed = parse_many(slices, parse_resource_slice, ResourceSlice)
    holders: dict[tuple[str, str, str], list[str]] = {}
    shared: set[tuple[str, str, str]] = set()
    for record in held:
        for result in record.allocation.get("devices", {}).get("results", []):
            key = (result["driver"], result["pool"], result["device"])
            holders.setdefault(key, []).append(f"{record.name} ({record.owner.user})")
            if result.get("shareID"):
                shared.add(key)
    counters = _counters_left(parsed, holders)
    rows = []
    for s in parsed:
        node = s.node_selection.node_name if s.node_selection is not None else None
        for d in s.devices:
            key = (s.driver, s.pool, d.name)
            memory = d.capacity.get("memory")
            if key in holders:
                state = "shared" if key in shared else "held"
            elif any(t.effect in _KEEPS_OFF for t in d.taints):
                state = "tainted"
            elif not _fits(d, counters.get((s.driver, s.pool), {})):
                state = "blocked"
            else:
                state = "free"
            rows.append(
                DeviceRow(
                    device="/".join(key),
                    kind=_attr(d, "type") or s.driver.split(".")[0],
                    model=_attr(d, "productName", "tpuGen", "model"),
                    memory=human_bytes(memory.value) if memory is not None else "",
                    mig_profile=_attr(d, "profile"),
                    node=node or "",
                    numa_node=_attr(d, "resource.kubernetes.io/numaNode"),
                    pcie_root=_attr(d, "resource.kubernetes.io/pcieRoot"),
                    state=state,
                    holder=", ".join(holders.get(key, [])),
                    taints=", ".join(_taint_text(t) for t in d.taints),
                )
            )
    return rows


_KEEPS_OFF = ("NoSchedule", "NoExecute")  # the effects no new claim gets past


def _taint_text(taint: Taint) -> str:
    """``gpu.nvidia.com/xid=79:NoExecute`` (``key:effect`` without a value)."""
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


def _counters_left(
    slices: Sequence[ResourceSlice], holders: Mapping[tuple[str, str, str], Any]
) -> dict[tuple[str, str], dict[tuple[str, str], Fraction]]:
    left: dict[tuple[str, str], dict[tuple[str, str], Fraction]] = {}
    for s in slices:
        pool = left.setdefault((s.driver, s.pool), {})
        for cs in s.shared_counters:
            for name, q in cs.counters.items():
                pool[(cs.name, name)] = q.value
    for s in slices:
        pool = left.setdefault((s.driver, s.pool), {})
        for d in s.devices:
            if (s.driver, s.pool, d.name) in holders:
                for use in d.consumes_counters:
                    for name, q in use.counters.items():
                        key = (use.counter_set, name)
                        if key in pool:
                            pool[key] -= q.value
    return left


def _fits(device: Device, left: Mapping[tuple[str, str], Fraction]) -> bool:
    for use in device.consumes_counters:
        for name, q in use.counters.items():
            if left.get((use.counter_set, name), Fraction(0)) < q.value:
                return False
    return True


def _clock(when: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    except (OverflowError, OSError, ValueError):  # beyond what the C library's time holds
        return "(far future)" if when > 0 else "(far past)" if when < 0 else "(unknown)"


def claim_rows(records: Sequence[ClaimRecord]) -> list[ClaimRow]:
    return [
        ClaimRow(
            claim=r.name,
            user=r.owner.user,
            kernel=r.owner.kernel_id or (f"run {run}" if (run := run_of(r)) else ""),
            devices=", ".join(
                x["device"] for x in r.allocation.get("devices", {}).get("results", [])
            ),
            created=_clock(r.created),
            last_activity=_clock(r.last_activity),
            lease_expires=_clock(r.lease_expires) if r.lease_expires else "",
        )
        for r in records
    ]


def cluster_claim_rows(records: Sequence[tuple[ClaimRecord, str]]) -> list[ClusterClaimRow]:
    return [
        ClusterClaimRow(**asdict(row), state=state, used_by=", ".join(record.users))
        for row, (record, state) in zip(claim_rows([r for r, _ in records]), records, strict=True)
    ]


DEVICE_COLUMNS = [f.name for f in fields(DeviceRow)]
CLAIM_COLUMNS = [f.name for f in fields(ClaimRow)]
CLUSTER_CLAIM_COLUMNS = [f.name for f in fields(ClusterClaimRow)]

"""What each NVML health signal means for the device (:mod:`dra_jupyter.model.health`): a
taint with its key, value, effect and meaning, a warning, or nothing. One table."""

from __future__ import annotations

import pytest

from dra_jupyter.model import health
from dra_jupyter.model.health import HealthTaint

XID, ECC, ROWS, LOST = health.XID_KEY, health.ECC_KEY, health.ROWS_KEY, health.LOST_KEY
EV = health.of_event

# signal -> (key, value, effect, words the meaning holds) or None
CASES: dict[str, tuple[HealthTaint | None, tuple[str, str, str, str] | None]] = {
    "xid 79 off the bus": (health.of_xid(79), (XID, "79", "NoExecute", "fell off the bus")),
    "xid 48 double-bit ECC": (health.of_xid(48), (XID, "48", "NoExecute", "double-bit ECC")),
    "xid 94 contained ECC": (health.of_xid(94), (XID, "94", "NoSchedule", "contained ECC")),
    "xid 95 uncontained ECC": (health.of_xid(95), (XID, "95", "NoExecute", "uncontained ECC")),
    "xid 63 row remapping pending": (health.of_xid(63), (XID, "63", "NoSchedule", "pending")),
    "xid 64 row remapping failed": (health.of_xid(64), (XID, "64", "NoExecute", "failed")),
    "xid 74 NVLink": (health.of_xid(74), (XID, "74", "NoExecute", "NVLink")),
    "xid 92 single-bit rate": (health.of_xid(92), (XID, "92", "NoSchedule", "single-bit")),
    "xid 119 GSP timeout": (health.of_xid(119), (XID, "119", "NoExecute", "GSP")),
    "xid 120 GSP error": (health.of_xid(120), (XID, "120", "NoExecute", "GSP")),
    "xid 13 application": (health.of_xid(13), None),
    "xid 31 application": (health.of_xid(31), None),
    "xid 43 application": (health.of_xid(43), None),
    "xid 45 application": (health.of_xid(45), None),
    "xid unknown": (health.of_xid(9999), (XID, "9999", "NoSchedule", "not in")),
    "event xid": (EV(health.EVENT_XID_CRITICAL, 79), (XID, "79", "NoExecute", "bus")),
    "event double-bit": (EV(health.EVENT_DOUBLE_BIT_ECC, 0), (XID, "48", "NoExecute", "ECC")),
    "event sbe storm": (EV(health.EVENT_SBE_STORM, 0), (XID, "92", "NoSchedule", "rate")),
    "event retirement failure": (
        EV(health.EVENT_DRAM_RETIREMENT_FAILURE, 0),
        (XID, "64", "NoExecute", "failed"),
    ),
    "event gpu unavailable": (
        EV(health.EVENT_GPU_UNAVAILABLE, 0),
        (LOST, "true", "NoExecute", "lost"),
    ),
    "event corrected ECC": (EV(health.EVENT_SINGLE_BIT_ECC, 0), None),
    "event pstate": (health.of_event(0x0004, 0), None),
    "ecc none": (health.of_ecc(0), None),
    "ecc one": (
        health.of_ecc(1),
        (ECC, "uncorrectable", "NoSchedule", "1 uncorrectable ECC error "),
    ),
    "ecc three": (health.of_ecc(3), (ECC, "uncorrectable", "NoSchedule", "3 uncorrectable")),
    "rows fine": (health.of_remapped_rows(False, False), None),
    "rows pending": (health.of_remapped_rows(True, False), (ROWS, "pending", "NoSchedule", "pend")),
    "rows failed": (health.of_remapped_rows(True, True), (ROWS, "failed", "NoExecute", "failed")),
    "gpu lost": (health.gpu_lost(), (LOST, "true", "NoExecute", "lost")),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_signal_becomes_its_taint_or_nothing(case: str) -> None:
    got, want = CASES[case]
    if want is None:
        assert got is None
        return
    assert got is not None
    key, value, effect, words = want
    assert (got.key, got.value, got.effect) == (key, value, effect)
    assert words in got.meaning
    assert "\n" not in got.meaning and len(got.meaning) < 100  # one line


def test_only_a_lost_gpu_has_no_grace() -> None:
    assert health.gpu_lost().lost
    assert not any(t.lost for t in (health.of_xid(79), health.of_ecc(1)) if t is not None)


def test_every_critical_xid_of_the_catalogue_has_a_meaning_and_app_errors_have_none() -> None:
    for xid in (48, 63, 64, 74, 79, 92, 94, 95, 119, 120):
        assert health.XIDS[xid] is not None, xid
    for xid in (13, 31, 43, 45):
        assert health.XIDS[xid] is None, xid


def test_throttle_reasons_are_warnings_only() -> None:
    hot = 0x0040 | 0x0001  # hardware thermal slowdown, and idle (not worth a word)
    assert health.throttle_warnings(hot) == ["slowed to cool down (hardware thermal slowdown)"]
    assert health.throttle_warnings(0) == []


def test_the_release_words_name_the_device_and_the_meaning() -> None:
    taint = health.of_xid(79)
    assert taint is not None
    assert health.taken_out("gpu-3", taint) == (
        "gpu-3 was taken out (gpu.nvidia.com/xid=79: the GPU fell off the bus)"
    )

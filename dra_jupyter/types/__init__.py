"""The types every backend and every surface shares: who holds a claim (:mod:`.owner`:
Owner and the labels), a claim as the API sees it and its place in line (:mod:`.records`:
ClaimRecord, Waiting, Waiter), what a backend offers and what only a cluster backend does
(:mod:`.backend`: Backend, Capabilities, ClusterOps), and ``dra.run`` on every backend: its
request, a backend's runs, a run with its status (:mod:`.runs`), and the cluster's devices
counted per shape (:mod:`.shapes`).

Both backends (:mod:`dra_jupyter.local`, :mod:`dra_jupyter.kube`) import this package and
neither imports the other; :mod:`dra_jupyter.api` holds a :class:`Backend` and asks its
:class:`Capabilities` instead of which kind it is.
"""

from dra_jupyter.types.backend import (
    Accounting,
    ActivityBook,
    Backend,
    Capabilities,
    ClusterOps,
    DeviceTaint,
    HealthEvent,
    HealthRecord,
    OnWait,
    Reclaiming,
    Select,
    Sweep,
    Tainting,
    TakingOut,
    WatchedViews,
    Watching,
    accounting_of,
    activity_book_of,
    health_record_of,
    reclaiming_of,
    tainting_of,
    taking_out_of,
    watched_views_of,
)
from dra_jupyter.types.owner import (
    KERNEL_LABEL,
    RUN_LABEL,
    SERVER_LABEL,
    USER_ANNOTATION,
    USER_LABEL,
    Owner,
    claim_prefix,
    label_value,
    process_start_time,
)
from dra_jupyter.types.records import (
    ClaimRecord,
    Ended,
    ReclaimNotice,
    Waiter,
    Waiting,
    run_of,
)
from dra_jupyter.types.runs import Command, HeldClaim

__all__ = [
    "KERNEL_LABEL",
    "RUN_LABEL",
    "SERVER_LABEL",
    "USER_ANNOTATION",
    "USER_LABEL",
    "Accounting",
    "ActivityBook",
    "Backend",
    "Capabilities",
    "ClaimRecord",
    "ClusterOps",
    "Command",
    "DeviceTaint",
    "Ended",
    "HealthEvent",
    "HealthRecord",
    "HeldClaim",
    "OnWait",
    "Owner",
    "ReclaimNotice",
    "Reclaiming",
    "Select",
    "Sweep",
    "Tainting",
    "TakingOut",
    "Waiter",
    "Waiting",
    "WatchedViews",
    "Watching",
    "accounting_of",
    "activity_book_of",
    "claim_prefix",
    "health_record_of",
    "label_value",
    "process_start_time",
    "reclaiming_of",
    "run_of",
    "tainting_of",
    "taking_out_of",
    "watched_views_of",
]

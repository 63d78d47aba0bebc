"""The Python API: ``dra.request(gpu=2)``, ``dra.devices()``, ``dra.claims()``, ``dra.run``.

A :class:`Session` (:mod:`.session`) ties settings, an owner and a
:class:`~dra_jupyter.types.Backend` together; the module-level functions of
:mod:`dra_jupyter` use one default session (:mod:`.defaults`), made on first use (importing
the package does nothing). A :class:`Claim` (:mod:`.claim`) is what a request returns;
``dra.run`` is :mod:`.runs`. What serves only the API is beside it: a request's notes
(:mod:`.requestnotes`), a device's history (:mod:`.devicehistory`), the usage book as a
session reads it (:mod:`.usagebook`).

This package knows neither widgets nor which backend it holds: it asks the backend's
:class:`~dra_jupyter.types.Capabilities`, and shows claims through the session's
:class:`ClaimView` (text here; :mod:`dra_jupyter.widgets.notebook` gives a notebook its
cards).
"""

from dra_jupyter.api.claim import Claim, ClaimView, TextView, WaitReporter
from dra_jupyter.api.defaults import _Default, configure, default_session
from dra_jupyter.api.runs import Launcher
from dra_jupyter.api.session import KERNEL_ID_ENV, Session
from dra_jupyter.types.runs import START_TIMEOUT

# what a user sees (help, repr of the class): the API's public names, not its modules
Claim.__module__ = Session.__module__ = __name__

__all__ = [
    "KERNEL_ID_ENV",
    "START_TIMEOUT",
    "Claim",
    "ClaimView",
    "Launcher",
    "Session",
    "TextView",
    "WaitReporter",
    "_Default",
    "configure",
    "default_session",
]

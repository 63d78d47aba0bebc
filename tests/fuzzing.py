"""Hypothesis settings of the fuzz suites (tests/test_cli_fuzz.py,
tests/local/test_ledger_damage.py, tests/server/test_rest_fuzz.py): small and
derandomized in ``make test``, long and random in ``make fuzz``
(``HYPOTHESIS_PROFILE=fuzz``).

The settings are explicit objects, not a loaded profile, so that nothing here changes
the other property tests of the suite.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ = os.environ.get("HYPOTHESIS_PROFILE", "") == "fuzz"
FUZZ_FACTOR = int(os.environ.get("DRA_JUPYTER_FUZZ_FACTOR", "50"))  # make fuzz: examples x 50

_COMMON = {
    "deadline": None,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
}

settings.register_profile(
    "dra-in-suite",
    derandomize=True,  # the same examples on every run: a failure in CI is a real one
    database=None,
    print_blob=False,
    **_COMMON,  # type: ignore[arg-type]
)
settings.register_profile("fuzz", print_blob=True, **_COMMON)  # type: ignore[arg-type]


def fuzz_settings(examples: int) -> settings:
    """``examples`` in the suite; ``examples * FUZZ_FACTOR``, randomly, under make fuzz."""
    if FUZZ:
        return settings(settings.get_profile("fuzz"), max_examples=examples * FUZZ_FACTOR)
    return settings(settings.get_profile("dra-in-suite"), max_examples=examples)

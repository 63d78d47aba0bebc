"""Bad widget arguments get one clear error before anything is shown or polled."""

from __future__ import annotations

import pytest

from dra_jupyter.errors import InvalidInputError
from dra_jupyter.widgets.card import ClaimCard


@pytest.mark.parametrize("interval", [0, -1.5])
def test_a_card_refuses_an_interval_that_would_poll_without_pause(interval: float) -> None:
    with pytest.raises(InvalidInputError, match="ClaimCard: interval must be a positive"):
        ClaimCard(interval=interval)

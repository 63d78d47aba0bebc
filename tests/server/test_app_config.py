"""The extension's configuration: the backend choice is validated by traitlets."""

from __future__ import annotations

import pytest
from traitlets import TraitError

from dra_jupyter.server.app import DRAExtensionApp


def test_backend_is_local_and_unknown_backends_are_refused() -> None:
    app = DRAExtensionApp()
    assert app.backend == "local"
    with pytest.raises(TraitError, match="kubernetes"):
        app.backend = "kubernetes"

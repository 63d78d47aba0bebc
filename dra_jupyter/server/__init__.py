"""The Jupyter server extension of dra-jupyter (``jupyter server extension list``).

Enable it with ``{"ServerApp": {"jpserver_extensions": {"dra_jupyter": true}}}`` (installed
in ``jupyter_server_config.d``), or ``"dra_jupyter.server": true``. Importing this package
does not import jupyter_server: the app is imported when the server asks for it.
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from dra_jupyter.server.app import DRAExtensionApp  # noqa: PLC0415  # lazily

    return [{"module": "dra_jupyter.server.app", "app": DRAExtensionApp}]

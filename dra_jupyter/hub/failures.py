"""A spawn refused for a reason of ours, as JupyterHub wants one: a ``SpawnException``
(a ``web.HTTPError``), so that JupyterHub logs it in a line without a traceback, answers
the REST API with its status, and shows its one line (``jupyterhub_message``) on the spawn
page and in the progress stream, rather than ``409 SpawnException(reason=devices): ...``."""

from __future__ import annotations

from jupyterhub.spawner import SpawnException


class SpawnFailure(SpawnException):  # type: ignore[misc]  # JupyterHub is untyped
    """``message``: the one line the user reads; ``reason``: JupyterHub's label of the
    failure (its metrics); ``status_code``: the REST API's answer; ``html``: the spawn
    page's richer version of the message, if any."""

    def __init__(self, message: str, *, reason: str, status_code: int, html: str = "") -> None:
        super().__init__(message, reason=reason, status_code=status_code, message_html=html)
        self.jupyterhub_message = message
        self.jupyterhub_html_message = html or None

"""Where user errors stop: a :class:`DraJupyterError` becomes one line, not a traceback.

IPython shows an exception through its ``_render_traceback_`` when it has one, so the
line still arrives as an error (the cell fails, "Run all" stops there, nbclient raises)
but reads like a message. Errors that are not the user's (bugs) are left alone and keep
their traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dra_jupyter.errors import DraJupyterError, MagicError


def one_line(where: str, err: BaseException) -> str:
    """The message, prefixed with where it happened: the API's ``dra.request`` becomes the
    form the user typed (``dra request gpu=9: asks for 9 GPU devices; ...``)."""
    text = str(err).strip() or type(err).__name__
    if text.startswith("dra.request"):
        return where + text.removeprefix("dra.request")
    return text if text.startswith(("dra ", "dra:", "%%dra")) else f"{where}: {text}"


@contextmanager
def user_errors(where: str) -> Iterator[None]:
    """Turn the package's errors into :class:`MagicError`, an interrupt into one line."""
    try:
        yield
    except MagicError:
        raise
    except DraJupyterError as err:
        raise MagicError(one_line(where, err)) from None
    except KeyboardInterrupt:
        raise MagicError(f"{where}: interrupted; %dra status lists your claims") from None

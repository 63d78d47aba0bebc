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
    """The message after ``where``, the form the user typed, which stands for the API's
    call: it takes the place of the caller an error of the API names (``dra request gpu=9:
    asks for 9 GPU devices; ...``, where the API says ``dra.request: ...``)."""
    text = err.message if isinstance(err, DraJupyterError) else str(err)
    return f"{where}: {text.strip() or type(err).__name__}"


@contextmanager
def user_errors(where: str, *, typed: bool = False) -> Iterator[None]:
    """Turn the package's errors into :class:`MagicError`, an interrupt into one line.
    ``typed``: the errors of reading the line itself (:mod:`.parsing`), which name the form
    they were found in (their caller) already, and are shown as they are."""
    try:
        yield
    except MagicError:
        raise
    except DraJupyterError as err:
        raise MagicError(str(err).strip() if typed else one_line(where, err)) from None
    except KeyboardInterrupt:
        raise MagicError(f"{where}: interrupted; %dra status lists your claims") from None

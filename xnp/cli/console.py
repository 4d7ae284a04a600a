"""What the ``xnp`` command shows on stderr: log records, warnings and one-line errors.

Messages read ``xnp: ...`` and ``xnp: warning: ...``, one line each, without the
file and line of the code that logged or warned.  Imports only the standard
library and :mod:`xnp.errors`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from xnp.errors import XnpWarning

__all__ = ["log_to_stderr", "one_line"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def log_to_stderr(quiet: bool, verbose: bool) -> Iterator[None]:
    """Send xnp's log records to stderr as ``xnp: message`` for the command's duration.

    Python warnings (xnp's own, or xarray's while it decodes a file) are shown the
    same way, as ``xnp: warning: message``, not with the file and source line of
    the code that warned (``--verbose`` adds where they come from).

    Parameters
    ----------
    quiet : bool
        Only warnings and errors.
    verbose : bool
        Debugging messages too, and where warnings come from.

    Yields
    ------
    None
    """
    logger = logging.getLogger("xnp")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("xnp: %(message)s"))
    previous = logger.level
    logger.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    logger.addHandler(handler)

    def show(message: Any, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:  # fmt: skip
        text = " ".join(str(message).split())
        if not issubclass(category, XnpWarning):
            text = f"{category.__name__}: {text}"
        if verbose:
            text = f"{text} ({filename}:{lineno})"
        log.warning("warning: %s", text)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def one_line(err: BaseException) -> str:
    """One line describing ``err``.

    OSErrors lose their ``[Errno N]`` prefix, KeyErrors the quotes ``str`` puts
    around their message, and line breaks become spaces.

    Parameters
    ----------
    err : BaseException
        The error.

    Returns
    -------
    str
        The message (the error's type name when it has none).

    Examples
    --------
    >>> one_line(FileNotFoundError(2, "data file not found", "d.nc"))
    'data file not found: d.nc'
    >>> one_line(KeyError("no variable 't2m'"))
    "no variable 't2m'"
    """
    if isinstance(err, OSError) and err.strerror and err.filename:
        return f"{err.strerror}: {err.filename}"
    if isinstance(err, KeyError) and len(err.args) == 1 and isinstance(err.args[0], str):
        text = err.args[0]
    else:
        text = str(err)
    text = " ".join(text.split())
    return text or type(err).__name__

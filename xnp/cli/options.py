"""Types of the ``xnp`` command's option values, and small parsers of their text.

Each is an argparse ``type``: a bad value raises :class:`argparse.ArgumentTypeError`,
so it is a command-line error (exit status 2) before any work.  This module imports
only the standard library and :mod:`xnp.errors` (:mod:`xnp.units` where a value is
checked).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Any

from xnp.errors import XnpError

__all__ = [
    "fraction",
    "parse_chunks",
    "parse_duration",
    "parse_hours",
    "parse_names",
    "parse_source",
    "parse_time",
    "parse_validation",
    "positive_float",
    "positive_int",
    "quantity",
]


def _number(text: str, convert: Callable[[str], Any], ok: Callable[[Any], bool], what: str):
    """``convert(text)`` if it works and is ``ok``, else argparse's error "expected ``what``"."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """A positive integer, e.g. ``--steps``.

    Examples
    --------
    >>> positive_int("8")
    8
    """
    return _number(text, int, lambda v: v >= 1, "a positive integer")


def positive_float(text: str) -> float:
    """A positive, finite number, e.g. ``--learning-rate``.

    Examples
    --------
    >>> positive_float("1e-3")
    0.001
    """
    return _number(text, float, lambda v: v > 0 and math.isfinite(v), "a positive number")


def parse_hours(text: str) -> list[float]:
    """Comma-separated positive hours, e.g. ``--lead 6,12,24``.

    Examples
    --------
    >>> parse_hours("6,12")
    [6.0, 12.0]
    """
    return [positive_float(part.strip()) for part in text.split(",")]


def parse_duration(text: str) -> float:
    """Seconds from a duration such as ``10min``, ``90s`` or ``1.5h``, e.g. ``--time-budget``.

    Examples
    --------
    >>> parse_duration("10min")
    600.0
    """
    from xnp.units import parse_seconds

    try:
        return parse_seconds(text)
    except XnpError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def fraction(text: str) -> float:
    """A number in [0, 1), e.g. the fraction of the time axis held out for validation.

    Examples
    --------
    >>> fraction("0.1")
    0.1
    """
    return _number(text, float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")


def parse_validation(text: str) -> float | str | slice:
    """``--validation``: a fraction, ``START/END`` dates, or one date (a prefix, e.g. a day).

    Parameters
    ----------
    text : str
        The option's value; four digits are a year, not a fraction.

    Returns
    -------
    float or str or slice
        The fraction, the date, or ``slice(START, END)`` (an open end is None).

    Examples
    --------
    >>> parse_validation("0.2"), parse_validation("2019-03-17/")
    (0.2, slice('2019-03-17', None, None))
    """
    try:
        if re.fullmatch(r"\s*\d{4}\s*", text):  # a year, not a fraction
            raise ValueError(text)
        float(text)
    except ValueError:
        if text.count("/") > 1 or not text.strip(" /"):
            raise argparse.ArgumentTypeError(
                f"expected a fraction, a date or START/END dates, got {text!r}"
            ) from None
        if "/" in text:
            start, end = (part.strip() or None for part in text.split("/"))
            return slice(start, end)
        return text.strip()
    return fraction(text)


def parse_names(text: str) -> list[str]:
    """Comma-separated names: ``"a,b"`` → ``["a", "b"]``.

    Parameters
    ----------
    text : str
        The option's value.

    Returns
    -------
    list of str

    Examples
    --------
    >>> parse_names("t2m, u10")
    ['t2m', 'u10']
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def parse_chunks(text: str) -> dict[str, int]:
    """Dask chunks from ``"lat=64,lon=64"``.

    Examples
    --------
    >>> parse_chunks("lat=64, lon=128")
    {'lat': 64, 'lon': 128}
    """
    chunks: dict[str, int] = {}
    for part in text.split(","):
        name, sep, size = part.partition("=")
        try:
            value = int(size)
        except ValueError:
            value = 0
        if not sep or not name.strip() or value < 1:
            raise argparse.ArgumentTypeError(
                f"expected chunks as DIM=SIZE[,DIM=SIZE...] with positive sizes, e.g. "
                f"lat=64,lon=64; got {text!r}"
            )
        chunks[name.strip()] = value
    return chunks


def quantity(what: str) -> Callable[[str], str]:
    """An argparse ``type`` that checks a ``"distance"`` or a ``"size"`` and keeps the text.

    A bad value is then a command-line error (exit status 2) before any work.

    Parameters
    ----------
    what : {"distance", "size"}
        A distance (``500km``, :func:`xnp.units.parse_distance_km`) or a memory
        size (``1GiB``, :func:`xnp.units.parse_bytes`).

    Returns
    -------
    callable
        ``check(text) -> text``, named ``what`` (argparse names the type in its messages).
    """

    def check(text: str) -> str:
        from xnp.units import parse_bytes, parse_distance_km

        try:
            (parse_distance_km if what == "distance" else parse_bytes)(text)
        except XnpError as err:
            raise argparse.ArgumentTypeError(f"{what}: {err}") from err
        return text

    check.__name__ = what  # argparse names the type in its messages
    return check


def parse_source(text: str) -> tuple[str, str]:
    """A ``--context-source`` value ``NAME=PATH``.

    Examples
    --------
    >>> parse_source("stations=hadisd.nc")
    ('stations', 'hadisd.nc')
    """
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise argparse.ArgumentTypeError(
            f"expected a context source as NAME=PATH, e.g. stations=hadisd.nc; got {text!r}"
        )
    return name.strip(), path.strip()


def parse_time(text: str | None) -> Any:
    """A ``--time`` value: one label, or ``START..END`` for an inclusive range.

    Examples
    --------
    >>> parse_time("2000-01-02..2000-01-03")
    slice('2000-01-02', '2000-01-03', None)
    >>> parse_time("2000-01-02T06:00")
    '2000-01-02T06:00'
    """
    if text is None:
        return None
    start, sep, end = text.partition("..")
    if not sep:
        return text
    return slice(start or None, end or None)

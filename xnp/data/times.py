"""Time: finding the time coordinate, and hours since an epoch for any calendar.

:func:`find_time` finds a dataset's time coordinate (by CF metadata, by name, or
as named) and refuses what cannot be one (undecoded numbers, time zones, a
long-form table, missing times) with the fix.  Times become float64 hours since
1970-01-01 00:00 in the data's own calendar (:func:`time_hours`); tasks subtract
their reference time in float64 before the model casts to float32, so no
precision is lost on long records.
"""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from xnp.data import names as known
from xnp.data.lookup import XrObj, by_cf, by_name, explicit
from xnp.errors import ConfigError, CoordinateError, DimensionError, EmptyDataError

__all__ = [
    "check_time_axis",
    "day_and_year_fractions",
    "find_time",
    "fractions_of_each",
    "is_datetime",
    "match_hours",
    "time_hours",
    "validation_cut",
]

TOLERANCE_HOURS = 1e-6


def time_hours(values: np.ndarray) -> np.ndarray:
    """Hours since 1970-01-01 00:00 (in the data's own calendar), as float64.

    Works for ``numpy.datetime64`` and cftime datetimes alike, so the two give the
    same hours for the same dates.  ``datetime64`` values are counted in their own
    unit, so dates outside 1677-2262 (which ``datetime64[s]`` or ``[us]`` hold) come
    out right; missing times (NaT) become NaN.

    Examples
    --------
    >>> time_hours(np.array(["1970-01-02T06:00"], "datetime64[ns]"))
    array([30.])
    >>> time_hours(np.array(["1500-01-01", "NaT"], "datetime64[s]"))
    array([-4119936.,       nan])
    """
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.datetime64):
        return _datetime64_hours(values)
    if values.size == 0:
        return np.zeros(values.shape, np.float64)
    import cftime

    calendar = values.flat[0].calendar
    hours = cftime.date2num(values.ravel(), "hours since 1970-01-01 00:00:00", calendar=calendar)
    return np.asarray(hours, np.float64).reshape(values.shape)


def _datetime64_hours(values: np.ndarray) -> np.ndarray:
    """Hours since 1970 of ``datetime64`` values, counted in their own unit (NaT -> NaN).

    numpy subtracts and divides timedeltas in the finer of the two units, so nothing
    is converted to nanoseconds (which overflows outside 1677-2262); calendar years
    and months, which have no fixed length, are taken as their first day.
    """
    if np.datetime_data(values.dtype)[0] in ("Y", "M", "generic"):
        values = values.astype("datetime64[D]")
    return (values - np.datetime64("1970-01-01")) / np.timedelta64(1, "h")


def match_hours(axis: np.ndarray, hours: np.ndarray) -> np.ndarray:
    """Index in the sorted ``axis`` (hours) of each of ``hours`` (-1 where absent).

    Examples
    --------
    >>> match_hours(np.array([0.0, 6.0, 12.0]), np.array([6.0, 7.0, 12.0]))
    array([ 1, -1,  2])
    """
    axis, hours = np.asarray(axis, np.float64), np.asarray(hours, np.float64)
    i = np.clip(np.searchsorted(axis, hours - TOLERANCE_HOURS), 0, max(axis.size - 1, 0))
    found = np.abs(axis[i] - hours) <= TOLERANCE_HOURS if axis.size else np.zeros(i.shape, bool)
    return np.where(found, i, -1)


def check_time_axis(hours: np.ndarray, name: str) -> None:
    """Raise :class:`CoordinateError` unless ``hours`` is strictly increasing (and not NaN).

    Examples
    --------
    >>> check_time_axis(np.array([0.0, 6.0, 6.0]), "time")
    Traceback (most recent call last):
    ...
    xnp.errors.CoordinateError: Time coordinate 'time' has a duplicate value at ...
    """
    missing = int(np.isnan(hours).sum())
    if missing:
        raise CoordinateError(
            f"Time coordinate {name!r} has {missing} missing (NaT) time(s). Drop them: "
            f"ds = ds.isel({{{name!r}: ds[{name!r}].notnull()}})."
        )
    steps = np.diff(hours)
    if (steps > 0).all():
        return
    i = int(np.argmax(steps <= 0))
    what = "a duplicate value" if steps[i] == 0 else "a decreasing step"
    raise CoordinateError(
        f"Time coordinate {name!r} has {what} at positions {i} and {i + 1} "
        f"({hours[i]:.2f} h and {hours[i + 1]:.2f} h since 1970). Sort with "
        f"ds.sortby({name!r}) and drop duplicates with ds.drop_duplicates({name!r})."
    )


def day_and_year_fractions(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fraction of the (UTC) day and of the calendar year elapsed at each time.

    Both are in ``[0, 1)``; the year fraction uses the calendar's own year length
    (365 or 366 days, 365 for ``noleap``, 360 for ``360_day``).

    Examples
    --------
    >>> day, year = day_and_year_fractions(np.array(["2019-01-01T18:00"], "datetime64[ns]"))
    >>> float(day[0]), round(float(year[0]) * 365, 2)
    (0.75, 0.75)
    """
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.datetime64):  # numpy's calendar: no xarray round trip
        seconds = values.astype("datetime64[s]")
        days = seconds.astype("datetime64[D]")
        years = seconds.astype("datetime64[Y]")
        day = (seconds - days).astype(np.float64) / 86400.0
        day_of_year = (days - years.astype("datetime64[D]")).astype(np.float64) + day
        length = (years + 1).astype("datetime64[D]") - years.astype("datetime64[D]")
        return day, day_of_year / length.astype(np.float64)
    # cftime calendars through xarray, each distinct time once (points share few times)
    unique, inverse = np.unique(values.ravel(), return_inverse=True)
    day, year = fractions_of_each(unique)
    return day[inverse].reshape(values.shape), year[inverse].reshape(values.shape)


def fractions_of_each(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`day_and_year_fractions` of each of ``values`` ``[N]`` in turn (the reference).

    Examples
    --------
    >>> day, year = fractions_of_each(np.array(["2020-12-31T12:00"], "datetime64[ns]"))
    >>> float(day[0]), round(float(year[0]) * 366, 2)
    (0.5, 365.5)
    """
    times = xr.DataArray(np.asarray(values).ravel(), dims="time")
    hours = times.dt.hour + times.dt.minute / 60.0 + times.dt.second / 3600.0
    day = np.asarray(hours.values, np.float64) / 24.0
    day_of_year = np.asarray((times.dt.dayofyear - 1).values, np.float64) + day
    year = day_of_year / np.asarray(times.dt.days_in_year.values, np.float64)
    return day, year


def validation_cut(n_times: int, fraction: float) -> int:
    """Index of the first validation time when the last ``fraction`` of times is held out.

    Examples
    --------
    >>> validation_cut(504, 0.1)
    453
    """
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"validation_fraction must be in [0, 1); got {fraction}.")
    held_out = math.ceil(n_times * fraction) if fraction > 0 else 0
    if n_times - held_out < 1:
        raise EmptyDataError(
            f"Only {n_times} time(s): holding out {fraction:.0%} leaves none for training. "
            "Use more times, a smaller validation fraction, or validation=None."
        )
    return n_times - held_out


def is_datetime(values: Any) -> bool:
    """Whether ``values`` (an array) hold datetimes: numpy ``datetime64`` or cftime objects.

    Examples
    --------
    >>> is_datetime(np.array(["2019-03-01"], "datetime64[ns]")), is_datetime(np.arange(2))
    (True, False)
    """
    if np.issubdtype(values.dtype, np.datetime64):
        return True
    if values.dtype == object and values.size:
        return hasattr(values.flat[0], "calendar")
    return False


def _is_tz_aware(coord: xr.DataArray) -> bool:
    """Whether ``coord`` holds timezone-aware datetimes.

    pandas keeps them as a ``DatetimeTZDtype`` (whose ``.values`` are naive
    ``datetime`` objects, so :func:`is_datetime` does not see them); a scalar one is
    an object holding a ``Timestamp`` with a ``tzinfo``.
    """
    if isinstance(coord.dtype, pd.DatetimeTZDtype):
        return True
    if coord.dtype == object and coord.size:
        return getattr(coord.values.flat[0], "tzinfo", None) is not None
    return False


def _is_time_like(coord: xr.DataArray) -> bool:
    """Whether ``coord`` holds datetimes, naive or timezone-aware."""
    return is_datetime(coord.values) or _is_tz_aware(coord)


def _kwargs(items: Mapping[str, str]) -> str:
    """Arguments ``name=code`` (or one ``{'name': code}`` mapping) for a suggested call."""
    if all(k.isidentifier() and not keyword.iskeyword(k) for k in items):
        return ", ".join(f"{k}={v}" for k, v in items.items())
    return "{" + ", ".join(f"{k!r}: {v}" for k, v in items.items()) + "}"


def _tz_aware(obj: XrObj, name: str) -> CoordinateError:
    """The error for a timezone-aware time coordinate ``name``."""
    coord = obj[name]
    if coord.ndim == 1 and name == str(coord.dims[0]):
        naive = f"ds.indexes[{name!r}].tz_convert(None)"
    elif coord.ndim == 1:
        naive = f"({coord.dims[0]!r}, pd.DatetimeIndex(ds[{name!r}].data).tz_convert(None))"
    else:
        naive = f"pd.Timestamp(ds[{name!r}].item()).tz_convert(None)"
    return CoordinateError(
        f"The time coordinate {name!r} is timezone-aware ({coord.dtype}); xnp needs naive "
        "times in UTC. Convert it to UTC and drop the timezone: "
        f"ds = ds.assign_coords({_kwargs({name: naive})})."
    )


#: CF units of an undecoded time, e.g. ``"hours since 2000-01-01"``.
_TIME_UNITS = re.compile(r"^\s*\w+\s+since\s", re.IGNORECASE)


def _time_kind(values: np.ndarray) -> str | None:
    """What a time-like coordinate holds instead of datetimes (None if not a time at all)."""
    kind = values.dtype.kind
    if kind in "iuf":
        return "numbers"
    if kind == "m":
        return "time differences"
    if kind in "US" or (kind == "O" and values.size and isinstance(values.flat[0], str)):
        return "strings"
    return None


def _undecoded_time(obj: XrObj) -> str | None:
    """The first coordinate that looks like time but holds no datetimes, if any.

    A coordinate looks like time when its CF metadata say so (``standard_name``
    ``time``, ``axis`` ``T``, ...), its units are ``"<unit> since <date>"``, or its
    name is one of :data:`xnp.data.names.TIME_NAMES`.
    """
    coords = [str(n) for n in obj.coords]
    names = by_cf(obj, "time") + by_name(obj, known.TIME_NAMES, coords_only=True)
    names += [n for n in coords if _TIME_UNITS.match(str(obj[n].attrs.get("units", "")))]
    return next((n for n in names if n in coords and _time_kind(obj[n].values)), None)


def _not_datetime(obj: XrObj, name: str) -> CoordinateError:
    """The error for a time coordinate ``name`` that does not hold datetimes."""
    coord = obj[name]
    kind = _time_kind(coord.values) or "values"
    units = str(coord.attrs.get("units", ""))
    head = (
        f"The time coordinate {name!r} holds {kind} ({coord.dtype}), not datetimes, so xnp "
        "cannot use it as time."
    )
    if kind == "numbers" and _TIME_UNITS.match(units):
        fix = (
            f"Its units {units!r} say how to decode it: ds = xr.decode_cf(ds) (or open the "
            "file with the default decode_times=True)."
        )
    elif kind == "numbers":
        fix = (
            "If these are times, give them CF units and decode them: "
            f"ds[{name!r}].attrs['units'] = 'hours since 2000-01-01'; ds = xr.decode_cf(ds)"
        )
        if coord.ndim == 1 and name == str(coord.dims[0]):
            fix += (
                f", or assign datetimes: ds = ds.assign_coords({{{name!r}: pd.date_range("
                f"'2000-01-01', periods=ds.sizes[{name!r}], freq='6h')}})"
            )
        fix += "."
    elif kind == "time differences":
        fix = (
            f"Add the reference date: ds = ds.assign_coords({{{name!r}: "
            f"np.datetime64('2000-01-01', 'ns') + ds[{name!r}]}})."
        )
    else:
        fix = (
            "Parse them: "
            f"ds = ds.assign_coords({{{name!r}: ds[{name!r}].astype('datetime64[ns]')}})."
        )
    if name not in by_cf(obj, "time") and not _TIME_UNITS.match(units):
        fix += f" If {name!r} is not a time, rename it: ds = ds.rename({{{name!r}: 'step'}})."
    return CoordinateError(f"{head} {fix}")


def find_time(
    obj: XrObj, time: str | None, point_dims: tuple[str, ...], locators: tuple[Any, Any]
) -> tuple[str | None, str | None]:
    """The time coordinate and its dimension (None for a scalar or per-point time).

    Coordinates identified as time (CF metadata or a name in
    :data:`xnp.data.names.TIME_NAMES`) come first; another datetime coordinate is
    taken only if it is scalar or runs along a non-spatial dimension, so a datetime
    that describes the points (a station's installation date) is not taken as time.
    """
    spatial = set(point_dims)
    if time is not None:
        name = explicit(obj, time, "time coordinate")
    else:
        candidates = by_cf(obj, "time") + by_name(obj, known.TIME_NAMES, coords_only=True)
        candidates += [
            str(n)
            for n, c in obj.coords.items()
            if not (c.ndim and {str(d) for d in c.dims} <= spatial)
        ]
        candidates = [c for c in candidates if _is_time_like(obj[c])]
        if not candidates:
            undecoded = _undecoded_time(obj)
            if undecoded is not None:
                raise _not_datetime(obj, undecoded)
            return None, None
        name = candidates[0]
    coord = obj[name]
    if _is_tz_aware(coord):
        raise _tz_aware(obj, name)
    if not is_datetime(coord.values):
        raise _not_datetime(obj, name)
    if coord.ndim == 0 or set(coord.dims) <= spatial:
        _check_not_long_form(obj, name, point_dims, locators)
        _check_no_missing_times(obj, name, point_dims)
        return name, None  # one time for all, or one time per observation
    if coord.ndim > 1:
        raise DimensionError(
            f"The time coordinate {name!r} has dims {coord.dims}; xnp needs a 1-D, scalar or "
            "per-point time. Select one forecast step or stack valid times onto one dimension."
        )
    _check_no_missing_times(obj, name, point_dims)
    check_time_axis(time_hours(coord.values), name)
    return name, str(coord.dims[0])


def _check_not_long_form(
    obj: XrObj, name: str, point_dims: tuple[str, ...], locators: tuple[Any, Any]
) -> None:
    """Raise :class:`CoordinateError` when the locators run along the time dimension.

    A long-form table turned into xarray (``df.set_index(["station", "time"])
    .to_xarray()``) gives latitude/longitude along (station, time), which would make
    time a spatial dimension.
    """
    coord = obj[name]
    if coord.ndim != 1 or len(point_dims) < 2:
        return
    dim = str(coord.dims[0])
    if dim not in point_dims or (name != dim and dim.lower() not in known.TIME_NAMES):
        return
    names = [str(n) for n in locators]
    along = [n for n in names if dim in obj[n].dims]
    others = tuple(d for d in point_dims if d != dim)
    fixed = _kwargs({n: f"ds[{n!r}].max({dim!r})" for n in along})
    raise CoordinateError(
        f"The {'/'.join(map(repr, names))} coordinates vary along the time dimension "
        f"{dim!r} ({', '.join(f'{n!r} has dims {obj[n].dims}' for n in along)}), as in a "
        "long-form table turned into xarray (df.set_index(['station', 'time']).to_xarray()); "
        "xnp needs positions that do not depend on time. If the stations do not move, keep "
        f"one position per station: ds = ds.assign_coords({fixed}). If they do move, make "
        f"each observation a point: ds = ds.stack(obs={(*others, dim)!r}).reset_index('obs')."
    )


def _check_no_missing_times(obj: XrObj, name: str, point_dims: tuple[str, ...]) -> None:
    """Raise :class:`CoordinateError` when the time coordinate ``name`` holds NaT."""
    coord = obj[name]
    missing = int(np.count_nonzero(pd.isna(coord.values)))
    if not missing:
        return
    head = f"The time coordinate {name!r} has {missing} missing (NaT) time(s)"
    if coord.ndim == 0:
        fix = (
            f"Give it a time, e.g. ds = ds.assign_coords({_kwargs({name: repr('2020-01-01')})}"
            f"), or drop it: ds = ds.drop_vars({name!r})."
        )
    elif coord.ndim == 1:
        dim = str(coord.dims[0])
        what = "observations" if dim in point_dims else "times"
        fix = f"Drop those {what}: ds = ds.isel({_kwargs({dim: f'ds[{name!r}].notnull()'})})."
    else:
        fix = (
            "Single points of a grid cannot be dropped: select a part of the grid where every "
            "point has a time, or give them valid times."
        )
    raise CoordinateError(f"{head}. {fix}")

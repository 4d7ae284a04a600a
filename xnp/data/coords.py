"""Coordinate discovery: where latitude, longitude, time and elevation live in a dataset.

:func:`find_coords` asks cf-xarray first (``standard_name``, ``units``, ``axis``)
and falls back to common names (see :mod:`xnp.data._names`); any name can be given
explicitly.  The answer is a small frozen :class:`Layout` that the rest of
:mod:`xnp.data` uses to flatten data into points and to scatter results back.

Four layouts are recognised, all handled the same way once discovered:

* ``grid``: 1-D latitude and longitude on two different dimensions;
* ``curvilinear``: 2-D latitude and longitude on the same two dimensions;
* ``projected``: 1-D projected ``x``/``y`` plus a CRS (CF ``grid_mapping`` or ``crs=``),
  turned into latitude/longitude with pyproj;
* ``station``: latitude and longitude sharing one dimension (stations, cells).

The *point dimensions* are the dimensions the latitude/longitude (or x/y) span; the
time dimension is handled separately; every other dimension of the variable is an
*extra* dimension (ensemble member, level, ...), which callers must handle explicitly.
"""

from __future__ import annotations

import dataclasses
import keyword
import math
import re
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import cf_xarray  # noqa: F401  (registers the .cf accessor)
import numpy as np
import pandas as pd
import pyproj
import xarray as xr

from xnp.data import names as known
from xnp.data.times import check_time_axis, time_hours
from xnp.errors import (
    ConfigError,
    CoordinateError,
    DimensionError,
    IncompatibleUnitsError,
    VariableNotFoundError,
    XnpError,
)
from xnp.units import STANDARD_GRAVITY, canonical_units, is_geopotential

__all__ = [
    "Layout",
    "elevation_metres",
    "find_coords",
    "is_latitude",
    "is_longitude",
    "latlon",
    "locators_as_coords",
    "resolve_variables",
    "source_dataset",
]

XrObj = xr.Dataset | xr.DataArray


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layout:
    """Where the coordinates of a dataset live.

    Attributes
    ----------
    kind : {"grid", "curvilinear", "projected", "station"}
        The layout recognised.
    lat, lon : str or None
        Names of the latitude/longitude coordinates (None for projected grids).
    x, y : str or None
        Names of projected coordinates (projected grids only).
    crs : str or None
        WKT of the projection of ``x``/``y`` (projected grids only).
    time : str or None
        Name of the time coordinate, if any (may be a scalar coordinate).
    time_dim : str or None
        Dimension of the time coordinate; None when time is absent, scalar, or
        given per point (a time coordinate along the spatial dimensions, as for
        scattered observations).
    elevation : str or None
        Name of the terrain height coordinate or variable, if any.
    elevation_scale : float
        Factor turning ``elevation`` into metres (``1/g`` for geopotential).
    point_dims : tuple of str
        The spatial dimensions (those of latitude/longitude or x/y), in data order.
    extra_dims : tuple of str
        Other dimensions of the variable (neither spatial nor time).
    """

    kind: str
    lat: str | None
    lon: str | None
    x: str | None = None
    y: str | None = None
    crs: str | None = None
    time: str | None = None
    time_dim: str | None = None
    elevation: str | None = None
    elevation_scale: float = 1.0
    point_dims: tuple[str, ...] = ()
    extra_dims: tuple[str, ...] = ()


def _names_in(obj: XrObj) -> list[str]:
    names = [str(n) for n in obj.coords]
    if isinstance(obj, xr.Dataset):
        names += [str(n) for n in obj.data_vars]
    return names


def _present(obj: XrObj) -> str:
    coords = ", ".join(repr(str(n)) for n in obj.coords) or "none"
    text = f"coordinates present: {coords}"
    if isinstance(obj, xr.Dataset):
        text += f"; data variables: {', '.join(repr(str(n)) for n in obj.data_vars) or 'none'}"
    return text


def _explicit(obj: XrObj, name: str, what: str) -> str:
    if name not in _names_in(obj):
        raise CoordinateError(
            f"The {what} {name!r} you named is not in the data ({_present(obj)}). "
            f"Pass the name of one of these."
        )
    return name


def _by_cf(obj: XrObj, key: str) -> list[str]:
    found: list[Hashable] = list(obj.cf.coordinates.get(key, []))
    found += list(obj.cf.standard_names.get(key, []))
    return [str(n) for n in found]


def _by_name(obj: XrObj, fallbacks: tuple[str, ...], coords_only: bool = False) -> list[str]:
    pool = [str(n) for n in obj.coords] if coords_only else _names_in(obj)
    lower = {n.lower(): n for n in pool}
    return [lower[f] for f in fallbacks if f in lower]


def _is_role(coord: xr.DataArray, key: str, names: tuple[str, ...]) -> bool:
    name = str(coord.name)
    if name.lower() in names:
        return True
    return name in _by_cf(xr.Dataset(coords={name: coord.variable}), key)


def is_latitude(coord: xr.DataArray) -> bool:
    """Whether ``coord`` holds latitudes, as :func:`find_coords` recognises them.

    By its CF metadata as cf-xarray reads it (``standard_name``, ``units`` such as
    ``degrees_north``, ``_CoordinateAxisType``), else by its name.

    Examples
    --------
    >>> is_latitude(xr.DataArray([1.0], dims="y", name="y", attrs={"units": "degrees_north"}))
    True
    >>> is_latitude(xr.DataArray([1.0], dims="nav_lat", name="nav_lat"))
    True
    """
    return _is_role(coord, "latitude", known.LAT_NAMES)


def is_longitude(coord: xr.DataArray) -> bool:
    """Whether ``coord`` holds longitudes, as :func:`find_coords` recognises them.

    Examples
    --------
    >>> is_longitude(xr.DataArray([1.0], dims="x", name="x", attrs={"units": "degrees_east"}))
    True
    """
    return _is_role(coord, "longitude", known.LON_NAMES)


def _is_datetime(values: Any) -> bool:
    if np.issubdtype(values.dtype, np.datetime64):
        return True
    if values.dtype == object and values.size:
        return hasattr(values.flat[0], "calendar")
    return False


def _is_tz_aware(coord: xr.DataArray) -> bool:
    """Whether ``coord`` holds timezone-aware datetimes.

    pandas keeps them as a ``DatetimeTZDtype`` (whose ``.values`` are naive
    ``datetime`` objects, so :func:`_is_datetime` does not see them); a scalar one is
    an object holding a ``Timestamp`` with a ``tzinfo``.
    """
    if isinstance(coord.dtype, pd.DatetimeTZDtype):
        return True
    if coord.dtype == object and coord.size:
        return getattr(coord.values.flat[0], "tzinfo", None) is not None
    return False


def _is_time_like(coord: xr.DataArray) -> bool:
    """Whether ``coord`` holds datetimes, naive or timezone-aware."""
    return _is_datetime(coord.values) or _is_tz_aware(coord)


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

#: Units attributes saying a coordinate is in radians.
_RADIAN_UNITS = ("rad", "radian", "radians")


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
    name is one of :data:`xnp.data.known.TIME_NAMES`.
    """
    coords = [str(n) for n in obj.coords]
    names = _by_cf(obj, "time") + _by_name(obj, known.TIME_NAMES, coords_only=True)
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
    if name not in _by_cf(obj, "time") and not _TIME_UNITS.match(units):
        fix += f" If {name!r} is not a time, rename it: ds = ds.rename({{{name!r}: 'step'}})."
    return CoordinateError(f"{head} {fix}")


def source_dataset(name: str, source: Any, variables: Sequence[str]) -> xr.Dataset:
    """An extra context source (``context_sources={name: source}``) as a Dataset.

    A DataArray becomes a Dataset (named after itself, or the first variable);
    a source without every variable in ``variables`` raises
    :class:`~xnp.errors.VariableNotFoundError` with a hint to rename.  ``fit`` and
    ``predict`` both check their sources here, so they fail the same way.

    Examples
    --------
    >>> st = xr.Dataset({"obs": ("station", [1.0])})
    >>> list(source_dataset("stations", st.rename(obs="t2m"), ["t2m"]).data_vars)
    ['t2m']
    """
    if isinstance(source, xr.DataArray):
        source = source.to_dataset(
            name=str(source.name if source.name is not None else variables[0])
        )
    if not isinstance(source, xr.Dataset):
        raise ConfigError(
            f"context source {name!r} must be a Dataset or DataArray; got {type(source).__name__}."
        )
    missing = [v for v in variables if v not in source.data_vars]
    if missing:
        raise VariableNotFoundError(
            f"context source {name!r} has no variable {missing}; it holds "
            f"{list(source.data_vars)}. Rename it to match the data, e.g. "
            f"src.rename({{'obs': {variables[0]!r}}})."
        )
    return source


def resolve_variables(obj: XrObj, variable: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """Return the variable names as a list, checking that each exists.

    A DataArray's own name is accepted for ``variable`` (or ``None``).

    Examples
    --------
    >>> ds = xr.Dataset({"t2m": ("x", [1.0])})
    >>> resolve_variables(ds, "t2m")
    ['t2m']
    """
    if variable is None:
        return [] if isinstance(obj, xr.Dataset) else [str(obj.name)]
    names = [variable] if isinstance(variable, str) else list(variable)
    if isinstance(obj, xr.DataArray):
        if names != [str(obj.name)]:
            raise VariableNotFoundError(
                f"Variable(s) {names} requested from a DataArray named {obj.name!r}. "
                "Pass the DataArray's own name, or a Dataset holding the variables."
            )
        return names
    missing = [n for n in names if n not in obj.data_vars]
    if missing:
        listed = ", ".join(repr(str(n)) for n in obj.data_vars) or "none"
        raise VariableNotFoundError(
            f"Variable(s) {missing} not found; the dataset's data variables are: {listed}. "
            "Pass one of these names."
        )
    return names


def _ordered(dims: set[str], order: tuple[Hashable, ...]) -> tuple[str, ...]:
    first = tuple(str(d) for d in order if str(d) in dims)
    return first + tuple(sorted(dims - set(first)))


def find_coords(
    obj: XrObj,
    variable: str | None = None,
    *,
    lat: str | None = None,
    lon: str | None = None,
    time: str | None = None,
    elevation: str | None = None,
    crs: Any = None,
) -> Layout:
    """Discover the coordinates of ``obj`` (a Dataset or DataArray).

    Parameters
    ----------
    obj : Dataset or DataArray
        The data; it is only inspected, never modified.
    variable : str, optional
        The variable the layout is for; it sets the dimension order and the
        extra dimensions.
    lat, lon, time, elevation : str, optional
        Explicit names, overriding discovery.
    crs : optional
        Projection of ``x``/``y`` (anything :meth:`pyproj.CRS.from_user_input`
        accepts).  Giving it selects the projected layout even when latitude and
        longitude are also present; by default projected grids read the CRS from the
        variable's CF ``grid_mapping``.

    Returns
    -------
    Layout

    Raises
    ------
    CoordinateError
        When latitude/longitude (or x/y with a CRS) cannot be found, or time is not
        datetime-like, unsorted or duplicated.

    Examples
    --------
    >>> ds = xr.Dataset(
    ...     {"t2m": (("time", "lat", "lon"), np.zeros((2, 3, 4)))},
    ...     coords={
    ...         "time": np.array(["2019-03-01", "2019-03-02"], "datetime64[ns]"),
    ...         "lat": [50.0, 51.0, 52.0],
    ...         "lon": [0.0, 1.0, 2.0, 3.0],
    ...     },
    ... )
    >>> layout = find_coords(ds, "t2m")
    >>> layout.kind, layout.point_dims, layout.time_dim
    ('grid', ('lat', 'lon'), 'time')
    """
    var = obj[variable] if (variable is not None and isinstance(obj, xr.Dataset)) else obj
    order = tuple(var.dims) + tuple(d for d in obj.dims if d not in var.dims)
    lat_name = _explicit(obj, lat, "latitude") if lat else None
    lon_name = _explicit(obj, lon, "longitude") if lon else None
    if lat_name is None and crs is None:
        lat_name = next(iter(_by_cf(obj, "latitude") + _by_name(obj, known.LAT_NAMES)), None)
    if lon_name is None and crs is None:
        lon_name = next(iter(_by_cf(obj, "longitude") + _by_name(obj, known.LON_NAMES)), None)
    x_name = y_name = wkt = None
    if lat_name is not None and lon_name is not None:
        spatial = {str(d) for d in obj[lat_name].dims} | {str(d) for d in obj[lon_name].dims}
        ndim = obj[lat_name].ndim
        same = obj[lat_name].dims == obj[lon_name].dims
        kind = ("station" if same else "grid") if ndim <= 1 else "curvilinear"
    else:
        x_name, y_name, wkt = _find_projection(obj, var, crs)
        spatial = {str(d) for d in obj[x_name].dims} | {str(d) for d in obj[y_name].dims}
        kind = "projected"
    point_dims = _ordered(spatial, order)
    locators = (lat_name, lon_name) if kind != "projected" else (y_name, x_name)
    time_name, time_dim = _find_time(obj, time, point_dims, locators)
    elev, scale = _find_elevation(obj, elevation, set(point_dims), exclude=variable)
    taken = set(point_dims) | ({time_dim} if time_dim else set())
    extra = tuple(str(d) for d in var.dims if str(d) not in taken) if variable else ()
    return Layout(
        kind=kind,
        lat=lat_name if kind != "projected" else None,
        lon=lon_name if kind != "projected" else None,
        x=x_name,
        y=y_name,
        crs=wkt,
        time=time_name,
        time_dim=time_dim,
        elevation=elev,
        elevation_scale=scale,
        point_dims=point_dims,
        extra_dims=extra,
    )


def locators_as_coords(
    ds: xr.Dataset, names: Mapping[str, Any] | None = None
) -> tuple[xr.Dataset, Any]:
    """``ds`` with the variables that locate its points made coordinates, and its layout.

    Latitude/longitude (or projected x/y) stored as data variables, as in a station
    table read with pandas, and a CF grid-mapping variable, as ``xr.open_dataset``
    gives it, are coordinates, not values to predict or covariates.  ``names`` are
    coordinate names (``lat``, ``lon``, ``elevation``) to use, e.g. those recorded at
    fit time.  The layout is
    None when the coordinates cannot be found (the caller's next step says why).
    """
    located = [
        str(v.attrs["grid_mapping"]) for v in ds.data_vars.values() if "grid_mapping" in v.attrs
    ] + [str(n) for n, v in ds.data_vars.items() if "grid_mapping_name" in v.attrs]
    present = {
        k: v
        for k, v in (names or {}).items()
        if k in ("lat", "lon", "elevation") and isinstance(v, str) and v in ds.variables
    }
    try:
        layout = find_coords(ds, **present)
    except XnpError:
        layout = None
    if layout is not None:
        located += [n for n in (layout.lat, layout.lon, layout.x, layout.y) if n]
    return ds.set_coords([n for n in dict.fromkeys(located) if n in ds.data_vars]), layout


def _find_projection(obj: XrObj, var: XrObj, crs: Any) -> tuple[str, str, str]:
    axes = obj.cf.axes
    xs = [str(n) for n in axes.get("X", [])] + _by_name(obj, known.X_NAMES, coords_only=True)
    ys = [str(n) for n in axes.get("Y", [])] + _by_name(obj, known.Y_NAMES, coords_only=True)
    if not xs or not ys:
        raise CoordinateError(
            f"No latitude/longitude (or projected x/y) coordinates found ({_present(obj)}). "
            "Give them CF attributes, e.g. ds['nav_lat'].attrs.update(standard_name="
            "'latitude', units='degrees_north'); ds['nav_lon'].attrs.update(standard_name="
            "'longitude', units='degrees_east'), or rename them: "
            "ds = ds.rename({'nav_lat': 'lat', 'nav_lon': 'lon'}). (find_coords, to_points "
            "and TaskSampler also take the names: lat='nav_lat', lon='nav_lon'.)"
        )
    if crs is None:
        projection = pyproj.CRS.from_cf(dict(obj[_grid_mapping(obj, var, xs[0], ys[0])].attrs))
    else:
        projection = pyproj.CRS.from_user_input(crs)
    return xs[0], ys[0], projection.to_wkt()


def _grid_mapping(obj: XrObj, var: XrObj, x: str, y: str) -> str:
    """Name of the CF grid-mapping variable of the projected coordinates ``x``/``y``.

    The one named by the ``grid_mapping`` attribute of ``var`` (or of any data
    variable); failing that, the only variable or coordinate with a
    ``grid_mapping_name`` attribute (so a coordinate-only target grid can carry its
    projection as a coordinate).
    """
    mapping = var.attrs.get("grid_mapping") or next(
        (v.attrs["grid_mapping"] for v in _vars(obj) if "grid_mapping" in v.attrs), None
    )
    if mapping is not None:
        if str(mapping) in _names_in(obj):
            return str(mapping)
        raise CoordinateError(
            f"The grid_mapping attribute names {mapping!r} as the projection of "
            f"{x!r}/{y!r}, but no such variable is in the data ({_present(obj)}); selecting "
            "variables, as in ds[['t2m']], drops it. Keep it as a coordinate before "
            f"selecting: ds = ds.set_coords({mapping!r})."
        )
    own = [n for n in _names_in(obj) if "grid_mapping_name" in obj[n].attrs]
    if len(own) == 1:
        return own[0]
    raise CoordinateError(
        f"Found projected coordinates {x!r}/{y!r} but no map projection: no variable has a "
        f"CF grid_mapping attribute ({_present(obj)}). If they are in fact latitude/longitude "
        f"in degrees, say so: ds[{y!r}].attrs.update(standard_name='latitude', "
        f"units='degrees_north'); ds[{x!r}].attrs.update(standard_name='longitude', "
        "units='degrees_east'). Otherwise add the projection as a CF grid-mapping "
        "coordinate, e.g. ds.coords['crs'] = xr.DataArray(0, "
        "attrs=pyproj.CRS('EPSG:27700').to_cf()). (find_coords, to_points and TaskSampler "
        "also take crs='EPSG:27700'.)"
    )


def _vars(obj: XrObj) -> list[xr.DataArray]:
    return list(obj.data_vars.values()) if isinstance(obj, xr.Dataset) else [obj]


def _find_time(
    obj: XrObj, time: str | None, point_dims: tuple[str, ...], locators: tuple[Any, Any]
) -> tuple[str | None, str | None]:
    """The time coordinate and its dimension (None for a scalar or per-point time).

    Coordinates identified as time (CF metadata or a name in
    :data:`xnp.data.known.TIME_NAMES`) come first; another datetime coordinate is
    taken only if it is scalar or runs along a non-spatial dimension, so a datetime
    that describes the points (a station's installation date) is not taken as time.
    """
    spatial = set(point_dims)
    if time is not None:
        name = _explicit(obj, time, "time coordinate")
    else:
        candidates = _by_cf(obj, "time") + _by_name(obj, known.TIME_NAMES, coords_only=True)
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
    if not _is_datetime(coord.values):
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


def _find_elevation(
    obj: XrObj, elevation: str | None, point_dims: set[str], exclude: str | None
) -> tuple[str | None, float]:
    if elevation is not None:
        candidates = [_explicit(obj, elevation, "elevation")]
    else:
        candidates = _by_cf(obj, "surface_altitude") + _by_cf(obj, "surface_geopotential")
        for key in known.ELEVATION_STANDARD_NAMES[1:]:
            candidates += _by_cf(obj, key)
        candidates += _by_name(obj, known.ELEVATION_NAMES + known.GEOPOTENTIAL_NAMES)
    for name in candidates:
        da = obj[name]
        dims = {str(d) for d in da.dims}
        if name == exclude or not dims or not dims <= point_dims:
            if elevation is not None:
                raise DimensionError(
                    f"Elevation {name!r} has dims {da.dims}; it must span only the spatial "
                    f"dimensions {sorted(point_dims)}."
                )
            continue
        units = str(da.attrs.get("units", "m")).strip().lower()
        std = str(da.attrs.get("standard_name", "")).lower()
        if std in known.GEOPOTENTIAL_STANDARD_NAMES or is_geopotential(units):
            return name, 1.0 / STANDARD_GRAVITY
        if name.lower() in known.GEOPOTENTIAL_NAMES:
            return name, 1.0 / STANDARD_GRAVITY
        try:
            return name, known.elevation_factor(da.attrs.get("units"), name)
        except IncompatibleUnitsError:
            return name, math.nan  # an error only where it is used (elevation_metres)
    return None, 1.0


def latlon(obj: XrObj, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Latitude and longitude in degrees over ``layout.point_dims``, as float64 arrays.

    Longitudes are wrapped to ``[-180, 180)``; projected grids are converted with
    pyproj.  Latitudes outside ``[-90, 90]`` raise :class:`CoordinateError`.

    Examples
    --------
    >>> ds = xr.Dataset(coords={"lat": [0.0, 10.0], "lon": [190.0, 350.0, 0.0]})
    >>> lat, lon = latlon(ds, find_coords(ds))
    >>> lat.shape, lon[0].tolist()
    ((2, 3), [-170.0, -10.0, 0.0])
    """
    dims = layout.point_dims
    if layout.kind == "projected":
        x_name, y_name = str(layout.x), str(layout.y)
        x = _broadcast(obj, x_name, dims) * _km_factor(obj[x_name])
        y = _broadcast(obj, y_name, dims) * _km_factor(obj[y_name])
        transformer = pyproj.Transformer.from_crs(
            pyproj.CRS.from_wkt(layout.crs), pyproj.CRS.from_epsg(4326), always_xy=True
        )
        lon, lat = transformer.transform(x, y)
        lon, lat = np.asarray(lon, np.float64), np.asarray(lat, np.float64)
        name = f"{layout.y} (projected)"
    else:
        _check_degrees(obj, str(layout.lat), "latitude", "degrees_north")
        _check_degrees(obj, str(layout.lon), "longitude", "degrees_east")
        lat = _broadcast(obj, str(layout.lat), dims)
        lon = _broadcast(obj, str(layout.lon), dims)
        name = layout.lat
    missing = ~(np.isfinite(lat) & np.isfinite(lon))
    if missing.any():
        raise _missing_latlon(obj, layout, int(missing.sum()))
    if np.abs(lat).max(initial=0.0) > 90.0:
        bad = lat[np.abs(lat) > 90.0]
        raise CoordinateError(
            f"Latitude {name!r} has {bad.size} value(s) outside [-90, 90] (e.g. {bad[0]!r}). "
            "Check that latitude and longitude are not swapped and that the units are degrees."
        )
    lon = (lon + 180.0) % 360.0 - 180.0
    return lat, lon


def _check_degrees(obj: XrObj, name: str, what: str, degrees: str) -> None:
    """Raise :class:`CoordinateError` when the ``units`` of ``name`` say radians."""
    units = str(obj[name].attrs.get("units", "")).strip().lower()
    if units in _RADIAN_UNITS:
        raise CoordinateError(
            f"The {what} {name!r} is in radians (units={obj[name].attrs['units']!r}); xnp "
            f"needs degrees. Convert it: ds = ds.assign_coords({{{name!r}: "
            f"np.rad2deg(ds[{name!r}]).assign_attrs(units={degrees!r})}})."
        )


def _missing_latlon(obj: XrObj, layout: Layout, count: int) -> CoordinateError:
    """The error for ``count`` points without a finite latitude/longitude."""
    if layout.kind == "projected":
        names = (str(layout.y), str(layout.x))
        where = f"projected {names[0]!r}/{names[1]!r} missing or outside the projection"
    else:
        names = (str(layout.lat), str(layout.lon))
        where = f"{names[0]!r}/{names[1]!r} NaN or infinite"
    head = f"{count} point(s) have missing latitude/longitude ({where}). "
    dims = layout.point_dims
    if layout.kind == "station" and len(dims) == 1:
        ok = " & ".join(f"np.isfinite(ds[{n!r}])" for n in names)
        return CoordinateError(f"{head}Drop them: ds = ds.isel({{{dims[0]!r}: ({ok}).values}}).")
    fixes = [
        f"ds = ds.isel({{{str(obj[n].dims[0])!r}: np.isfinite(ds[{n!r}]).values}})"
        for n in names
        if obj[n].ndim == 1 and not np.isfinite(np.asarray(obj[n].values, np.float64)).all()
    ]
    if fixes:
        return CoordinateError(f"{head}Drop them: {'; '.join(fixes)}.")
    example = f"ds = ds.isel({{{dims[0]!r}: slice(i0, i1)}})" if dims else "ds.isel(...)"
    return CoordinateError(
        f"{head}Single points of a 2-D grid cannot be dropped: select a part of the grid "
        f"where they are all finite, e.g. {example}, or give them valid values."
    )


def _km_factor(coord: xr.DataArray) -> float:
    units = str(coord.attrs.get("units", "m")).strip().lower()
    return 1000.0 if canonical_units(units) == "km" else 1.0


def _broadcast(obj: XrObj, name: str, dims: tuple[str, ...]) -> np.ndarray:
    variable = obj[name].variable
    unexpected = [str(d) for d in variable.dims if d not in dims]
    if unexpected:
        raise DimensionError(
            f"Coordinate {name!r} has dims {variable.dims}, but the spatial dimensions are "
            f"{dims}; {unexpected} are not spatial. Select along them first."
        )
    full = variable.set_dims({d: obj.sizes[d] for d in dims}).transpose(*dims)
    if not (np.issubdtype(full.dtype, np.number) or np.issubdtype(full.dtype, np.bool_)):
        raise CoordinateError(
            f"Coordinate {name!r} holds {full.dtype} values (e.g. {full.values.flat[0]!r}), "
            "not numbers. Convert it first, e.g. ds.assign_coords("
            f"{name}=ds[{name!r}].astype(float)), or fix how the file was read."
        )
    return np.array(full.values, dtype=np.float64)


def elevation_metres(obj: XrObj, layout: Layout) -> np.ndarray | None:
    """Terrain height in metres over ``layout.point_dims`` (None if there is none).

    Geopotential is divided by standard gravity; kilometres become metres.
    """
    if layout.elevation is None:
        return None
    if not math.isfinite(layout.elevation_scale):  # units that are not a length: say so
        known.elevation_factor(obj[layout.elevation].attrs.get("units"), layout.elevation)
    values = _broadcast(obj, layout.elevation, layout.point_dims)
    return values * layout.elevation_scale

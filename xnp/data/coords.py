"""Coordinate discovery: where latitude, longitude, time and elevation live in a dataset.

:func:`find_coords` asks cf-xarray first (``standard_name``, ``units``, ``axis``)
and falls back to common names (see :mod:`xnp.data.names`); any name can be given
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
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import cf_xarray  # noqa: F401  (registers the .cf accessor)
import numpy as np
import pyproj
import xarray as xr

from xnp.data import names as known
from xnp.data.crs import find_projection, km_factor
from xnp.data.elevation import elevation_metres, find_elevation
from xnp.data.lookup import (
    XrObj,
    by_cf,
    by_name,
    explicit,
    is_latitude,
    is_longitude,
    values_on,
)
from xnp.data.times import find_time
from xnp.errors import (
    ConfigError,
    CoordinateError,
    VariableNotFoundError,
    XnpError,
)

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
    lat_name = explicit(obj, lat, "latitude") if lat else None
    lon_name = explicit(obj, lon, "longitude") if lon else None
    if lat_name is None and crs is None:
        lat_name = next(iter(by_cf(obj, "latitude") + by_name(obj, known.LAT_NAMES)), None)
    if lon_name is None and crs is None:
        lon_name = next(iter(by_cf(obj, "longitude") + by_name(obj, known.LON_NAMES)), None)
    x_name = y_name = wkt = None
    if lat_name is not None and lon_name is not None:
        spatial = {str(d) for d in obj[lat_name].dims} | {str(d) for d in obj[lon_name].dims}
        ndim = obj[lat_name].ndim
        same = obj[lat_name].dims == obj[lon_name].dims
        kind = ("station" if same else "grid") if ndim <= 1 else "curvilinear"
    else:
        x_name, y_name, wkt = find_projection(obj, var, crs)
        spatial = {str(d) for d in obj[x_name].dims} | {str(d) for d in obj[y_name].dims}
        kind = "projected"
    point_dims = _ordered(spatial, order)
    locators = (lat_name, lon_name) if kind != "projected" else (y_name, x_name)
    time_name, time_dim = find_time(obj, time, point_dims, locators)
    elev, scale = find_elevation(obj, elevation, set(point_dims), exclude=variable)
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


#: Units attributes saying a coordinate is in radians.
_RADIAN_UNITS = ("rad", "radian", "radians")


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
        x = values_on(obj, x_name, dims) * km_factor(obj[x_name])
        y = values_on(obj, y_name, dims) * km_factor(obj[y_name])
        transformer = pyproj.Transformer.from_crs(
            pyproj.CRS.from_wkt(layout.crs), pyproj.CRS.from_epsg(4326), always_xy=True
        )
        lon, lat = transformer.transform(x, y)
        lon, lat = np.asarray(lon, np.float64), np.asarray(lat, np.float64)
        name = f"{layout.y} (projected)"
    else:
        _check_degrees(obj, str(layout.lat), "latitude", "degrees_north")
        _check_degrees(obj, str(layout.lon), "longitude", "degrees_east")
        lat = values_on(obj, str(layout.lat), dims)
        lon = values_on(obj, str(layout.lon), dims)
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

"""Covariates (fixed effects): elevation, time of day and of year, user variables.

A covariate is asked for by name.  Built-in names:

``"elevation"``
    Terrain height in metres, from a coordinate or variable found by
    :func:`~xnp.data.coords.find_coords` (geopotential is converted), or from a
    separate DEM DataArray interpolated bilinearly to the points (``dem=``).
``"hour_of_day"``
    sin/cos of the UTC hour of day (two channels), from the real timestamps.
``"solar_time"``
    sin/cos of the local mean solar time, UTC hour + longitude / 15 (two channels).
``"day_of_year"``
    sin/cos of the fraction of the calendar year (two channels).

Any other name is a data variable or coordinate of the dataset (one channel) whose
dimensions are a subset of the variable's.  Each built-in periodic covariate gives
channels named ``{name}_sin`` and ``{name}_cos``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import xarray as xr
from scipy.interpolate import RegularGridInterpolator

from xnp.data import names as known
from xnp.data.coords import Layout, find_coords
from xnp.data.elevation import elevation_metres
from xnp.errors import CoordinateError, DimensionError, VariableNotFoundError

__all__ = [
    "PERIODIC_COVARIATES",
    "covariate_channels",
    "interpolate_dem",
    "point_covariates",
]

#: Built-in covariates that become a (sin, cos) pair.
PERIODIC_COVARIATES = ("hour_of_day", "solar_time", "day_of_year")


def covariate_names(covariates: str | Sequence[str]) -> tuple[str, ...]:
    """Covariate names as a tuple; one name may be given as a plain string.

    Examples
    --------
    >>> covariate_names("elevation"), covariate_names(["elevation", "hour_of_day"])
    (('elevation',), ('elevation', 'hour_of_day'))
    """
    return (covariates,) if isinstance(covariates, str) else tuple(covariates)


def user_covariates(covariates: str | Sequence[str]) -> tuple[str, ...]:
    """The covariates that are the user's own variables or coordinates, with their units.

    The built-in ones are left out: ``elevation`` (converted to metres from any
    length unit) and the periodic time features.

    Examples
    --------
    >>> user_covariates(["elevation", "sst", "hour_of_day"])
    ('sst',)
    """
    return tuple(
        c for c in covariate_names(covariates) if c != "elevation" and c not in PERIODIC_COVARIATES
    )


def covariate_channels(names: Sequence[str]) -> tuple[str, ...]:
    """Names of the channels the covariates ``names`` produce, in order.

    Examples
    --------
    >>> covariate_channels(["elevation", "hour_of_day"])
    ('elevation', 'hour_of_day_sin', 'hour_of_day_cos')
    """
    names = covariate_names(names)
    channels: list[str] = []
    for name in names:
        if name in PERIODIC_COVARIATES:
            channels += [f"{name}_sin", f"{name}_cos"]
        else:
            channels.append(name)
    if len(set(channels)) != len(channels):
        raise VariableNotFoundError(f"Covariates are listed more than once: {list(names)}.")
    return tuple(channels)


def interpolate_dem(dem: xr.DataArray, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Bilinear interpolation of a latitude/longitude DEM to points, in metres.

    ``dem`` must be a regular grid (1-D latitude and longitude).  Longitudes of
    the DEM and of the points may use either convention; regional DEMs may cross the
    dateline; global DEMs wrap around.  Points outside the DEM get NaN.

    Examples
    --------
    >>> dem = xr.DataArray(
    ...     [[0.0, 100.0], [200.0, 300.0]],
    ...     coords={"lat": [0.0, 1.0], "lon": [359.0, 361.0]},
    ...     dims=("lat", "lon"),
    ...     attrs={"units": "m"},
    ... )
    >>> interpolate_dem(dem, np.array([0.5]), np.array([0.0])).tolist()
    [150.0]
    """
    layout = find_coords(dem.to_dataset(name="_dem_"), "_dem_")
    if layout.kind != "grid" or layout.extra_dims or layout.time_dim:
        raise DimensionError(
            f"A DEM must be a 2-D regular latitude/longitude grid; got dims {dem.dims} "
            f"({layout.kind} layout). Select a single field on 1-D lat/lon coordinates."
        )
    lat_dim = str(dem[layout.lat].dims[0])
    lon_dim = str(dem[layout.lon].dims[0])
    values = np.asarray(dem.transpose(lat_dim, lon_dim).values, np.float64)
    values = values * _units_factor(dem)
    dlat = np.asarray(dem[layout.lat].values, np.float64)
    dlon = np.asarray(dem[layout.lon].values, np.float64)
    start = dlon[0]
    dlon = start + (dlon - start) % 360.0  # unwrap so that longitudes increase from `start`
    lat_order, lon_order = np.argsort(dlat), np.argsort(dlon)
    dlat, dlon = dlat[lat_order], dlon[lon_order]
    values = values[np.ix_(lat_order, lon_order)]
    step = np.median(np.diff(dlon)) if dlon.size > 1 else 360.0
    if dlon[-1] - dlon[0] + 1.5 * step >= 360.0:  # global: close the circle
        dlon = np.concatenate([dlon[-1:] - 360.0, dlon, dlon[:1] + 360.0])
        values = np.concatenate([values[:, -1:], values, values[:, :1]], axis=1)
    lon = dlon[0] + (np.asarray(lon, np.float64) - dlon[0]) % 360.0
    interpolator = RegularGridInterpolator(
        (dlat, dlon), values, bounds_error=False, fill_value=np.nan
    )
    return interpolator(np.stack([np.asarray(lat, np.float64), lon], axis=-1))


def _units_factor(da: xr.DataArray) -> float:
    return known.elevation_factor(da.attrs.get("units"), str(da.name))


def point_covariates(
    obj: xr.Dataset | xr.DataArray,
    layout: Layout,
    names: Sequence[str],
    *,
    take: Callable[[xr.DataArray], np.ndarray],
    point_index: tuple[np.ndarray, ...],
    lat: np.ndarray,
    lon: np.ndarray,
    day: np.ndarray | None,
    year: np.ndarray | None,
    dem: xr.DataArray | None = None,
    lat_grid: np.ndarray | None = None,
    lon_grid: np.ndarray | None = None,
) -> np.ndarray:
    """Raw (not normalised) covariates at ``N`` points, shape ``[N, channels]``.

    This is the engine behind :func:`xnp.data.flatten.to_points`, which supplies the
    per-point arrays; use that function rather than this one.

    Parameters
    ----------
    obj, layout
        The data and its coordinate layout.
    names
        Covariate names (see the module docstring).
    take
        Maps a DataArray whose dims are a subset of the variable's to per-point values.
    point_index
        Index of each point into the spatial (``layout.point_dims``) arrays.
    lat, lon
        Per-point coordinates in degrees.
    day, year
        Per-point fractions of the day and of the year, or None without time.
    dem
        Optional DEM for ``"elevation"``.
    lat_grid, lon_grid
        Latitude/longitude over the spatial dims (to interpolate the DEM once).
    """
    n = lat.shape[0]
    columns: list[np.ndarray] = []
    for name in names:
        if name == "elevation":
            columns.append(_elevation(obj, layout, point_index, lat, lon, dem, lat_grid, lon_grid))
        elif name in PERIODIC_COVARIATES:
            if day is None or year is None:
                raise CoordinateError(
                    f"Covariate {name!r} needs a time coordinate, but none was found "
                    f"(coordinates present: {list(map(str, obj.coords))}). "
                    "Give the data a datetime coordinate named 'time' (or with CF "
                    "standard_name 'time'), or drop the covariate."
                )
            fraction = {"hour_of_day": day, "day_of_year": year}.get(name)
            if fraction is None:  # solar_time
                fraction = (day + lon / 360.0) % 1.0
            angle = 2.0 * np.pi * fraction
            columns += [np.sin(angle), np.cos(angle)]
        else:
            columns.append(_user_variable(obj, name, take))
    if not columns:
        return np.zeros((n, 0), np.float64)
    return np.stack([np.broadcast_to(np.asarray(c, np.float64), (n,)) for c in columns], -1)


def _elevation(
    obj: xr.Dataset | xr.DataArray,
    layout: Layout,
    point_index: tuple[np.ndarray, ...],
    lat: np.ndarray,
    lon: np.ndarray,
    dem: xr.DataArray | None,
    lat_grid: np.ndarray | None,
    lon_grid: np.ndarray | None,
) -> np.ndarray:
    if dem is not None:
        if lat_grid is not None and lon_grid is not None:
            return interpolate_dem(dem, lat_grid, lon_grid)[point_index]
        return interpolate_dem(dem, lat, lon)
    grid = elevation_metres(obj, layout)
    if grid is None:
        raise CoordinateError(
            "Covariate 'elevation' was requested but no elevation was found (coordinates "
            f"present: {list(map(str, obj.coords))}). Add it as a coordinate in metres over the "
            "spatial dims, e.g. ds = ds.assign_coords(elevation=dem.interp(lat=ds.lat, "
            "lon=ds.lon)), or give it a CF standard_name 'surface_altitude'."
        )
    return grid[point_index]


def _user_variable(
    obj: xr.Dataset | xr.DataArray, name: str, take: Callable[[xr.DataArray], np.ndarray]
) -> np.ndarray:
    present = [str(n) for n in obj.coords]
    if isinstance(obj, xr.Dataset):
        present += [str(n) for n in obj.data_vars]
    if name not in present:
        raise VariableNotFoundError(
            f"Covariate {name!r} is neither built in ({', '.join(PERIODIC_COVARIATES)}, "
            f"elevation) nor in the data (variables and coordinates: {present})."
        )
    return take(obj[name])

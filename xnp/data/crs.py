"""Projected grids: a CF grid mapping (or ``crs=``) found and read with pyproj.

A dataset on projected ``x``/``y`` coordinates names its coordinate reference
system in a CF ``grid_mapping`` variable; :func:`find_projection` finds both and
:func:`xnp.data.coords.latlon` turns the grid into latitude/longitude with it.
Projected coordinates in kilometres are read as such (:func:`km_factor`).
"""

from __future__ import annotations

from typing import Any

import cf_xarray  # noqa: F401  (registers the .cf accessor)
import pyproj
import xarray as xr

from xnp.data import names as known
from xnp.data.lookup import XrObj, by_name, names_in, present
from xnp.errors import (
    CoordinateError,
)
from xnp.units import canonical_units

__all__ = ["find_projection", "km_factor"]


def find_projection(obj: XrObj, var: XrObj, crs: Any) -> tuple[str, str, str]:
    """``(x, y, crs)``: the projected coordinates of ``var`` and their CRS (as WKT/PROJ text).

    The CRS is ``crs`` when given, else the CF grid mapping ``var`` names (or the
    one grid mapping of ``obj``); missing coordinates or CRS raise a
    :class:`~xnp.errors.CoordinateError` saying what to add.
    """
    axes = obj.cf.axes
    xs = [str(n) for n in axes.get("X", [])] + by_name(obj, known.X_NAMES, coords_only=True)
    ys = [str(n) for n in axes.get("Y", [])] + by_name(obj, known.Y_NAMES, coords_only=True)
    if not xs or not ys:
        raise CoordinateError(
            f"No latitude/longitude (or projected x/y) coordinates found ({present(obj)}). "
            "If they are data variables of the Dataset this was taken from (as "
            "df.to_xarray() gives), make them coordinates before taking a variable, e.g. "
            "ds = ds.set_coords(['latitude', 'longitude']). Otherwise, give them CF "
            "attributes, e.g. ds['nav_lat'].attrs.update(standard_name="
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
        if str(mapping) in names_in(obj):
            return str(mapping)
        raise CoordinateError(
            f"The grid_mapping attribute names {mapping!r} as the projection of "
            f"{x!r}/{y!r}, but no such variable is in the data ({present(obj)}); selecting "
            "variables, as in ds[['t2m']], drops it. Keep it as a coordinate before "
            f"selecting: ds = ds.set_coords({mapping!r})."
        )
    own = [n for n in names_in(obj) if "grid_mapping_name" in obj[n].attrs]
    if len(own) == 1:
        return own[0]
    raise CoordinateError(
        f"Found projected coordinates {x!r}/{y!r} but no map projection: no variable has a "
        f"CF grid_mapping attribute ({present(obj)}). If they are in fact latitude/longitude "
        f"in degrees, say so: ds[{y!r}].attrs.update(standard_name='latitude', "
        f"units='degrees_north'); ds[{x!r}].attrs.update(standard_name='longitude', "
        "units='degrees_east'). Otherwise add the projection as a CF grid-mapping "
        "coordinate, e.g. ds.coords['crs'] = xr.DataArray(0, "
        "attrs=pyproj.CRS('EPSG:27700').to_cf()). (find_coords, to_points and TaskSampler "
        "also take crs='EPSG:27700'.)"
    )


def _vars(obj: XrObj) -> list[xr.DataArray]:
    return list(obj.data_vars.values()) if isinstance(obj, xr.Dataset) else [obj]


def km_factor(coord: xr.DataArray) -> float:
    """Metres per unit of a projected coordinate: 1000 for kilometres, else 1."""
    units = str(coord.attrs.get("units", "m")).strip().lower()
    return 1000.0 if canonical_units(units) == "km" else 1.0

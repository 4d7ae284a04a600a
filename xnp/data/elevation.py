"""Elevation: the terrain height of a dataset, found and converted to metres.

A terrain height (``orog``, ``surface_altitude``, ...) or a surface geopotential
(divided by standard gravity) spanning the spatial dimensions is found by
:func:`find_elevation` (by CF metadata, by name, or as named); :func:`elevation_metres`
reads it in metres at every point.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import cf_xarray  # noqa: F401  (registers the .cf accessor)
import numpy as np

from xnp.data import names as known
from xnp.data.lookup import XrObj, by_cf, by_name, explicit, values_on
from xnp.errors import (
    DimensionError,
    IncompatibleUnitsError,
)
from xnp.units import STANDARD_GRAVITY, is_geopotential

if TYPE_CHECKING:
    from xnp.data.coords import Layout

__all__ = ["elevation_metres", "find_elevation"]


def find_elevation(
    obj: XrObj, elevation: str | None, point_dims: set[str], exclude: str | None
) -> tuple[str | None, float]:
    """``(name, factor to metres)`` of the terrain height over ``point_dims``, or ``(None, 1)``.

    ``elevation`` names it explicitly; otherwise CF metadata and the names of
    :mod:`xnp.data.names` find it (``exclude``: the variable being learned, which
    is never its own elevation).  Units that are not a length give a NaN factor,
    an error only where the elevation is used (:func:`elevation_metres`).
    """
    if elevation is not None:
        candidates = [explicit(obj, elevation, "elevation")]
    else:
        candidates = by_cf(obj, "surface_altitude") + by_cf(obj, "surface_geopotential")
        for key in known.ELEVATION_STANDARD_NAMES[1:]:
            candidates += by_cf(obj, key)
        candidates += by_name(obj, known.ELEVATION_NAMES + known.GEOPOTENTIAL_NAMES)
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


def elevation_metres(obj: XrObj, layout: Layout) -> np.ndarray | None:
    """Terrain height in metres over ``layout.point_dims`` (None if there is none).

    Geopotential is divided by standard gravity; kilometres become metres.
    """
    if layout.elevation is None:
        return None
    if not math.isfinite(layout.elevation_scale):  # units that are not a length: say so
        known.elevation_factor(obj[layout.elevation].attrs.get("units"), layout.elevation)
    values = values_on(obj, layout.elevation, layout.point_dims)
    return values * layout.elevation_scale

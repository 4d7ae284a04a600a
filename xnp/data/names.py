"""Fallback names and CF standard names used by coordinate discovery.

cf-xarray is asked first (``standard_name``, ``units``, ``axis``); these lists are
the fallback for files whose metadata is incomplete.  Every comparison is done on
lower-cased names.  Units are read through the one table of :mod:`xnp.units`.
"""

from __future__ import annotations

from xnp.errors import IncompatibleUnitsError
from xnp.units import METRES, STANDARD_GRAVITY, is_geopotential, metres_per

__all__ = [
    "ELEVATION_NAMES",
    "ELEVATION_STANDARD_NAMES",
    "GEOPOTENTIAL_NAMES",
    "GEOPOTENTIAL_STANDARD_NAMES",
    "LAT_NAMES",
    "LON_NAMES",
    "TIME_NAMES",
    "X_NAMES",
    "Y_NAMES",
    "elevation_factor",
]

#: Latitude coordinate names, most common first.
LAT_NAMES = ("lat", "latitude", "nav_lat", "lats", "xlat")

#: Longitude coordinate names, most common first.
LON_NAMES = ("lon", "longitude", "nav_lon", "lons", "long", "xlong")

#: Time coordinate names, most common first.
TIME_NAMES = ("time", "valid_time", "t", "date", "datetime", "times")

#: Names of terrain height fields in metres.
ELEVATION_NAMES = (
    "elevation",
    "elev",
    "altitude",
    "alt",
    "height",
    "orog",
    "orography",
    "surface_altitude",
    "hgt",
    "topo",
    "topography",
    "dem",
)

#: CF standard names of terrain height in metres.
ELEVATION_STANDARD_NAMES = ("surface_altitude", "altitude", "height_above_mean_sea_level")

#: Names of surface geopotential fields (m² s⁻², divided by gravity to get metres).
GEOPOTENTIAL_NAMES = ("surface_geopotential", "zs", "phis", "geopotential_surface", "sfc_z")

#: CF standard names of surface geopotential.
GEOPOTENTIAL_STANDARD_NAMES = ("surface_geopotential",)

#: Projected x coordinate names.
X_NAMES = ("x", "projection_x_coordinate", "easting", "xc", "rlon")

#: Projected y coordinate names.
Y_NAMES = ("y", "projection_y_coordinate", "northing", "yc", "rlat")


def elevation_factor(units: object, name: str) -> float:
    """Factor from an elevation's ``units`` to metres (geopotential: divided by g).

    Missing units are taken as metres; units that are not a length (or
    geopotential) raise :class:`~xnp.errors.IncompatibleUnitsError`.

    Examples
    --------
    >>> elevation_factor("km", "orog"), elevation_factor(None, "orog"), elevation_factor("ft", "z")
    (1000.0, 1.0, 0.3048)
    """
    if units is None:
        return 1.0
    if is_geopotential(str(units)):
        return 1.0 / STANDARD_GRAVITY
    factor = metres_per(str(units))
    if factor is not None:
        return factor
    raise IncompatibleUnitsError(
        f"The elevation {name!r} has units {str(units)!r}, which is not a length xnp knows "
        f"({', '.join(sorted(METRES))}) nor geopotential "
        f"(m**2 s**-2).  Convert it to metres and set attrs['units'] = 'm'."
    )

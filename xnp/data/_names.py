"""Fallback names, CF standard names and unit spellings used by coordinate discovery.

cf-xarray is asked first (``standard_name``, ``units``, ``axis``); these lists are
the fallback for files whose metadata is incomplete.  Every comparison is done on
lower-cased names.
"""

from __future__ import annotations

__all__ = [
    "ELEVATION_NAMES",
    "ELEVATION_STANDARD_NAMES",
    "GEOPOTENTIAL_NAMES",
    "GEOPOTENTIAL_STANDARD_NAMES",
    "GEOPOTENTIAL_UNITS",
    "KM_UNITS",
    "LAT_NAMES",
    "LON_NAMES",
    "STANDARD_GRAVITY",
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

#: Unit spellings of geopotential (m² s⁻²).
GEOPOTENTIAL_UNITS = ("m**2 s**-2", "m2 s-2", "m^2 s^-2", "m^2/s^2", "m2/s2", "m**2/s**2")

#: Unit spellings of kilometres.
KM_UNITS = ("km", "kilometre", "kilometres", "kilometer", "kilometers")

#: Standard gravity in m s⁻², to convert geopotential to geopotential height.
STANDARD_GRAVITY = 9.80665

#: Projected x coordinate names.
X_NAMES = ("x", "projection_x_coordinate", "easting", "xc", "rlon")

#: Projected y coordinate names.
Y_NAMES = ("y", "projection_y_coordinate", "northing", "yc", "rlat")


#: Metres per unit, for the length units an elevation may come in (lower case).
HEIGHT_UNITS = {
    **dict.fromkeys(("m", "metre", "metres", "meter", "meters", "gpm", "m asl", "m a.s.l."), 1.0),
    **dict.fromkeys(KM_UNITS, 1000.0),
    **dict.fromkeys(("cm", "centimetre", "centimetres", "centimeter", "centimeters"), 0.01),
    **dict.fromkeys(("mm", "millimetre", "millimetres", "millimeter", "millimeters"), 0.001),
    **dict.fromkeys(("dam", "decametre", "decametres", "decameter", "decameters"), 10.0),
    **dict.fromkeys(("ft", "feet", "foot", "international_foot"), 0.3048),
}


def elevation_factor(units: object, name: str) -> float:
    """Factor from an elevation's ``units`` to metres (geopotential: divided by g).

    Missing units are taken as metres; units that are not a length (or
    geopotential) raise :class:`~xnp.errors.IncompatibleUnitsError`.

    Examples
    --------
    >>> elevation_factor("km", "orog"), elevation_factor(None, "orog"), elevation_factor("ft", "z")
    (1000.0, 1.0, 0.3048)
    """
    from xnp.errors import IncompatibleUnitsError

    if units is None:
        return 1.0
    text = " ".join(str(units).split()).lower()
    if text in GEOPOTENTIAL_UNITS:
        return 1.0 / STANDARD_GRAVITY
    if text in HEIGHT_UNITS:
        return HEIGHT_UNITS[text]
    raise IncompatibleUnitsError(
        f"The elevation {name!r} has units {str(units)!r}, which is not a length xnp knows "
        f"({', '.join(sorted({'m', 'km', 'cm', 'mm', 'dam', 'ft'}))}) nor geopotential "
        f"(m**2 s**-2).  Convert it to metres and set attrs['units'] = 'm'."
    )

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

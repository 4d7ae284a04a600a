"""Units: one table of unit spellings, lengths in metres, and parsers of sizes and distances.

xnp only has to tell equal units from different ones (``"kelvin"`` is ``"K"``,
``"W m**-2"`` is ``"W m-2"``) and to convert the few lengths it reads (elevations,
projected coordinates, a context radius).  A table does that; a units library would
not pay its way (cf-units needs the UDUNITS C library, pint is a large dependency).

This module sits at the bottom of the package: it imports only :mod:`xnp.errors`
(and numpy, to accept numpy numbers).
"""

from __future__ import annotations

import math
import re

import numpy as np

from xnp.errors import ConfigError

__all__ = [
    "METRES",
    "SPELLINGS",
    "STANDARD_GRAVITY",
    "canonical_units",
    "is_geopotential",
    "metres_per",
    "parse_bytes",
    "parse_distance_km",
    "parse_seconds",
]

#: Spellings of the same unit met in CF/UDUNITS metadata: one canonical name each,
#: and its lower-case aliases.
SPELLINGS = {
    "K": ("k", "kelvin", "kelvins", "degk", "deg_k", "degree_kelvin", "degrees_kelvin"),
    "degC": ("degc", "deg_c", "°c", "celsius", "degree_celsius", "degrees_celsius",
             "degree_c", "degrees_c", "c", "deg c", "degree c", "degrees c"),
    "degF": ("degf", "deg_f", "°f", "fahrenheit", "degree_fahrenheit", "degrees_fahrenheit"),
    "m": ("m", "metre", "metres", "meter", "meters", "gpm", "m asl", "m a.s.l."),
    "km": ("km", "kilometre", "kilometres", "kilometer", "kilometers"),
    "cm": ("cm", "centimetre", "centimetres", "centimeter", "centimeters"),
    "mm": ("mm", "millimetre", "millimetres", "millimeter", "millimeters"),
    "dam": ("dam", "decametre", "decametres", "decameter", "decameters"),
    "ft": ("ft", "feet", "foot", "international_foot"),
    "m s-1": ("m s-1", "m/s", "m s**-1", "m.s-1", "m s^-1", "meters per second",
              "metres per second"),
    "Pa": ("pa", "pascal", "pascals"),
    "hPa": ("hpa", "mbar", "millibar", "millibars", "mb"),
    "1": ("1", "", "dimensionless", "-"),
    "%": ("%", "percent"),
}  # fmt: skip
_ALIASES = {alias: unit for unit, aliases in SPELLINGS.items() for alias in aliases}

#: Metres per unit of the lengths in :data:`SPELLINGS`.
METRES = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001, "dam": 10.0, "ft": 0.3048}

#: Standard gravity in m s⁻², to convert geopotential to geopotential height.
STANDARD_GRAVITY = 9.80665


def canonical_units(units: str) -> str:
    """One spelling per unit for the common CF/UDUNITS names (others as written).

    Units outside the table have their exponents written the UDUNITS way, so that
    ERA5's ``W m**-2`` and CMIP's ``W m-2`` (or ``kg m^-2 s^-1``, ``kg.m-2.s-1``,
    ``kg/m2/s``) compare equal.

    Examples
    --------
    >>> (
    ...     canonical_units("kelvin"),
    ...     canonical_units(" degrees_Celsius "),
    ...     canonical_units("W m**-2"),
    ...     canonical_units("kg/m2/s"),
    ... )
    ('K', 'degC', 'W m-2', 'kg m-2 s-1')
    """
    text = " ".join(str(units).split())
    if text.lower() in _ALIASES:
        return _ALIASES[text.lower()]
    text = re.sub(r"\*\*|\^", "", text)  # m**-2, m^-2 → m-2
    text = re.sub(r"(?<=[\w)])\.(?=[A-Za-z])", " ", text)  # kg.m-2 → kg m-2
    text = re.sub(  # /s → s-1, /m2 → m-2
        r"/\s*([A-Za-z]+)(-?\d*)", lambda m: f" {m[1]}{-int(m[2] or 1)}", text
    )
    text = " ".join(text.split())
    return _ALIASES.get(text.lower(), text)


def metres_per(units: str) -> float | None:
    """Metres per ``units`` when they are a length of :data:`METRES`, else None.

    Examples
    --------
    >>> metres_per("kilometres"), metres_per("ft"), metres_per("K")
    (1000.0, 0.3048, None)
    """
    return METRES.get(canonical_units(units))


def is_geopotential(units: str) -> bool:
    """Whether ``units`` are those of geopotential, m² s⁻² (in any common spelling).

    Examples
    --------
    >>> is_geopotential("m**2 s**-2"), is_geopotential("m^2/s^2"), is_geopotential("m")
    (True, True, False)
    """
    return canonical_units(units) == "m2 s-2"


_BYTES = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(value: str | int) -> int:
    """Bytes from an int or a string such as ``"2GB"`` or ``"512 MiB"``.

    Examples
    --------
    >>> parse_bytes("512 MiB"), parse_bytes(1000)
    (536870912, 1000)
    """
    if isinstance(value, int | np.integer):
        return int(value)
    number, unit = _quantity(value, "b")
    if unit not in _BYTES:
        raise ConfigError(f"cannot read {value!r} as a memory size; use e.g. '2GB' or '512MiB'.")
    return int(number * _BYTES[unit])


def _quantity(value: object, default_unit: str) -> tuple[float, str]:
    """``(number, lower-case unit)`` of a string such as ``"2GB"``; unit ``""`` if unreadable."""
    m = re.fullmatch(r"\s*([0-9]+\.?[0-9]*|\.[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if not m:
        return math.nan, ""
    return float(m.group(1)), (m.group(2) or default_unit).lower()


_SECONDS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hour": 3600,
    "hours": 3600,
}


def parse_seconds(value: str | float) -> float:
    """Seconds from a number (seconds) or a string such as ``"10min"``, ``"90 s"``, ``"1.5h"``.

    Examples
    --------
    >>> parse_seconds("10min"), parse_seconds("1.5 h"), parse_seconds(30)
    (600.0, 5400.0, 30.0)
    """
    if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool):
        seconds = float(value)
    else:
        number, unit = _quantity(value, "s")
        if unit not in _SECONDS:
            raise ConfigError(f"cannot read {value!r} as a duration; use e.g. '10min' or '1h'.")
        seconds = number * _SECONDS[unit]
    if not 0 < seconds < np.inf:
        raise ConfigError(f"a duration must be positive and finite; got {value!r}.")
    return seconds


_DISTANCE = (
    r"\s*([0-9]+\.?[0-9]*(?:e[+-]?[0-9]+)?|\.[0-9]+(?:e[+-]?[0-9]+)?)\s*"
    r"(km|m|kilometres?|kilometers?|metres?|meters?)?\s*"
)


def parse_distance_km(value: str | float) -> float:
    """Kilometres from a number (km) or a string such as ``"500km"`` or ``"250 m"``.

    Examples
    --------
    >>> parse_distance_km("500km"), parse_distance_km("250 m"), parse_distance_km(3)
    (500.0, 0.25, 3.0)
    >>> parse_distance_km("500 KM"), parse_distance_km("1e6 metres")
    (500.0, 1000.0)
    """
    if isinstance(value, bool | np.bool_):
        raise ConfigError(f"a context radius is a distance, not {value!r}; use e.g. '500km'.")
    if isinstance(value, int | float | np.integer | np.floating):
        km = float(value)
    else:
        m = re.fullmatch(_DISTANCE, str(value), flags=re.IGNORECASE)
        if not m:
            raise ConfigError(
                f"cannot read {value!r} as a distance; use e.g. '500km', '250 m' or a number "
                "of kilometres."
            )
        metres = canonical_units(m.group(2) or "km") != "km"
        km = float(m.group(1)) / (1000.0 if metres else 1.0)
    if not km > 0:
        raise ConfigError(f"a context radius must be positive; got {value!r}.")
    return km

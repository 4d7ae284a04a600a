"""Finding variables in a dataset: by CF metadata (cf-xarray), by name, or as named.

The primitives of coordinate discovery (:mod:`xnp.data.coords`, the time and
elevation and grid-mapping lookups beside it): cf-xarray is asked first
(``standard_name``, ``units``, ``axis``), then the fallback names of
:mod:`xnp.data.names`; an explicitly named variable must exist.  Also the one
test of whether a coordinate holds latitudes or longitudes
(:func:`is_latitude`, :func:`is_longitude`), which scoring uses too.
"""

from __future__ import annotations

from collections.abc import Hashable

import cf_xarray  # noqa: F401  (registers the .cf accessor)
import numpy as np
import xarray as xr

from xnp.data import names as known
from xnp.errors import (
    CoordinateError,
    DimensionError,
)

__all__ = [
    "XrObj",
    "by_cf",
    "by_name",
    "explicit",
    "is_latitude",
    "is_longitude",
    "names_in",
    "present",
    "values_on",
]


XrObj = xr.Dataset | xr.DataArray


def names_in(obj: XrObj) -> list[str]:
    """Names of the coordinates (and, of a Dataset, the data variables) of ``obj``."""
    names = [str(n) for n in obj.coords]
    if isinstance(obj, xr.Dataset):
        names += [str(n) for n in obj.data_vars]
    return names


def present(obj: XrObj) -> str:
    """What ``obj`` holds, for messages: its coordinates and data variables."""
    coords = ", ".join(repr(str(n)) for n in obj.coords) or "none"
    text = f"coordinates present: {coords}"
    if isinstance(obj, xr.Dataset):
        text += f"; data variables: {', '.join(repr(str(n)) for n in obj.data_vars) or 'none'}"
    return text


def explicit(obj: XrObj, name: str, what: str) -> str:
    """``name`` if ``obj`` holds it, else a :class:`~xnp.errors.CoordinateError` about ``what``."""
    if name not in names_in(obj):
        raise CoordinateError(
            f"The {what} {name!r} you named is not in the data ({present(obj)}). "
            f"Pass the name of one of these."
        )
    return name


def by_cf(obj: XrObj, key: str) -> list[str]:
    """Names cf-xarray finds for ``key`` (``"latitude"``, ``"time"``, ...) by criteria or name."""
    found: list[Hashable] = list(obj.cf.coordinates.get(key, []))
    found += list(obj.cf.standard_names.get(key, []))
    return [str(n) for n in found]


def by_name(obj: XrObj, fallbacks: tuple[str, ...], coords_only: bool = False) -> list[str]:
    """Names of ``obj`` among ``fallbacks`` (case-insensitive), in the order of ``fallbacks``."""
    pool = [str(n) for n in obj.coords] if coords_only else names_in(obj)
    lower = {n.lower(): n for n in pool}
    return [lower[f] for f in fallbacks if f in lower]


def _is_role(coord: xr.DataArray, key: str, names: tuple[str, ...]) -> bool:
    name = str(coord.name)
    if name.lower() in names:
        return True
    return name in by_cf(xr.Dataset(coords={name: coord.variable}), key)


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


def values_on(obj: XrObj, name: str, dims: tuple[str, ...]) -> np.ndarray:
    """The values of ``obj[name]`` broadcast to ``dims`` (in that order), as numpy.

    A variable with dims outside ``dims`` raises :class:`~xnp.errors.DimensionError`.
    """
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

"""A background field whose departures are interpolated: ``predict(..., background=)``.

Geostatisticians rarely interpolate a temperature field itself: they interpolate
its departures from a background that already knows the large, fixed structure
(a climatology per hour of day, a model forecast, last year's analysis): the coast,
the hills, the lapse rate.  What is left is smoother and more nearly stationary,
which is what kriging, a GP and a neural process trained on stationary fields
interpolate best.  With ``background=`` the observations minus the background at
their places are the context; the background at the targets is added to the
predictive mean (and to joint samples); the std is the interpolation's.

The background is an :class:`xarray.DataArray` over some of the data's
coordinates: spatial ones (a grid of latitude and longitude, projected x/y, or a
station dimension) and optionally ``time``.  It is *read at* the points, by
coordinate values, not aligned by index: linear interpolation along numeric
coordinates (exact at the background's own nodes), exact selection along others
(times).  A coordinate is matched by name, else by role (latitude, longitude,
time, as :mod:`xnp.data.lookup` recognises them).  A point the background does not
cover (outside its grid, a missing time, a NaN) is an error, never a NaN result.
A climatology grouped by a part of the date (``ds.t2m.groupby("time.hour").mean()``,
or by ``"time.month"``, ``"time.dayofyear"``) is read at each time's hour (month, day
of the year): its ``hour`` dimension matches the data's time coordinate.

These functions work on any predictor's inputs and outputs, so a baseline can be
given exactly the same departures (the benchmarks do).

Examples
--------
>>> import numpy as np, xarray as xr
>>> grid = xr.Dataset(coords={"lat": [50.0, 51.0], "lon": [0.0, 1.0, 2.0]})
>>> clim = xr.DataArray(np.arange(6.0).reshape(2, 3), coords=grid.coords, name="t")
>>> obs = xr.Dataset(
...     {"t": ("site", [1.5, 7.0])},
...     coords={"lat": ("site", [50.0, 51.0]), "lon": ("site", [0.5, 2.0])},
... )
>>> subtract(obs, {"t": clim})["t"].values
array([1., 2.])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from xnp.data.coords import locators_as_coords
from xnp.data.lookup import by_cf, is_latitude, is_longitude
from xnp.errors import ConfigError, CoordinateError, IncompatibleUnitsError
from xnp.units import canonical_units

__all__ = ["as_backgrounds", "restore", "subtract", "values_at"]

#: Output variables that hold values of the field (the std does not move with it).
SHIFTED = ("mean", "samples")

#: Dimensions of a climatology grouped by a part of the date, read at each time's part.
DATE_PARTS = ("hour", "month", "dayofyear")


def as_backgrounds(background: Any, variables: tuple[str, ...]) -> dict[str, xr.DataArray]:
    """``background`` as one DataArray per variable, checked.

    A DataArray serves a one-variable model; a Dataset or a dict gives one per
    variable (variables left out are interpolated as they are).
    """
    if isinstance(background, xr.DataArray):
        if len(variables) != 1:
            raise ConfigError(
                f"background is one DataArray, but the model predicts {list(variables)}; give "
                "a Dataset or a dict with one background per variable."
            )
        found = {variables[0]: background}
    elif isinstance(background, xr.Dataset | Mapping):
        found = {str(k): v for k, v in background.items()}
        unknown = sorted(set(found) - set(variables))
        if unknown:
            raise ConfigError(
                f"background has {unknown}, which the model does not predict "
                f"({list(variables)}); name the backgrounds after the model's variables."
            )
    else:
        raise ConfigError(
            "background must be an xarray DataArray (or a Dataset or dict of them, one per "
            f"variable) over the data's coordinates; got {type(background).__name__}."
        )
    for name, field in found.items():
        if not isinstance(field, xr.DataArray):
            raise ConfigError(
                f"background[{name!r}] must be a DataArray; got {type(field).__name__}."
            )
        if field.ndim == 0:
            raise ConfigError(
                f"background[{name!r}] is a single number; subtract a constant from the data "
                "yourself, or give a field over the data's coordinates."
            )
        if not np.issubdtype(field.dtype, np.number):
            raise ConfigError(f"background[{name!r}] holds {field.dtype} values, not numbers.")
    return found


def _times(like: xr.DataArray) -> list[str]:
    return [str(c) for c in like.coords if np.issubdtype(like[c].dtype, np.datetime64)]


def _indexer(dim: str, like: xr.DataArray, background: xr.DataArray) -> xr.DataArray | None:
    """The values of ``like``'s points along the background's ``dim`` (None: no match)."""
    name = _role(dim, like, background)
    if name is not None:
        return xr.DataArray(like[name].variable)
    times = _times(like)
    if dim in DATE_PARTS and len(times) == 1:  # a climatology grouped by f"time.{dim}"
        return xr.DataArray(getattr(like[times[0]].dt, dim).variable)
    return None


def _role(name: str, like: xr.DataArray, background: xr.DataArray) -> str | None:
    """The coordinate of ``like`` that plays the role of the background's ``name``."""
    if name in like.coords:
        return name
    coord = background[name]
    if is_latitude(coord):
        found = [c for c in like.coords if is_latitude(like[c])]
    elif is_longitude(coord):
        found = [c for c in like.coords if is_longitude(like[c])]
    elif name in by_cf(background, "time") or np.issubdtype(coord.dtype, np.datetime64):
        found = _times(like)
    else:
        found = []
    return str(found[0]) if len(found) == 1 else None


def values_at(
    background: xr.DataArray,
    like: xr.DataArray,
    what: str = "background",
    needed: xr.DataArray | None = None,
) -> xr.DataArray:
    """The background read at the points of ``like`` (same dims as ``like``'s coordinates).

    Numeric coordinates are interpolated linearly, others selected exactly; a point
    left uncovered raises :class:`~xnp.errors.ConfigError`, unless ``needed`` (a
    boolean array over ``like``'s dims) says it needs no value (a missing observation).
    """
    exact, numeric = {}, {}
    for dim in background.dims:
        if dim not in background.coords:
            raise CoordinateError(
                f"{what} has no coordinate values along {dim!r}; it is read at the data's "
                f"points by coordinate value, so give it {dim!r} coordinates."
            )
        indexer = _indexer(str(dim), like, background)
        if indexer is None:
            raise CoordinateError(
                f"{what} has dimension {dim!r}, which matches no coordinate of the data "
                f"({', '.join(map(repr, map(str, like.coords))) or 'none'}). Rename it to the "
                "data's coordinate, or reduce or select it first."
            )
        if np.issubdtype(background[dim].dtype, np.number) and str(dim) not in DATE_PARTS:
            numeric[dim] = indexer
        else:
            exact[dim] = indexer
    field = background.reset_coords(drop=True)
    try:
        field = field.sel(exact) if exact else field
    except KeyError as err:
        raise ConfigError(
            f"{what} lacks some of the data's {', '.join(map(repr, exact))} values ({err}); "
            "give it every time (hour, month) of the data, or no such dimension."
        ) from err
    if numeric:
        field = field.interp(numeric, method="linear")
    field = field.drop_vars([c for c in field.coords if c not in field.dims])
    missing = field.isnull()
    if needed is not None:
        missing = missing & needed
    if field.chunks:  # a dask background: each block is checked when it is computed
        return xr.apply_ufunc(
            _covered, field, missing, kwargs={"what": what}, dask="parallelized",
            output_dtypes=[field.dtype],
        )  # fmt: skip
    if bool(missing.any()):
        raise ConfigError(_gap_message(what, int(missing.sum()), f"{missing.size} points"))
    return field


def _gap_message(what: str, count: int, among: str) -> str:
    return (
        f"{what} has no value at {count} of {among} of the data (they lie outside its "
        "coordinates, e.g. longitudes 0–360 against −180–180, or it holds NaN there). "
        "Extend or fill the background to cover every observation and target."
    )


def _covered(values: np.ndarray, missing: np.ndarray, what: str) -> np.ndarray:
    """``values``, or a :class:`~xnp.errors.ConfigError` if a needed one is missing (a block)."""
    if np.any(missing):
        raise ConfigError(_gap_message(what, int(np.sum(missing)), "the points in one block"))
    return np.broadcast_to(values, np.broadcast_shapes(values.shape, missing.shape))


def _check_units(field: xr.DataArray, variable: xr.DataArray, name: str) -> None:
    have, want = field.attrs.get("units"), variable.attrs.get("units")
    if have and want and canonical_units(have) != canonical_units(want):
        raise IncompatibleUnitsError(
            f"background[{name!r}] is in {have!r} but the data's {name!r} in {want!r}; "
            "convert one of them first."
        )


def subtract(data: xr.Dataset, backgrounds: Mapping[str, xr.DataArray]) -> xr.Dataset:
    """``data`` with each variable's background subtracted at its points (a new Dataset)."""
    out = data.copy()
    located, _ = locators_as_coords(data, None)  # latitude/longitude stored as variables
    for name, field in backgrounds.items():
        if name not in data.data_vars:
            continue
        _check_units(field, data[name], name)
        observed = data[name].notnull()  # a missing observation needs no background
        values = values_at(field, located[name], f"background[{name!r}]", observed)
        if not data[name].chunks:  # in-memory data stay in memory (and are checked now)
            values = values.compute()
        with xr.set_options(keep_attrs=True):
            out[name] = data[name] - values.transpose(*[d for d in data[name].dims
                                                         if d in values.dims])  # fmt: skip
    return out


def restore(pred: xr.Dataset, backgrounds: Mapping[str, xr.DataArray]) -> xr.Dataset:
    """``pred`` with each variable's background added to its mean and samples."""
    out = pred.copy()
    for name, field in backgrounds.items():
        shifted = [f"{name}_{kind}" for kind in SHIFTED if f"{name}_{kind}" in pred.data_vars]
        if not shifted:
            continue
        values = values_at(field, pred[shifted[0]], f"background[{name!r}]")
        if not pred[shifted[0]].chunks:  # an eager prediction stays eager
            values = values.compute()
        for var in shifted:
            with xr.set_options(keep_attrs=True):
                out[var] = (pred[var] + values).transpose(*pred[var].dims)
        out.attrs["xnp_background"] = (
            (out.attrs.get("xnp_background", "") + "; ").lstrip("; ")
            + f"{name}: departures from the background interpolated, the background added "
            "to the mean"
        )
    return out

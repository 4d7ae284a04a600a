"""Where to predict: the target template, and the chunks of a lazy result.

The targets of :func:`xnp.predict` (a grid, stations, a curvilinear or projected
grid, a dict of coordinates, or the context itself for gap filling) become a
:class:`Template`: the coordinates, the model's covariates read at the targets,
the dask chunks of a lazy result and the dimension order of the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from xnp.data.coords import find_coords, is_latitude, is_longitude, locators_as_coords
from xnp.data.times import is_datetime
from xnp.errors import (
    ConfigError,
    XnpError,
)

__all__ = [
    "ONE_PLACE",
    "Template",
    "at_one_place",
    "check_chunks",
    "checked_dataset",
    "template_of",
]


def checked_dataset(data: xr.Dataset | xr.DataArray, what: str) -> xr.Dataset:
    """``data`` as a Dataset (an unnamed DataArray as ``_xnp_values``), else a clear error.

    ``what`` names the argument in the message (``"data"``, ``"targets"``).
    """
    if isinstance(data, xr.DataArray):
        if data.name is None:
            return data.to_dataset(name="_xnp_values")
        return data.to_dataset()
    if not isinstance(data, xr.Dataset):
        hint = ""
        if isinstance(data, pd.DataFrame):
            hint = (
                " For a table of sites with latitude/longitude columns, use "
                "xr.Dataset.from_dataframe(df) (or a dict such as {'lat': ('site', "
                "df.lat.values), 'lon': ('site', df.lon.values)} for targets)."
            )
        raise ConfigError(
            f"{what} must be an xarray Dataset or DataArray; got {type(data).__name__}.{hint}"
        )
    return data


def _is_scalar(value: Any) -> bool:
    """A number or a 0-d array (or DataArray): one coordinate value."""
    if isinstance(value, int | float | np.number):
        return True
    return isinstance(value, np.ndarray | xr.DataArray) and value.ndim == 0


#: The dimension a dataset at a single place (scalar latitude/longitude) is given
#: for the flattening to points, which needs a spatial dimension.
ONE_PLACE = "_xnp_place"


def at_one_place(ds: xr.Dataset, names: Mapping[str, Any], variable: str | None = None
                  ) -> xr.Dataset | None:  # fmt: skip
    """``ds`` along a dimension of length one when it lies at a single place, else None.

    Data at one place (``ds.sel(lat=51, lon=0)``, one station of a (station, time)
    dataset at one time) have scalar latitude/longitude and no spatial
    dimension; their scalar variables (but times and a CF grid mapping) get the
    dimension ``_xnp_place`` of length one, which the caller squeezes away.
    """
    if variable is not None and ds[variable].ndim:
        return None
    scalar = {
        k: v.set_dims(ONE_PLACE)
        for k, v in ds.variables.items()
        if v.ndim == 0 and "grid_mapping_name" not in v.attrs and not is_datetime(v.values)
    }
    if not scalar:  # (a quick answer for the usual grids and station sets)
        return None
    try:
        layout = find_coords(ds, variable, **names)
    except XnpError:
        return None  # the flattening says what is missing
    if layout.point_dims or (variable is None and layout.time_dim in ds.dims):
        return None
    return ds.assign_coords({k: v for k, v in scalar.items() if k in ds.coords}).assign(
        {k: v for k, v in scalar.items() if k in ds.data_vars}
    )


#: CF attributes of the coordinates of a prediction, by role (``axis`` only for 1-D
#: dimension coordinates); a coordinate's own attributes win.
_CF_ATTRS = {
    "latitude": {"standard_name": "latitude", "units": "degrees_north", "axis": "Y"},
    "longitude": {"standard_name": "longitude", "units": "degrees_east", "axis": "X"},
    "time": {"standard_name": "time", "axis": "T"},
    "init_time": {"standard_name": "forecast_reference_time"},
    "lead_time": {"standard_name": "forecast_period"},
    "valid_time": {"standard_name": "time"},
}


def with_cf_attrs(out: xr.Dataset) -> xr.Dataset:
    """``out`` whose latitude, longitude and time coordinates carry their CF attributes.

    ``standard_name``, ``units`` (degrees) and ``axis`` are added where missing, on
    new coordinate variables (the template's are never modified); attributes the
    coordinates have are kept.

    Examples
    --------
    >>> out = with_cf_attrs(xr.Dataset(coords={"lat": [50.0, 51.0], "lon": [0.0, 1.0]}))
    >>> out.lat.attrs
    {'standard_name': 'latitude', 'units': 'degrees_north', 'axis': 'Y'}
    """
    new = {}
    for name, coord in out.coords.items():
        if name in out.xindexes and len(out.xindexes.get_all_coords(name)) > 1:
            continue  # a level of a stacked (multi-)index: replacing it would break the index
        role = None
        if name in ("init_time", "lead_time", "valid_time"):
            role = name
        elif is_datetime(np.asarray(coord.values)):
            role = "time"
        elif coord.dtype.kind == "f" and is_latitude(coord):
            role = "latitude"
        elif coord.dtype.kind == "f" and is_longitude(coord):
            role = "longitude"
        if role is None:
            continue
        extra = dict(_CF_ATTRS[role])
        if name not in out.dims or coord.ndim != 1:
            extra.pop("axis", None)
        missing = {k: v for k, v in extra.items() if k not in coord.attrs}
        if missing:
            variable = coord.variable.copy(deep=False)
            variable.attrs = {**coord.attrs, **missing}
            new[name] = variable
    return out.assign_coords(new) if new else out


@dataclasses.dataclass(frozen=True)
class Template:
    """Where to predict: the target coordinates, and how to lay out the result.

    ``points`` holds the coordinates and the data variables the model reads at the
    targets (covariates); ``chunks`` are the dask chunks of the template's data
    (for a lazy result), over the dims of ``points``; ``order`` is the dimension
    order of its main data variable, which the result follows.
    """

    points: xr.Dataset
    chunks: dict[str, Any] = dataclasses.field(default_factory=dict)
    order: tuple[str, ...] = ()

    def arrange(self, out: xr.Dataset) -> xr.Dataset:
        """``out`` with the template's dims in the template variable's order (last).

        On a projected grid, each prediction names its CF grid mapping (the
        ``grid_mapping`` attribute), as the template's variables do.  Latitude,
        longitude and time coordinates get their CF attributes where they lack
        them (:func:`with_cf_attrs`).
        """
        out = with_cf_attrs(out)
        mapping = [str(k) for k, v in out.coords.items() if "grid_mapping_name" in v.attrs]
        if len(mapping) == 1:
            for v in out.data_vars.values():
                v.attrs.setdefault("grid_mapping", mapping[0])
        own = [d for d in self.order if d in out.dims]
        if len(own) < 2 or tuple(d for d in out.dims if d in own) == tuple(own):
            return out
        return out.transpose(*[d for d in out.dims if d not in own], *own)


def template_of(
    targets: Any,
    data: xr.Dataset,
    keep: Sequence[str] = (),
    names: Mapping[str, Any] | None = None,
) -> Template:
    """The targets (or, for gap filling, ``data``) as a :class:`Template`.

    Data variables are dropped, but for the model's covariates (``keep``; e.g. a
    land fraction on the target grid, or the elevation under any name the
    coordinate discovery knows), which are read at the targets.  Variables that
    locate the points (latitude/longitude or a CF grid mapping stored as data
    variables) become coordinates.  ``names`` are coordinate names recorded at fit
    time (see :func:`coord_names`).  A dict of coordinates makes a grid; scalar values
    are a grid of one point.
    """
    if isinstance(targets, Mapping) and not isinstance(targets, xr.Dataset):
        coords = {
            k: np.atleast_1d(np.asarray(v)) if _is_scalar(v) else v for k, v in targets.items()
        }
        try:
            return Template(xr.Dataset(coords=coords))
        except (ValueError, TypeError) as err:
            raise ConfigError(
                f"cannot make target coordinates of the dict with keys {list(targets)}: {err}. "
                "Give 1-D arrays for a grid, e.g. {'lat': [50.0, 51.0], 'lon': [0.0, 1.0]}, "
                "or (dim, values) pairs of equal length for scattered sites, e.g. "
                "{'lat': ('site', [50.0, 51.0]), 'lon': ('site', [0.0, 1.0])}."
            ) from err
    src = data if targets is None else checked_dataset(targets, "targets")
    main = max(src.data_vars.values(), key=lambda v: v.ndim, default=None)
    src, layout = locators_as_coords(src, names)
    kept = list(keep)
    if "elevation" in keep and layout is not None and layout.elevation:
        kept.append(layout.elevation)
    tmpl = src.drop_vars([v for v in src.data_vars if v not in kept])
    chunks = {}
    if targets is not None:  # the chunks of the first chunked data variable, for the lazy path
        first = next((v.chunksizes for v in src.data_vars.values() if v.chunks), {})
        chunks = {d: c for d, c in first.items() if d in tmpl.dims}
    order = () if main is None else tuple(str(d) for d in main.dims)
    return Template(tmpl, chunks, order)


def check_chunks(chunks: Any, template: xr.Dataset) -> dict[str, Any]:
    """``chunks`` as a dict over the template's dims (an int applies to every dim)."""
    if chunks is None or (isinstance(chunks, Mapping) and not chunks):
        return {}
    dims = list(template.dims)
    if isinstance(chunks, int | np.integer) and not isinstance(chunks, bool):
        if chunks < 1 and chunks != -1:
            raise ConfigError(
                f"chunks={chunks!r}: give a positive number of points per block along each "
                "target dimension (or -1 for whole dimensions), or leave chunks out for an "
                "in-memory result."
            )
        return dict.fromkeys(dims, int(chunks))
    if not isinstance(chunks, Mapping):
        raise ConfigError(
            f"chunks must be a dict of target dimension to chunk size (e.g. {{'lat': 64}}) or "
            f"one int for every dimension; got {type(chunks).__name__}."
        )
    unknown = [d for d in chunks if d not in dims]
    if unknown:
        raise ConfigError(
            f"chunks names dimension(s) {unknown} that the targets do not have; their "
            f"dimensions are {dims}."
        )
    for d, c in chunks.items():
        sizes = c if isinstance(c, tuple) else (c,)
        ok = c is None or c == -1 or c == "auto"
        ok |= all(
            isinstance(n, int | np.integer) and not isinstance(n, bool) and n > 0 for n in sizes
        ) and (not isinstance(c, tuple) or sum(c) == template.sizes[d])
        if not ok:
            raise ConfigError(
                f"chunks[{d!r}] = {c!r} is not a chunk size: give a positive int (points per "
                f"block along {d!r}), -1 for the whole dimension, 'auto', or a tuple of "
                f"positive block sizes adding up to its length {template.sizes[d]}."
            )
    return dict(chunks)

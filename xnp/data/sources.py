"""The sources a task sampler reads from: one dataset each, with its layout and coordinates.

:func:`make_source` checks a dataset (its variables, time layout), reads it into
memory once when it fits the sampler's load budget, adds the DEM elevation of its
places, and caches its coordinates; :meth:`Source.read` reads the observed points
of some frames inside a window.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import xarray as xr

from xnp.data.coords import Layout, find_coords, latlon, resolve_variables
from xnp.data.covariates import interpolate_dem
from xnp.data.flatten import PointSet, as_dataset, to_points
from xnp.data.tasks import in_window
from xnp.data.times import match_hours, time_hours
from xnp.errors import ConfigError, EmptyDataError

__all__ = ["Source", "Window", "make_source"]

log = logging.getLogger("xnp.data")

_DEM_COORD = "_xnp_dem_elevation"
Window = tuple[tuple[float, float], tuple[float, float]]


@dataclasses.dataclass(frozen=True, eq=False)
class Source:
    """One dataset the sampler reads from, with its layout and cached coordinates."""

    name: str
    id: int
    view: xr.Dataset
    layout: Layout
    variables: tuple[str, ...]
    covariates: tuple[str, ...]
    extra_dims: Literal["raise", "flatten"]
    lat_grid: np.ndarray
    lon_grid: np.ndarray
    hours: np.ndarray | None

    def frame(self, hours: float) -> int | None:
        """Index of the frame at ``hours`` (None if absent or without a time axis)."""
        if self.hours is None:
            return None
        i = int(match_hours(self.hours, np.array([hours]))[0])
        return i if i >= 0 else None

    def read(self, frames: Sequence[int] | None, window: Window | None) -> PointSet | None:
        """Read the observed points of some frames inside a window (None if there are none)."""
        selection: dict[str, Any] = {}
        if frames is not None and self.layout.time_dim is not None:
            selection[self.layout.time_dim] = np.asarray(frames, dtype=np.int64)
        if window is not None:
            inside = in_window(self.lat_grid, self.lon_grid, *window)
            if not inside.any():
                return None
            dims = self.layout.point_dims
            for axis, dim in enumerate(dims):
                others = tuple(a for a in range(len(dims)) if a != axis)
                selection[dim] = np.flatnonzero(inside.any(axis=others) if others else inside)
        subset = self.view.isel(selection) if selection else self.view
        try:
            points = to_points(
                subset,
                list(self.variables),
                covariates=self.covariates,
                layout=self.layout,
                extra_dims=self.extra_dims,
                warn_inf=False,  # counted once, by the normaliser's pass over the data
            )
        except EmptyDataError:
            return None
        if window is not None:
            points = points.take(in_window(points.lat, points.lon, *window))
        return points if len(points) else None


def make_source(
    name: str,
    number: int,
    data: xr.Dataset | xr.DataArray,
    variables: Sequence[str],
    covariates: Sequence[str],
    dem: xr.DataArray | None,
    extra_dims: Literal["raise", "flatten"],
    names: Mapping[str, Any],
    load_budget: int | None = None,
) -> Source:
    """The source ``name`` (id ``number``) of a sampler: ``data`` checked and prepared.

    A dask-backed dataset within ``load_budget`` bytes is read into memory once
    (a new object); ``dem`` gives the ``"elevation"`` covariate of its places.
    """
    data = as_dataset(data, variables)
    variables = resolve_variables(data, list(variables))
    for v in variables:
        if data[v].dtype == bool:
            raise ConfigError(
                f"{v!r} (source {name!r}) holds booleans: a neural process predicts real "
                "values with a Gaussian uncertainty, not True/False. To learn the "
                f"probability of True, fit on data[{v!r}].astype(float) (and read the "
                "predicted mean as that probability); or choose another variable."
            )
    layout = find_coords(data, variables[0], **names)
    if layout.time is not None and layout.time_dim is None and data[layout.time].ndim > 0:
        raise ConfigError(
            f"Source {name!r} has one time per observation ({layout.time!r} along "
            f"{data[layout.time].dims}); the sampler needs a time dimension. Reshape it to "
            "(time, station) or give it without time."
        )
    wanted = [*variables, *(c for c in covariates if c in data.data_vars)]
    wanted += [n for n in (layout.lat, layout.lon, layout.elevation) if n in data.data_vars]
    view = data[list(dict.fromkeys(wanted))]  # a new Dataset sharing the user's arrays
    lazy = any(v.chunks is not None for v in view.variables.values())
    if lazy and load_budget is not None and view.nbytes <= load_budget:
        log.info(
            "source %r: its %.0f MiB held by dask fit the load budget of %.0f MiB: read into "
            "memory once (each task would otherwise compute from dask)",
            name, view.nbytes / 2**20, load_budget / 2**20,
        )  # fmt: skip
        view = view.compute()  # a new object: the user's data stay lazy
    if "elevation" in covariates and dem is not None:
        lat_grid, lon_grid = latlon(view, layout)
        elevation = interpolate_dem(dem, lat_grid, lon_grid)
        view = view.assign_coords({_DEM_COORD: (layout.point_dims, elevation)})
        layout = dataclasses.replace(layout, elevation=_DEM_COORD, elevation_scale=1.0)
    lat_grid, lon_grid = latlon(view, layout)
    hours = time_hours(view[layout.time].values) if layout.time_dim else None
    return Source(
        name=name,
        id=number,
        view=view,
        layout=layout,
        variables=tuple(variables),
        covariates=tuple(covariates),
        extra_dims=extra_dims,
        lat_grid=lat_grid,
        lon_grid=lon_grid,
        hours=hours,
    )

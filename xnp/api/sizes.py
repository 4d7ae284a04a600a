"""Sizes of a fit: the default tasks, the points a task can hold, fixed batch shapes.

Every training batch of a fit has one padded shape, so the step compiles once:
:func:`default_tasks` picks the task specification from the data, the bounds on
a task's points cap it, and :func:`fixed_batch` pads each sampled batch to the
shape.  :func:`swin_grid_for` fits a Swin-TNP preset's pseudo-token grid to the
data's domain.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from xnp.arrays import Batch, Points
from xnp.data.batch import source_channels
from xnp.data.coords import (
    find_coords,
    latlon,
)
from xnp.data.tasks import DEFAULT_MAX_POINTS, ForecastTasks, SpatialTasks, WindowTasks, in_window
from xnp.data.times import time_hours, validation_cut
from xnp.errors import (
    ConfigError,
)
from xnp.models.swin_config import SwinTNPConfig

__all__ = [
    "DEFAULT_MAX_POINTS",
    "default_tasks",
    "fixed_batch",
    "inner_task",
    "point_bounds",
    "swin_grid_for",
    "with_caps",
]

log = logging.getLogger("xnp.api")

Tasks = SpatialTasks | ForecastTasks | WindowTasks


def default_tasks(data: xr.Dataset, variable: str, validation_fraction: float = 0.1) -> Tasks:
    """The task specification :func:`fit` uses when none is given.

    Without a time axis (or with fewer than three times), or with times whose
    steps are not whole multiples of one step (calendar months or years, whose
    lengths differ): :class:`SpatialTasks`.  Otherwise :class:`ForecastTasks` following the BSA-TNP ERA5 setup, 4 context
    frames 6 h apart and targets 6 h after the last one, when the data's time
    step divides 6 h; otherwise frames one time step apart and a one-step lead
    (fewer frames if the training period is short).  Forecasts learn the change
    from a baseline (:mod:`xnp.data.baseline`): for sub-daily steps the
    autoregressive one (persistence, the mean diurnal change and the recent
    changes, :mod:`xnp.data.lagged`), persistence otherwise.  On the validation
    days of the ERA5 6-h forecast benchmark, BSA-TNPs of the change from the
    autoregressive baseline beat those of the change from persistence plus the
    diurnal change at 10 % and 100 % of the cells (CRPS 0.638 / 0.610 K against
    0.672 / 0.630; ``docs/benchmarks.md``).  Both cap
    tasks at 1024 context and 1024 target points (random subsets beyond).

    Examples
    --------
    >>> from xnp.datasets import gp_sphere
    >>> default_tasks(gp_sphere(n_time=20), "field")
    ForecastTasks(frames=4, step=6.0, lead=6.0, context_fraction=1.0, max_context=1024, max_targets=1024, baseline='autoregressive', baseline_input=False)
    >>> default_tasks(gp_sphere(n_time=1).isel(time=0), "field").max_targets
    1024
    """  # noqa: E501
    caps = {"max_context": DEFAULT_MAX_POINTS, "max_targets": DEFAULT_MAX_POINTS}
    layout = find_coords(data, variable)
    if layout.time_dim is None or data.sizes[layout.time_dim] < 3:
        return SpatialTasks(**caps)
    hours = np.sort(time_hours(data[layout.time].values))
    steps = np.diff(hours)
    dt = float(np.median(steps))
    if dt <= 0:
        return SpatialTasks(**caps)
    multiples = steps / dt
    if np.any(np.abs(multiples - np.round(multiples)) > 1e-6):
        log.info(
            "The time steps of %r are irregular (from %.0f h to %.0f h, e.g. calendar "
            "months): the default tasks are spatial.  Forecast tasks need a regular step.",
            variable, float(steps.min()), float(steps.max()),
        )  # fmt: skip
        return SpatialTasks(**caps)
    ratio = 6.0 / dt
    step = 6.0 if abs(ratio - round(ratio)) < 1e-9 and round(ratio) >= 1 else dt
    n_train = validation_cut(hours.size, validation_fraction)
    span = float(hours[n_train - 1] - hours[0])
    frames = min(4, math.floor((span - step) / step + 1e-9) + 1)
    if frames < 1:
        return SpatialTasks(**caps)
    baseline = "autoregressive" if step < 24.0 else "persistence"
    return ForecastTasks(frames=frames, step=step, lead=step, baseline=baseline, **caps)


def inner_task(task: Tasks) -> SpatialTasks | ForecastTasks:
    """The spatial or forecast task inside a window task (else the task itself)."""
    return task.task if isinstance(task, WindowTasks) else task


def point_bounds(
    data: xr.Dataset, variable: str, task: Tasks, sources: Mapping[str, xr.Dataset] | None = None
) -> tuple[int, int]:
    """Upper bounds on the context and target points of one task.

    The extra context ``sources`` add their points to every task's context.
    """
    n = _points_per_frame(data, variable, task)
    inner = inner_task(task)
    frames = inner.frames if isinstance(inner, ForecastTasks) else 1
    extra = frames * sum(_points_per_frame(s, variable, task) for s in (sources or {}).values())
    if isinstance(inner, ForecastTasks):
        return min(inner.max_context, frames * n + extra), min(inner.max_targets, n)
    return min(inner.max_context, max(n - 1, 1) + extra), min(inner.max_targets, max(n - 1, 1))


def _points_per_frame(data: xr.Dataset, variable: str, task: Tasks) -> int:
    """Points of one frame of ``data`` a task can hold (those in a window, for windows)."""
    layout = find_coords(data, variable)
    n = int(np.prod([data.sizes[d] for d in layout.point_dims]))
    if isinstance(task, WindowTasks):
        lat, lon = latlon(data, layout)
        lat, lon = np.ravel(lat), np.ravel(lon)
        rng = np.random.default_rng(0)
        centres = rng.choice(lat.size, size=min(lat.size, 256), replace=False)
        counts = [
            int(in_window(lat, lon, (lat[i], lon[i]), task.half_widths(lat[i])).sum())
            for i in centres
        ]
        n = min(n, int(1.25 * max(counts)) + 1)
    return n


def with_caps(task: Tasks, context: int, target: int) -> Tasks:
    """``task`` with its point caps lowered to ``context`` and ``target`` points."""
    inner = inner_task(task)
    inner = dataclasses.replace(
        inner,
        max_context=min(inner.max_context, context),
        max_targets=min(inner.max_targets, target),
    )
    return dataclasses.replace(task, task=inner) if isinstance(task, WindowTasks) else inner


def _resize(points: Points, n: int) -> Points:
    """Pad (or drop trailing padding) so the point axis has length ``n`` (numpy)."""
    arrays = {k: np.asarray(getattr(points, k)) for k in ("s", "t", "x", "f", "mask")}
    size = arrays["mask"].shape[1]
    if size > n:
        if arrays["mask"][:, n:].any():
            raise ConfigError(f"A task has more than {n} points; raise TrainConfig sizes.")
        arrays = {k: a[:, :n] for k, a in arrays.items()}
    elif size < n:
        arrays = {
            k: np.pad(a, [(0, 0), (0, n - size)] + [(0, 0)] * (a.ndim - 2))
            for k, a in arrays.items()
        }
    return Points(**arrays)


def fixed_batch(batch: Batch, nc: int, nt: int, n_sources: int = 1) -> Batch:
    """``batch`` padded to ``nc`` context and ``nt`` target points, with source channels."""

    def ids(a: Any, n: int) -> np.ndarray:
        a = np.asarray(a)
        return a[:, :n] if a.shape[1] >= n else np.pad(a, [(0, 0), (0, n - a.shape[1])])

    def with_sources(points: Points, source: np.ndarray) -> Points:
        if n_sources <= 1:
            return points
        return points.replace(x=source_channels(points.x, source, n_sources))

    y = np.asarray(batch.y)
    y = y[:, :nt] if y.shape[1] >= nt else np.pad(y, [(0, 0), (0, nt - y.shape[1]), (0, 0)])
    c_ids, t_ids = ids(batch.context_source, nc), ids(batch.target_source, nt)
    return Batch(
        context=with_sources(_resize(batch.context, nc), c_ids),
        target=with_sources(_resize(batch.target, nt), t_ids),
        y=y,
        context_source=c_ids,
        target_source=t_ids,
    )


def swin_grid_for(config: SwinTNPConfig, lat: np.ndarray, lon: np.ndarray) -> SwinTNPConfig:
    """A Swin-TNP preset's pseudo-token grid fitted to the domain of the data.

    A preset's grid is global; for regional data (less than 270° of longitude and
    150° of latitude) the grid instead covers the data's bounding box plus a
    margin (5 % of the span, at least one data spacing), with nodes about two data
    spacings apart (the spacing estimated as ``√(area / number of locations)``),
    rounded up to whole windows and at most the preset's node counts.  Global
    data, and regions across the date line, keep the global grid.

    Examples
    --------
    >>> lat, lon = np.meshgrid(np.arange(50, 58.25, 0.25), np.arange(-6, 6.25, 0.25))
    >>> cfg = swin_grid_for(SwinTNPConfig(), lat, lon)
    >>> cfg.grid_shape, [round(v, 2) for v in cfg.extent[0]]
    ((20, 28), [49.59, 58.41])
    """
    ok = np.isfinite(lat) & np.isfinite(lon)
    lat, lon = np.asarray(lat, np.float64)[ok], np.asarray(lon, np.float64)[ok]
    if lat.size < 2:
        return config
    spans = [float(np.ptp(lat)), float(np.ptp(lon))]
    if spans[1] > 270.0 or spans[0] > 150.0:
        return config
    locations = np.unique(np.round(np.stack([lat, lon], -1), 6), axis=0).shape[0]
    area = max(spans[0], 1e-3) * max(spans[1], 1e-3)
    step = float(np.sqrt(area / locations))
    extent, shape = [], []
    for axis, values in enumerate((lat, lon)):
        margin = max(0.05 * spans[axis], step)
        lo, hi = float(values.min()) - margin, float(values.max()) + margin
        if axis == 0:
            lo, hi = max(lo, -90.0), min(hi, 90.0)
        window = config.window[axis]
        n = -(-int(np.ceil((hi - lo) / (2.0 * step))) // window) * window
        shape.append(int(min(max(n, window), config.grid_shape[axis])))
        extent.append((lo, hi))
    return config.replace(grid_shape=tuple(shape), extent=tuple(extent))

"""The task sampler: a seeded, reproducible stream of padded training batches.

:class:`TaskSampler` draws tasks (:mod:`xnp.data.tasks`) from one dataset or from
several *sources* (e.g. stations plus a coarse grid), normalises them and pads them
into :class:`~xnp.data.batch.Batch` objects.  For each task it selects, with
``isel``, only the frames and the window it needs and reads just those, so a
dask- or zarr-backed dataset too large for memory is never loaded or copied as a
whole.  One that fits a stated budget (``load_budget``, 1 GiB by default) is read
into memory once, as a new object (the user's stays lazy), and a log line says so:
reading each task's frames through dask costs a compute per task.

Batch ``k`` depends only on ``(seed, k)``: iterating twice, or asking for
``sampler.batch(k)`` directly, gives the same batch.

A forecast baseline (``ForecastTasks(baseline=...)``) is computed from each task's
context.  When every context point is kept and there is no window, an anchor
(context frames, target frame, lead) gives the same baseline on every draw, so it is
computed once over the whole target frame and kept for the next draws of that anchor
(up to a fixed memory limit); thinned or windowed contexts differ per draw and are
computed per task.

Validation holds out the last ``validation_fraction`` of the target source's time
axis.  A ``split="train"`` sampler only reads earlier times, for context and
targets alike; a ``split="validation"`` sampler only takes targets from the
held-out times (context frames of forecast tasks may precede them).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import xarray as xr

from xnp.data.baseline import ForecastBaseline
from xnp.data.batch import Batch, Task, TaskPoints, collate
from xnp.data.covariates import covariate_names, user_covariates
from xnp.data.flatten import PointSet
from xnp.data.normalise import Normaliser, check_same_units
from xnp.data.sources import Source, Window, make_source
from xnp.data.task_edits import BaselineField, by_context, detrended, with_channels
from xnp.data.tasks import ForecastTasks, SpatialTasks, WindowTasks
from xnp.data.times import match_hours, validation_cut
from xnp.data.trend import DEGREES
from xnp.errors import ConfigError, EmptyDataError
from xnp.geo.sphere import unit_vectors
from xnp.units import parse_bytes

__all__ = ["TaskSampler"]

#: Draws allowed per task of a batch before giving up (empty frames and windows).
_DRAWS_PER_TASK = 100
#: The most baseline values (points × variables) a sampler keeps between tasks.
_MEMO_VALUES = 2**24


class TaskSampler:
    """A seeded, reproducible, iterable stream of padded training batches.

    Parameters
    ----------
    data : Dataset, DataArray, or mapping of name to Dataset
        The data, or several sources (e.g. ``{"stations": st, "era5": grid}``);
        never modified; a dask-backed source is read into memory (as a copy) only
        within ``load_budget``.
    variable : str or list of str
        The variable(s) to learn; every source must hold them (in the same units).
    task : SpatialTasks, ForecastTasks or WindowTasks, optional
        What to draw (default: :class:`SpatialTasks`).
    covariates : list of str
        Covariates (see :mod:`xnp.data.covariates`), the same for every source.
    dem : DataArray, optional
        A DEM for the ``"elevation"`` covariate, interpolated once per source.
    target_source : str, optional
        The source targets come from (default: the first); the others only add
        context from the same times and window, with their own source ids.
    batch_size : int
        Tasks per batch.
    seed : int
        Seed; batch ``k`` depends only on ``(seed, k)``.
    split : {"train", "validation"}
        Which part of the time axis to draw targets from.
    validation_fraction : float
        Fraction of the time axis held out at its end (default 0.1).
    normaliser : Normaliser, optional
        Statistics to use; by default fitted on the training times of the target
        source (pass the training sampler's to a validation sampler).
    baseline : ForecastBaseline, optional
        The forecast baseline of ``ForecastTasks(baseline=...)``, whose change the
        targets' values become; by default fitted on the training times of the
        target source (pass the training sampler's to a validation sampler).
    buckets : list of int, optional
        Allowed padded sizes (default: powers of two from 16); points beyond the
        largest bucket are subsampled.
    num_batches : int, optional
        Length of the stream (default: endless).
    extra_dims : {"raise", "flatten"}
        Treatment of dimensions other than space and time (see :func:`to_points`).
    standardise : {"fitted", "context"}
        ``"fitted"``: values are normalised with :attr:`normaliser`.  ``"context"``:
        each task's context and target values are then standardised by the mean
        and standard deviation of its context values, as a zero-shot model sees
        them (fine-tuning a pretrained model).
    trend : {None, "constant", "linear"}
        With ``standardise="context"``: each task's context trend
        (:class:`~xnp.data.trend.Trend`, fitted to the context values by GLS) is
        removed from its context and target values before they are standardised,
        as zero-shot prediction with ``trend=`` does; a task whose trend cannot be
        fitted (too few points, all on a line) is drawn again.
    load_budget : int or str, optional
        A dask-backed source whose variables and coordinates take at most this
        much memory (e.g. ``"1GiB"``) is read into memory once, as a new object;
        larger ones (or any, with ``None``) are read frame by frame for each task.
    **names
        Explicit coordinate names (``lat``, ``lon``, ``time``, ``elevation``, ``crs``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> ds = xr.Dataset(
    ...     {"t2m": (("time", "lat", "lon"), rng.normal(size=(10, 5, 6)))},
    ...     coords={
    ...         "time": np.arange(10) * np.timedelta64(6, "h") + np.datetime64("2019-03-01"),
    ...         "lat": np.arange(5.0),
    ...         "lon": np.arange(6.0),
    ...     },
    ... )
    >>> sampler = TaskSampler(ds, "t2m", ForecastTasks(frames=2), batch_size=3, num_batches=2)
    >>> batch = next(iter(sampler))
    >>> batch.context.s.shape, batch.target.t[0, 0, 0].item()
    ((3, 64, 2), 6.0)
    """

    #: Keep each anchor's forecast baseline between draws when it is the same on every
    #: draw (every context point kept, no window); False recomputes it per task (the
    #: slow reference the tests compare with).
    memoise: bool = True

    def __init__(
        self,
        data: xr.Dataset | xr.DataArray | Mapping[str, xr.Dataset | xr.DataArray],
        variable: str | Sequence[str],
        task: SpatialTasks | ForecastTasks | WindowTasks | None = None,
        *,
        covariates: Sequence[str] = (),
        dem: xr.DataArray | None = None,
        target_source: str | None = None,
        batch_size: int = 16,
        seed: int = 0,
        split: Literal["train", "validation"] = "train",
        validation_fraction: float = 0.1,
        normaliser: Normaliser | None = None,
        baseline: ForecastBaseline | None = None,
        buckets: Sequence[int] | None = None,
        num_batches: int | None = None,
        extra_dims: Literal["raise", "flatten"] = "raise",
        standardise: Literal["fitted", "context"] = "fitted",
        trend: str | None = None,
        load_budget: int | str | None = "1GiB",
        **names: Any,
    ) -> None:
        is_single = isinstance(data, xr.Dataset | xr.DataArray)
        sources = {"data": data} if is_single else dict(data)
        if not sources:
            raise ConfigError("No data given: pass a Dataset or a mapping of name to Dataset.")
        target_source = target_source or next(iter(sources))
        if target_source not in sources:
            raise ConfigError(f"target_source {target_source!r} is not one of {list(sources)}.")
        if split not in ("train", "validation"):
            raise ConfigError(f"split must be 'train' or 'validation'; got {split!r}.")
        if batch_size < 1 or (num_batches is not None and num_batches < 0):
            raise ConfigError(
                f"Need batch_size >= 1 and num_batches >= 0; got {batch_size}, {num_batches}."
            )
        self.variables = [variable] if isinstance(variable, str) else list(variable)
        self.task = task if task is not None else SpatialTasks()
        if not isinstance(self.task, SpatialTasks | ForecastTasks | WindowTasks):
            raise ConfigError(
                f"task must be SpatialTasks, ForecastTasks or WindowTasks; got {self.task!r}."
            )
        self.batch_size, self.seed, self.split = batch_size, seed, split
        if standardise not in ("fitted", "context"):
            raise ConfigError(f"standardise must be 'fitted' or 'context'; got {standardise!r}.")
        self.standardise = standardise
        if trend is not None and (trend not in DEGREES or standardise != "context"):
            raise ConfigError(
                "trend must be None, or 'constant' or 'linear' with standardise='context' "
                f"(a context-standardised model); got trend={trend!r}, "
                f"standardise={standardise!r}."
            )
        self.trend = trend
        self.buckets = None if buckets is None else tuple(sorted(buckets))
        self.num_batches = num_batches
        covariates = covariate_names(covariates)
        budget = None if load_budget is None else parse_bytes(load_budget)
        self.sources = [
            make_source(n, i, d, self.variables, covariates, dem, extra_dims, names, budget)
            for i, (n, d) in enumerate(sources.items())
        ]
        self._target = next(s for s in self.sources if s.name == target_source)
        if np.size(self._target.lat_grid) < 2:
            raise EmptyDataError(
                f"Source {target_source!r} has one place only; a task needs at least 2 "
                "places (targets, and context elsewhere or earlier).  Give the data of "
                "several stations or grid cells (for one station, expand_dims('station') "
                "and add others)."
            )
        # the variables (in every source) and the user's covariates (where both hold them)
        for other in self.sources:
            for v in (*self.variables, *user_covariates(covariates)):
                if v in self._target.view.variables and v in other.view.variables:
                    check_same_units(
                        v,
                        self._target.view[v].attrs.get("units"),
                        other.view[v].attrs.get("units"),
                        (f"target source {target_source!r}", f"context source {other.name!r}"),
                    )
        self._setup_times(validation_fraction)
        self.normaliser = normaliser or self._fit_normaliser()
        self.baseline = baseline or self._fit_baseline()
        self._fields: dict[int, BaselineField | None] = {}  # see _baseline_field
        for v in self.variables:
            self.normaliser.check_units(v, self._target.view[v].attrs.get("units"))
        for source in self.sources:
            self.normaliser.check_covariate_units(
                source.view, covariates, f"source {source.name!r}"
            )

    @property
    def times(self) -> np.ndarray | None:
        """Hours since 1970 of the target source's time axis (None without time)."""
        return self._target.hours

    @property
    def validation_start(self) -> int | None:
        """Index of the first held-out time of the target source (None without time)."""
        return self._cut

    @property
    def inner_task(self) -> SpatialTasks | ForecastTasks:
        """The spatial or forecast task (inside the window, for window tasks)."""
        return self.task.task if isinstance(self.task, WindowTasks) else self.task

    def _setup_times(self, validation_fraction: float) -> None:
        hours = self._target.hours
        self._anchors: list[tuple[np.ndarray, int]] = []
        self._cut: int | None = None
        self._allowed: np.ndarray | None = None
        if hours is None:
            if isinstance(self.inner_task, ForecastTasks) or self.split == "validation":
                raise ConfigError(
                    f"Source {self._target.name!r} has no time dimension, so it supports "
                    "neither forecast tasks nor a held-out validation period; use "
                    "SpatialTasks with split='train' and validate on a separate dataset."
                )
            return
        self._cut = validation_cut(hours.size, validation_fraction)
        span = (0, self._cut) if self.split == "train" else (self._cut, hours.size)
        self._allowed = np.arange(*span)
        if isinstance(self.inner_task, ForecastTasks):
            spec = self.inner_task
            frames = np.stack([match_hours(hours, hours + o) for o in spec.offsets], axis=1)
            for lead in spec.leads:  # each task draws one of the (frames, target, lead)
                target = match_hours(hours, hours + lead)
                ok = (frames >= 0).all(axis=1) & (target >= span[0]) & (target < span[1])
                self._anchors += [
                    (f, int(t), lead) for f, t in zip(frames[ok], target[ok], strict=False)
                ]
            if not self._anchors:
                step = np.median(np.diff(hours)) if hours.size > 1 else float("nan")
                raise EmptyDataError(
                    f"No time in the {self.split} period has {spec.frames} frames {spec.step} h "
                    f"apart and a target {spec.lead} h later (the data's time step is {step} h "
                    f"over {hours.size} times). Adjust frames/step/lead or give more times."
                )
        if self._allowed.size == 0:
            raise EmptyDataError(f"The {self.split} period holds no times.")

    def _fit_baseline(self) -> ForecastBaseline | None:
        spec = self.inner_task
        if not isinstance(spec, ForecastTasks) or spec.baseline is None:
            return None
        target = self._target
        return ForecastBaseline.fit(
            spec.baseline, target.view, target.layout, self.variables, spec.leads,
            end=self._cut, lags=spec.offsets[:-1], fraction=spec.context_fraction,
        )  # fmt: skip

    def _fit_normaliser(self) -> Normaliser:
        target = self._target
        view = target.view
        if target.layout.time_dim is not None and self._cut is not None:
            view = view.isel({target.layout.time_dim: slice(0, self._cut)})
        return Normaliser.fit(view, self.variables, target.covariates, layout=target.layout)

    def _cap(self, n: int) -> int:
        return n if self.buckets is None else min(n, self.buckets[-1])

    def _task_points(self, points: PointSet, reference: float, source: Source) -> TaskPoints:
        t = points.time - reference if points.has_time else np.zeros(len(points))
        return TaskPoints(
            s=points.s,
            t=t,
            x=self.normaliser.transform(points.x, points.covariates),
            f=self.normaliser.transform(points.f, points.variables),
            source=np.full(len(points), source.id, np.int32),
        )

    def _other_context(
        self,
        rng: np.random.Generator,
        hours: Sequence[float] | None,
        window: Window | None,
        reference: float,
        budget: int,
    ) -> list[TaskPoints]:
        parts = []
        for source in self.sources:
            if source is self._target:
                continue
            frames = None
            if source.hours is not None:
                if hours is None:  # a time-less task takes no context from time series
                    continue
                frames = [f for f in (source.frame(h) for h in hours) if f is not None]
                if not frames:
                    continue
            points = source.read(frames, window)
            if points is not None:
                parts.append(self._task_points(points, reference, source))
        total = sum(len(p) for p in parts)
        if parts and total > budget:
            keep = np.sort(rng.choice(total, size=max(budget, 0), replace=False))
            parts = [TaskPoints.concat(parts).take(keep)]
        return parts

    def _draw(self, rng: np.random.Generator) -> Task | None:
        window, base = None, None
        if isinstance(self.task, WindowTasks):
            lat, lon = self._target.lat_grid, self._target.lon_grid
            i = int(rng.integers(lat.size))
            centre = (float(lat.flat[i]), float(lon.flat[i]))
            window = (centre, self.task.half_widths(centre[0]))
        minimum = self.task.min_points if isinstance(self.task, WindowTasks) else 2
        spec = self.inner_task
        if isinstance(spec, ForecastTasks):
            anchor = int(rng.integers(len(self._anchors)))
            frames, target_frame, lead = self._anchors[anchor]
            hours = np.asarray(self._target.hours)
            reference = float(hours[frames[-1]])
            context = self._target.read(frames, window)
            targets = self._target.read([target_frame], window)
            if context is None or targets is None or len(targets) < minimum:
                return None
            if spec.context_fraction < 1.0:
                context = context.take(rng.random(len(context)) < spec.context_fraction)
            ctx = rng.permutation(len(context))[: self._cap(spec.max_context)]
            tgt = rng.permutation(len(targets))[: self._cap(spec.max_targets)]
            context_hours = [float(h) for h in hours[frames]]
            if self.baseline is not None:  # from every kept observation, not the capped ones
                observed = (context.s, context.time - reference, context.f)

                def baseline_at(s, observed=observed, reference=reference, lead=lead):
                    return self.baseline.at(observed, s, reference=reference, lead=lead)

                field = None
                if self.memoise and spec.context_fraction >= 1.0 and window is None:
                    field = self._baseline_field(anchor, targets, baseline_at)
                    if field is None:  # no observation to persist
                        return None
                    baseline_at = functools.partial(field.at, compute=baseline_at)
                base = baseline_at(targets.s[np.sort(tgt)])
                if base is None:  # no observation to persist
                    return None
        else:
            frame, reference = None, 0.0
            if self._allowed is not None and self._target.hours is not None:
                frame = int(rng.choice(self._allowed))
                reference = float(self._target.hours[frame])
            points = self._target.read(None if frame is None else [frame], window)
            if points is None or len(points) < minimum:
                return None
            n_context = spec.draw_context_size(rng, len(points))
            order = rng.permutation(len(points))
            weights = spec.context_weights(rng, unit_vectors(points.s))
            if weights is not None:  # a clustered context first, the rest in random order
                first = rng.choice(
                    len(points), n_context, replace=False, p=weights / weights.sum()
                )
                order = np.concatenate([first, np.setdiff1d(order, first, assume_unique=True)])
                order[n_context:] = rng.permutation(order[n_context:])
            ctx = order[:n_context][: self._cap(spec.max_context)]
            tgt = order[n_context:][: self._cap(spec.max_targets)]
            context = targets = points
            context_hours = None if frame is None else [reference]
        parts = [self._task_points(context.take(np.sort(ctx)), reference, self._target)]
        budget = self._cap(spec.max_context) - len(ctx)
        parts += self._other_context(rng, context_hours, window, reference, budget)
        target_points = self._task_points(targets.take(np.sort(tgt)), reference, self._target)
        if base is not None:  # the change from the baseline, in its own scale: (f - base) / scale
            field_std = [self.normaliser.stats[v].std for v in self.variables]
            base = self.normaliser.transform(base, self.variables)  # normalised as the field
            change = target_points.f - base
            change = change / self.baseline.ratio(field_std)
            target_points = dataclasses.replace(
                target_points, f=change.astype(target_points.f.dtype)
            )
        context_points = TaskPoints.concat(parts)
        if base is not None and spec.baseline_input:  # the baseline at every point, as input
            at_context = self.normaliser.transform(baseline_at(context_points.s), self.variables)
            context_points = with_channels(context_points, at_context)
            target_points = with_channels(target_points, base)
        if self.trend is not None:  # the residuals of the context's trend, as at prediction
            context_points, target_points = detrended(context_points, target_points, self.trend)
            if context_points is None:
                return None
        if self.standardise == "context":  # as a zero-shot model sees each context
            context_points, target_points = by_context(context_points, target_points)
            if context_points is None:
                return None
        return Task(context_points, target_points, reference)

    def _baseline_field(
        self, anchor: int, targets: PointSet, compute: Any
    ) -> BaselineField | None:
        """The baseline at anchor ``anchor``'s whole target frame (kept while memory allows)."""
        memo = self._fields
        if anchor in memo:
            return memo[anchor]
        values = compute(targets.s)
        field = None if values is None else BaselineField(values, unit_vectors(targets.s))
        kept = sum(f.values.size for f in memo.values() if f is not None)
        if field is None or kept + field.values.size <= _MEMO_VALUES:
            memo[anchor] = field
        return field

    def tasks(self, k: int) -> list[Task]:
        """Draw the (unpadded) tasks of batch ``k``; they depend only on ``(seed, k)``."""
        rng = np.random.default_rng([self.seed, k])
        drawn: list[Task] = []
        # Frames are drawn blindly (checking every frame for observations up front
        # would read all of a lazy dataset), so mostly empty data needs many draws;
        # a draw of an empty frame reads that frame only.  The budget depends on the
        # batch size alone, so batch k is the same on every run, in memory or lazy.
        for _ in range(_DRAWS_PER_TASK * self.batch_size):
            task = self._draw(rng)
            if task is not None and len(task.context) and len(task.target):
                drawn.append(task)
                if len(drawn) == self.batch_size:
                    return drawn
        raise EmptyDataError(
            f"Could not draw {self.batch_size} non-empty tasks from the {self.split} data of "
            f"{self._target.name!r} in {_DRAWS_PER_TASK * self.batch_size} draws "
            f"({len(drawn)} found): the data is almost all missing, or windows are too small. "
            "Drop the empty times first, e.g. ds.dropna('time', how='all')."
        )

    def batch(self, k: int) -> Batch:
        """Return batch ``k`` of the stream, padded to bucket sizes."""
        return collate(self.tasks(k), self.buckets)

    def __iter__(self) -> Iterator[Batch]:
        indices = range(self.num_batches) if self.num_batches is not None else itertools.count()
        for k in indices:
            yield self.batch(k)

    def __len__(self) -> int:
        if self.num_batches is None:
            raise TypeError("This TaskSampler is endless; pass num_batches to give it a length.")
        return self.num_batches

"""Forecasts: context frames up to each initialisation time, targets at the lead times.

A model trained on forecast tasks sees the model's frames ending at each
initialisation time (times relative to it, as in training) and predicts the
targets ``lead_time`` hours ahead; the result is labelled with ``init_time``,
``lead_time`` and ``valid_time`` (the CF/climpred convention for forecasts).
"""

from __future__ import annotations

import dataclasses
import datetime
import warnings
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from xnp.arrays import Points
from xnp.data.baseline import ForecastBaseline
from xnp.data.covariates import covariate_channels
from xnp.data.task_edits import BaselineField
from xnp.data.tasks import ForecastTasks
from xnp.data.times import match_hours, time_hours
from xnp.errors import (
    ConfigError,
    EmptyDataError,
    XnpWarning,
)
from xnp.geo.sphere import unit_vectors
from xnp.prediction.context import Options, build_context
from xnp.prediction.frames import select_times
from xnp.prediction.run import run_targets

__all__ = ["BaselineShift", "add_hours", "forecast", "forecast_layout", "lead_hours"]


@dataclasses.dataclass(frozen=True, eq=False)
class BaselineShift:
    """A forecast's baseline, added to the change a model predicts (its std is kept).

    The model predicts ``(value - baseline) / scale`` (the baseline's
    ``scale``, :class:`~xnp.data.baseline.ForecastBaseline`), so its mean and std,
    denormalised as a field (``mu·std + centre``, ``sigma·std``), become
    ``baseline + mu·scale`` and ``sigma·scale``.

    Attributes
    ----------
    baseline : ForecastBaseline
        The model's baseline.
    observed : (s, t, f)
        The context's own observations: places, hours relative to the
        initialisation time, raw values.
    reference : float
        The initialisation time (hours since 1970).
    lead : float
        The lead time (hours).
    centre, spread : ndarray ``[Dy]``
        The means and standard deviations by which the model's values were normalised.
    inputs : bool
        Whether the network sees the baseline at each point as input channels
        (``ForecastTasks(baseline_input=True)``), inserted after the first
        ``covariate_channels`` channels of the points' inputs (the covariates; any
        source channels follow), where training puts them.
    """

    baseline: ForecastBaseline
    observed: tuple[np.ndarray, np.ndarray, np.ndarray]
    reference: float
    lead: float
    centre: np.ndarray
    spread: np.ndarray
    inputs: bool = False
    covariate_channels: int = 0
    #: the baseline at every place formed so far (:class:`~xnp.data.task_edits.BaselineField`),
    #: replaced whole when it grows (blocks run in threads)
    _last: dict = dataclasses.field(default_factory=dict, repr=False)

    def at(self, s: np.ndarray) -> np.ndarray:
        """The baseline ``[N, Dy]`` at ``s`` ``[N, 2]``.

        Each place is formed once per forecast, as the training sampler keeps an
        anchor's baseline field: the context's places (with ``baseline_input``) and
        the targets' often coincide (a grid), and a place's baseline does not
        depend on the others asked for with it.
        """
        s = np.asarray(s, np.float64)
        field = self._last.get("field")
        formed: list[tuple[np.ndarray, np.ndarray]] = []

        def form(where: np.ndarray) -> np.ndarray:
            places, inverse = np.unique(where, axis=0, return_inverse=True)
            base = self.baseline.at(self.observed, places, reference=self.reference,
                                    lead=self.lead)  # fmt: skip
            if base is None:
                raise EmptyDataError(
                    f"this model forecasts the change from {self.baseline.kind}, but some of "
                    f"{list(self.baseline.variables)} has no observation in the context frames "
                    "to persist; give observations of every variable."
                )
            formed.append((places, base))
            return base[inverse.ravel()]

        out = form(s) if field is None else field.at(s, form)
        if formed:
            (places, base), old = formed[0], [] if field is None else [field]
            self._last["field"] = BaselineField(
                np.concatenate([f.values for f in old] + [base]),
                np.concatenate([f.where for f in old] + [unit_vectors(places)]),
            )
        return out

    def with_inputs(self, points: Points, s: np.ndarray) -> Points:
        """``points`` (a batch of one at ``s``) with the baseline as input, if the model takes it.

        The baseline is normalised as the field is.
        """
        if not self.inputs:
            return points
        values = (np.asarray(self.at(s), np.float64) - self.centre) / self.spread
        x, cut = np.asarray(points.x, np.float32), self.covariate_channels
        x = np.concatenate([x[..., :cut], values[None].astype(np.float32), x[..., cut:]], -1)
        return points.replace(x=x)

    def add_to(
        self, s: np.ndarray, mean: np.ndarray, std: np.ndarray, prior_std: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Predicted changes at ``s`` ``[N, 2]`` (denormalised) → predictions of the field."""
        base = self.at(s)
        ratio = self.baseline.ratio(self.spread)
        out_mean = base + (np.asarray(mean, np.float64) - self.centre) * ratio
        out_std = np.asarray(std, np.float64) * ratio
        return out_mean.astype(np.asarray(mean).dtype), out_std.astype(np.asarray(std).dtype)


def lead_hours(lead_time: Any) -> tuple[np.ndarray, bool]:
    """Lead times in hours (float64) and whether a scalar was given."""
    scalar = np.ndim(lead_time) == 0 and not isinstance(lead_time, list | tuple)
    values = [lead_time] if scalar else list(lead_time)
    hours = []
    for v in values:
        if isinstance(v, np.timedelta64):  # (a numpy integer subclass: test it first)
            hours.append(float(v / np.timedelta64(1, "h")) if not np.isnat(v) else np.nan)
            continue
        if isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool):
            hours.append(float(v))
            continue
        try:
            hours.append(pd.to_timedelta(v).total_seconds() / 3600.0)
        except (ValueError, TypeError) as err:
            raise ConfigError(
                f"cannot read lead_time {v!r}; give hours as a number, a timedelta or a "
                "string such as '6h'."
            ) from err
    hours = np.asarray(hours, np.float64)
    if hours.size == 0 or not np.isfinite(hours).all():
        raise ConfigError(f"lead_time must be finite hours; got {lead_time!r}.")
    return hours, scalar


def add_hours(t: Any, hours: float) -> Any:
    """``t + hours`` for a numpy datetime64 or a cftime datetime."""
    if isinstance(t, np.datetime64):
        return t.astype("datetime64[ns]") + np.timedelta64(round(hours * 3.6e12), "ns")
    return t + datetime.timedelta(hours=hours)


def forecast(
    model: Any,
    data: xr.Dataset,
    template: xr.Dataset,
    task: ForecastTasks,
    layout: Any,
    opts: Options,
    *,
    time: Any,
    lead_time: Any,
) -> xr.Dataset:
    """Forecasts from each initialisation time: context frames up to it, targets ahead."""
    if layout.time is None or layout.time_dim is None:
        raise ConfigError(
            "this model forecasts from past frames, but the context data has no time "
            "dimension; give observations over time (the model needs "
            f"{task.frames} frames {task.step:g} h apart)."
        )
    times = data[layout.time].values
    hours = time_hours(times)
    leads, scalar_lead = lead_hours(task.lead if lead_time is None else lead_time)
    if (leads > max(task.leads)).any():
        warnings.warn(
            f"lead_time {leads.max():g} h is beyond the {max(task.leads):g} h the model was "
            "trained for; its temporal attention extrapolates and the forecast may be poor.",
            XnpWarning,
            stacklevel=3,
        )
    frames = np.stack([match_hours(hours, hours + o) for o in task.offsets], axis=1)
    scalar_init = False
    if time is None:
        inits = np.flatnonzero((frames >= 0).all(axis=1))
        if inits.size == 0:
            raise EmptyDataError(
                f"no time in the data has the {task.frames} context frames {task.step:g} h "
                f"apart the model needs (the data has {hours.size} times)."
            )
    else:
        chosen = select_times(data[[layout.time]], layout, time)[layout.time]
        scalar_init = chosen.ndim == 0  # a label, not a list, slice or day of times
        wanted = np.atleast_1d(chosen.values)
        inits = match_hours(hours, time_hours(wanted))
        for i, t in zip(inits, wanted, strict=True):
            if i < 0 or (frames[i] < 0).any():
                raise EmptyDataError(
                    f"cannot forecast from {t}: the model needs {task.frames} context frames "
                    f"{task.step:g} h apart ending at it, and the data lacks some of them."
                )
    spatial = template.drop_dims([d for d in (layout.time_dim,) if d in template.dims]).drop_vars(
        [layout.time], errors="ignore"
    )
    lead_index = pd.Index(pd.to_timedelta(leads, unit="h"), name="lead_time")
    results = []
    for i in inits:
        window = data.isel({layout.time_dim: frames[i]})
        if all(int(window[v].count()) == 0 for v in model.variables):
            raise EmptyDataError(
                f"no observation of {list(model.variables)} in the context frames ending "
                f"at {times[i]}; choose another init time."
            )
        ctx = build_context(model, window, opts, reference=float(hours[i]))
        per_lead = []
        for lead in leads:
            tmpl = spatial.assign_coords({layout.time: add_hours(times[i], float(lead))})
            offset = _baseline_shift(model, task, ctx, float(hours[i]), float(lead))
            lead_ctx = ctx
            if offset is not None and offset.inputs:  # the context sees the lead's baseline
                points = offset.with_inputs(ctx.points, np.asarray(ctx.points.s)[0])
                lead_ctx = dataclasses.replace(ctx, points=points, _state=None)
            out = run_targets(lead_ctx, tmpl, opts, t_target=float(lead), offset=offset)
            per_lead.append(out.drop_vars(layout.time, errors="ignore"))
        results.append(xr.concat(per_lead, dim=lead_index).expand_dims(init_time=[times[i]]))
    return forecast_layout(results, leads, scalar_init=scalar_init, scalar_lead=scalar_lead)


def _baseline_shift(
    model: Any, task: ForecastTasks, ctx: Any, reference: float, lead: float
) -> BaselineShift | None:
    """The baseline of a model that forecasts changes (None for one that does not)."""
    baseline = getattr(model, "baseline", None)
    if baseline is None:
        return None
    obs = ctx.observed
    stats = [model.normaliser.stats[v] for v in model.variables]
    centre, spread = np.array([s.mean for s in stats]), np.array([s.std for s in stats])
    observed = (obs.s, obs.time - reference, obs.f)
    return BaselineShift(baseline, observed, reference, lead, centre, spread,
                         inputs=task.baseline_input,
                         covariate_channels=len(covariate_channels(model.covariates)))  # fmt: skip


def forecast_layout(
    results: list[xr.Dataset], leads: np.ndarray, *, scalar_init: bool, scalar_lead: bool
) -> xr.Dataset:
    """Concatenate per-init-time forecasts (each on ``lead_time``) and label them.

    Adds ``valid_time = init_time + lead_time`` and long names; squeezes
    ``init_time``/``lead_time`` to scalar coordinates when asked for a scalar.
    Shared by forecast models and the persistence baseline.
    """
    out = xr.concat(results, dim="init_time")
    valid = np.array([[add_hours(t, float(h)) for h in leads] for t in out.init_time.values])
    out = out.assign_coords(valid_time=(("init_time", "lead_time"), valid))
    out["init_time"].attrs.update(long_name="forecast initialisation time (last context frame)")
    out["lead_time"].attrs.update(long_name="forecast lead time")
    out["valid_time"].attrs.update(long_name="time the forecast is valid for")
    if scalar_lead:
        out = out.squeeze("lead_time")
    if scalar_init:
        out = out.squeeze("init_time")
    return out

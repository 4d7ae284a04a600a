"""Intervals calibrated on the context itself: ``predict(..., calibrate=True)``.

A model's predictive std can be too wide or too narrow for data unlike its
training data (the shipped zero-shot model's intervals are too wide on ERA5
temperature: on the validation days its 95 % intervals held 99 % of the truth).
The context says by how much: split its points into :data:`FOLDS` random folds,
predict each fold from the others exactly as the targets are predicted (the same
trend, standardisation, working size, thinning and ``context_radius``), and take
the root mean square of the standardised errors ``(y − mean) / std`` over all
points, per variable.
The predictive std at the targets is multiplied by that factor; the mean is
unchanged.  This is the check geostatisticians make of a kriging variance
(leave-one-out z-scores of unit variance), here turned into its correction.

It assumes the factor found between the context's points holds at the targets:
the errors may change with the distance to the data, but their ratio to the
predicted std should not.  It costs :data:`FOLDS` more conditionings of nine tenths
of the context.

By default (``calibrate=None``) it is on where it is needed and can be trusted
(:func:`wanted`): for models that standardise each context by its own statistics
(the pretrained zero-shot models and models fine-tuned from them), which learned
their uncertainty on synthetic fields, when a ``trend`` is removed, and when the
context has at least :data:`AUTO_MIN_POINTS` observations, so that the factor is
known to about 10 % (the relative standard error of a root mean square of ``n`` unit
z-scores is about ``1 / sqrt(2 n)``).  The trend matters: with it, the prediction far
from the observations reverts to the trend with the trend's error in its variance, so
the ratio measured between the observations holds beyond them; without it, the
far-field error is the model's guess of the mean, which the folds (all inside the
network) do not see, and a factor below 1 makes the far-field intervals too narrow
(ERA5 validation days: 95 % coverage beyond 120 km from a station 0.974 → 0.890
without a trend, 1.000 → 0.956 with it).  Models fitted on the user's own data
learned its noise, and keep their std unless ``calibrate=True``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import xarray as xr

from xnp.data.normalise import is_zero_shot
from xnp.errors import ConfigError, EmptyDataError
from xnp.prediction.context import (
    Context,
    Options,
    context_from_points,
    model_points,
    prior_std,
)

__all__ = ["AUTO_MIN_POINTS", "FOLDS", "MIN_POINTS", "calibrated", "cv_scale", "wanted"]

#: Folds of the cross-validation (fewer when the context has fewer points).
FOLDS = 10
#: Fewest context points ``calibrate=True`` accepts.
MIN_POINTS = 10
#: Fewest context points with which the default (``calibrate=None``) calibrates.
AUTO_MIN_POINTS = 50


def wanted(calibrate: bool | None, model: Any, ctx: Context, trend: str | None) -> bool:
    """Whether to calibrate this context: ``calibrate`` if given, else the default.

    The default calibrates a context-standardised (zero-shot or fine-tuned) model's
    prediction with a ``trend`` from at least :data:`AUTO_MIN_POINTS` observations.

    Examples
    --------
    >>> wanted(False, None, None, "linear"), wanted(True, None, None, None)
    (False, True)
    """
    if calibrate is not None:
        return bool(calibrate)
    if trend is None or not is_zero_shot(model):
        return False
    return ctx.observed is not None and len(ctx.observed) >= AUTO_MIN_POINTS


def cv_scale(model: Any, ctx: Context, data: xr.Dataset, opts: Options) -> np.ndarray:
    """The factors ``[Dy]`` of the predictive std: the rms z-score of a K-fold CV of ``ctx``.

    ``model`` is the model as the user gave it (before a zero-shot model's own
    standardisation), ``ctx`` the context built from ``data`` with ``opts``.  The
    folds are drawn with ``opts.seed``.
    """
    ps = ctx.observed
    n = 0 if ps is None else len(ps)
    if ps is None or n < MIN_POINTS:
        raise ConfigError(
            f"calibrate=True cross-validates the context, which has {n} point(s); it needs at "
            f"least {MIN_POINTS}. Predict without calibrate=."
        )
    folds = min(FOLDS, n)
    fold = np.random.default_rng([opts.seed, 2]).permutation(n) % folds
    quiet = dataclasses.replace(opts, progress=False, calibrate=False)
    squares = np.zeros(len(model.variables))
    counts = np.zeros(len(model.variables))
    for k in range(folds):
        held = ps.take(np.flatnonzero(fold == k))
        try:
            sub = context_from_points(model, ps.take(np.flatnonzero(fold != k)), data, quiet)
        except EmptyDataError as err:
            raise ConfigError(
                f"calibrate=True could not cross-validate this context (fold {k + 1} of "
                f"{folds}): {err} Predict without calibrate=."
            ) from err
        mean, std = sub.predict(model_points(held, sub.model, values=False), opts.radius_km)
        mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
        if sub.trend is not None:
            mean, std = sub.trend.add_to(held.s, mean, std, prior_std(sub.model))
        z = (np.asarray(held.f, np.float64) - mean) / std
        ok = np.isfinite(z)
        squares += (np.where(ok, z, 0.0) ** 2).sum(0)
        counts += ok.sum(0)
    return np.sqrt(squares / np.maximum(counts, 1))


def calibrated(model: Any, ctx: Context, data: xr.Dataset, opts: Options) -> Context:
    """``ctx`` with its predictive std rescaled by :func:`cv_scale`."""
    return dataclasses.replace(ctx, std_scale=cv_scale(model, ctx, data, opts))

"""Joint samples of the predicted field at the targets (``predict(..., samples=K)``).

The draws come from :func:`xnp.infer.sampling.autoregressive_samples` in the
model's normalised units; here they are mapped to the variables' units as the
means are, with the same offset (a zero-shot context's trend, a forecast's
baseline), and laid out over the targets' dimensions with a leading ``sample``
dimension.  A trend's estimation error is drawn once per sample
(:meth:`xnp.data.trend.Trend.draw_error`), so the samples' spread includes it as
the predictive std does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from xnp.arrays import Points
from xnp.data.flatten import PointSet, prediction_attrs, predictions_to_xarray
from xnp.data.trend import Offset, Rescaled, Trend
from xnp.errors import ConfigError
from xnp.infer.sampling import autoregressive_samples
from xnp.prediction.context import Context, Options, prior_std

__all__ = ["SAMPLE_DIM", "check_sampling", "joint_samples"]

#: The dimension of the joint samples.
SAMPLE_DIM = "sample"


def check_sampling(opts: Options) -> None:
    """Raise :class:`~xnp.errors.ConfigError` where joint samples cannot be drawn."""
    if opts.samples is None:
        return
    if opts.chunks:
        raise ConfigError(
            "joint samples are drawn eagerly (each step conditions on the draws before it, "
            "across every target); drop chunks=, or draw samples for a smaller set of targets."
        )
    if opts.radius_km is not None:
        raise ConfigError(
            "joint samples condition on the whole context; drop context_radius= to draw them."
        )


def joint_samples(
    ctx: Context,
    tgt_ps: PointSet,
    targets: Points,
    opts: Options,
    marginal_mean: np.ndarray,
    marginal_std: np.ndarray,
    offset: Offset | None,
) -> dict[str, xr.DataArray]:
    """``{variable}_samples`` ``[sample, *target dims]`` for each of the model's variables.

    ``marginal_mean`` and ``marginal_std`` ``[M, Dy]`` are the denormalised
    predictive mean and std at the targets (before the offset); the std sets an
    offset's share (:meth:`xnp.data.trend.Trend.add_to`), as for the mean.  A
    calibrated context's offset (:class:`~xnp.data.trend.Rescaled`) scales each
    draw's deviation from the predictive mean by its factor, as it scales the std.
    """
    model: Any = ctx.model
    draws = autoregressive_samples(
        ctx.predictor, ctx.points, targets, n_samples=opts.samples,
        per_step=opts.sample_step, seed=opts.seed, progress=opts.progress,
    )  # fmt: skip
    names = list(model.variables)
    factor = None
    if isinstance(offset, Rescaled):  # calibrated: draws spread by the factor too
        offset, factor = offset.inner, offset.factor
    center = marginal_mean
    if offset is not None:
        center, _ = offset.add_to(tgt_ps.s, marginal_mean, marginal_std, prior_std(model))
    rng = np.random.default_rng([opts.seed, 1])  # (the trend's draws: apart from the field's)
    per_sample = []
    for draw in draws:
        values, _ = model.denormalise(draw[None], np.zeros_like(draw[None]))
        values = values[0]
        if offset is not None:
            values, _ = offset.add_to(tgt_ps.s, values, marginal_std, prior_std(model))
        if isinstance(offset, Trend):  # its estimation error, shared by the targets
            values = values + offset.draw_error(tgt_ps.s, marginal_std, prior_std(model), rng)
        if factor is not None:
            values = center + factor * (values - center)
        values = values.astype(np.float32)
        per_sample.append(predictions_to_xarray(tgt_ps, values, values, names))
    out = {}
    for name in names:
        stacked = xr.concat([p[f"{name}_mean"] for p in per_sample], dim=SAMPLE_DIM)
        attrs = prediction_attrs(name, "samples", ctx.attrs.get(name, {}))
        out[f"{name}_samples"] = stacked.assign_attrs(attrs)
    return out

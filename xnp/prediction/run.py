"""Predicting the points of a template given a context: eager chunks, or lazy blocks."""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import xarray as xr

from xnp.data.flatten import predictions_to_xarray, to_points
from xnp.data.trend import Offset, Rescaled, unscaled
from xnp.errors import (
    ConfigError,
)
from xnp.prediction.blocks import Payload, as_dask, lazy_prediction
from xnp.prediction.calibration import FOLDS, calibrated, wanted
from xnp.prediction.context import (
    Context,
    Options,
    build_context,
    coord_names,
    model_points,
    prior_std,
)
from xnp.prediction.guards import check_within_radius, extent_text, outside_grid, warn_far_targets
from xnp.prediction.samples import joint_samples
from xnp.prediction.templates import ONE_PLACE, at_one_place

__all__ = ["one_time", "run_targets"]


def run_targets(
    ctx: Context,
    template: xr.Dataset,
    opts: Options,
    *,
    t_target: float | None = None,
    offset: Offset | None = None,
) -> xr.Dataset:
    """Predict the points of ``template`` given ``ctx`` (eager, or lazy with chunks).

    ``offset`` (a forecast's baseline) is added to the prediction, as the
    context's trend is (the two never meet: trends are for zero-shot models); the
    context's std factor (``ctx.std_scale``) then applies to it as well.
    """
    model = ctx.model
    if offset is None:
        offset = ctx.offset
    elif ctx.std_scale is not None and not isinstance(offset, Rescaled):
        offset = Rescaled(offset, ctx.std_scale)
    names = coord_names(model, template)
    one = at_one_place(template, names)
    if one is not None:  # targets at a single place: a scalar prediction
        return run_targets(ctx, one, opts, t_target=t_target, offset=offset).squeeze(ONE_PLACE)
    if opts.chunks:  # the covariates are read block by block, not here
        data_covariates = tuple(map(str, template.data_vars))  # all read at the targets
        light = template.drop_vars(list(data_covariates))
        # coordinates are read here, once (the blocks slice them and never compute)
        lazy_coords = [k for k, v in light.coords.items() if v.chunks is not None]
        if lazy_coords:
            values = dask.compute(*(light[k].variable for k in lazy_coords))
            light = light.assign_coords(dict(zip(lazy_coords, values, strict=True)))
        tgt_ps = to_points(light, None, **names)
    else:
        model.normaliser.check_covariate_units(template, model.covariates, "targets")
        tgt_ps = to_points(template, None, covariates=model.covariates, **names)
    warn_far_targets(model, ctx.points, tgt_ps)
    if opts.radius_km is not None:
        check_within_radius(model, ctx.points, tgt_ps, opts.radius_km)
    outside = outside_grid(model, tgt_ps.s)
    if outside is not None and outside.any():
        raise ConfigError(
            f"{int(outside.sum())} of {len(tgt_ps)} target points lie outside the model's grid "
            f"({extent_text(model)}), where a Swin-TNP fitted on a regional domain has no "
            "pseudo-tokens; select targets inside it (e.g. targets.sel(lat=slice(...), "
            "lon=slice(...))) or fit on data covering them."
        )
    if opts.chunks:
        state = None if opts.radius_km is not None else ctx.state()
        attrs = {c: dict(template[c].attrs) for c in data_covariates}
        payload = Payload(ctx.predictor, state, light, names, tgt_ps.dims, data_covariates,
                           attrs, ctx.points, opts.radius_km, model, t_target,
                           offset)  # fmt: skip
        lazy = [as_dask(template[c], tgt_ps.dims, tgt_ps.shape) for c in data_covariates]
        return lazy_prediction(payload, lazy, tgt_ps, opts.chunks, ctx.attrs)
    if not len(tgt_ps):  # every target lacks a covariate: NaN, as in the lazy path
        empty = np.full((len(tgt_ps), len(model.variables)), np.nan, np.float32)
        return predictions_to_xarray(tgt_ps, empty, empty, list(model.variables),
                                     attrs=ctx.attrs)  # fmt: skip
    targets = model_points(tgt_ps, model, values=False, t=t_target)
    if hasattr(unscaled(offset), "with_inputs"):  # a forecast model may see its baseline
        targets = unscaled(offset).with_inputs(targets, tgt_ps.s)
    mean, std = ctx.predict(targets, opts.radius_km)  # float32, as the lazy path
    samples = {}
    if opts.samples is not None:  # joint draws, mapped as the mean is
        samples = joint_samples(ctx, tgt_ps, targets, opts, mean, std, offset)
    if offset is not None:
        mean, std = offset.add_to(tgt_ps.s, mean, std, prior_std(model))
    out = predictions_to_xarray(tgt_ps, mean.astype(np.float32), std.astype(np.float32),
                                list(model.variables), attrs=ctx.attrs)  # fmt: skip
    return out.assign(samples) if samples else out


def one_time(model: Any, data: xr.Dataset, template: xr.Dataset, opts: Options) -> xr.Dataset:
    """The prediction at the points of ``template`` from the observations of one frame."""
    ctx = build_context(model, data, opts)
    cross_validated = wanted(opts.calibrate, model, ctx, opts.trend)
    if cross_validated:
        ctx = calibrated(model, ctx, data, opts)
    out = run_targets(ctx, template, opts)
    if opts.trend is not None:
        out.attrs["xnp_trend"] = f"{opts.trend}: {_TREND_NOTES[opts.trend]}"
    if ctx.std_scale is not None:
        factors = ", ".join(f"{v} × {f:.3f}" for v, f in zip(ctx.model.variables, ctx.std_scale,
                                                              strict=True))  # fmt: skip
        how = f"{FOLDS}-fold cross-validation on the context" if cross_validated else (
            "the factor xnp.calibrate fitted on held-out data")  # fmt: skip
        out.attrs["xnp_calibration"] = f"predictive std rescaled by {how}: {factors}"
    return out


#: Provenance of a prediction made with ``trend=`` (after the trend's name).
_TREND_NOTES = {
    name: f"the context's {what}, estimated by generalised least squares under a fixed "
    "exponential covariance, was removed before the model and added back; where the "
    "observations leave the field unexplained the prediction reverts to it, and its "
    "estimation variance joins the variance in the same share"
    for name, what in (("constant", "mean"), ("linear", "plane (tangent plane at its centre)"))
}

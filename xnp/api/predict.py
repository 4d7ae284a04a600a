"""``xnp.predict``: labelled predictive mean and std, eager or lazy over dask chunks.

The observations in ``data`` are the context; ``targets`` holds the coordinates to
predict at (a grid, stations, a curvilinear or projected grid, or a dict of
coordinates); without ``targets`` every point of ``data`` is predicted (gap
filling).  For each requested time the context is normalised and conditioned
once (:class:`xnp.infer.Predictor`); the targets are then predicted

* eagerly, in fixed-size chunks, when the target template is in memory, or
* lazily, one dask block at a time, when the template is dask-chunked (or
  ``chunks`` is given): the model, the conditioned state and the target
  coordinates enter the dask graph once, as one task every block depends on, so
  the default threaded scheduler and ``dask.distributed`` both ship them to each
  worker once.  ``.compute()`` or ``.to_zarr()`` then runs the blocks in parallel.

With ``context_radius`` every chunk (or block) conditions only on the context
within that great-circle distance (:meth:`xnp.infer.Predictor.predict`).

A multi-source model (fitted with ``context_sources``) takes further context from
``context_sources`` (e.g. stations next to a grid): the frames of each at the
context's times, each point tagged with its source, as in training.

A model trained on forecast tasks forecasts instead: for each initialisation
time (``time``) its context is the model's frames ending at that time (times
relative to it, as in training), and the targets are predicted ``lead_time``
hours ahead; the result is labelled with ``init_time``, ``lead_time`` and
``valid_time`` (the CF/climpred convention for forecasts).

This module resolves the model (an object, a saved model's directory or a
shipped model's name) and hands the work to :mod:`xnp.prediction`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import xarray as xr

from xnp.ensemble import Ensemble
from xnp.prediction import predict_with
from xnp.shipped import resolve_model

__all__ = ["predict"]


def predict(
    model: Any,
    data: xr.Dataset | xr.DataArray,
    targets: xr.Dataset | xr.DataArray | Mapping[str, Any] | None = None,
    *,
    time: Any = None,
    lead_time: Any = None,
    context_radius: str | float | None = None,
    chunks: Mapping[str, int] | int | None = None,
    memory_budget: str | int = "1GiB",
    progress: bool = False,
    context_sources: Mapping[str, xr.Dataset | xr.DataArray] | None = None,
    trend: str | None = None,
    samples: int | None = None,
    sample_step: int = 64,
    seed: int = 0,
    max_context: int | None = None,
    calibrate: bool | None = None,
    background: xr.DataArray | xr.Dataset | Mapping[str, xr.DataArray] | None = None,
) -> xr.Dataset:
    """Predictive mean and standard deviation of ``model``'s variables at ``targets``.

    Parameters
    ----------
    model : NeuralProcess, Ensemble, path or str
        A fitted (or loaded) model, a saved model's directory, or the name of a
        pretrained model (:func:`xnp.available_pretrained`).  An
        :class:`xnp.Ensemble` (``fit(..., members=k)``) predicts with each member
        and returns the moments of their equal mixture
        (:mod:`xnp.prediction.mixture`).  A zero-shot model standardises each
        context set by its own statistics and, if it records a working size
        (``training["context_rms_km"]``, as ``gp-sphere`` does), sees each
        context's distances rescaled to it (:meth:`~xnp.NeuralProcess.with_distance_scale`).
    data : Dataset or DataArray
        Observations used as context (missing values are skipped); never modified.
        An unnamed DataArray is taken as the model's (single) variable.
    targets : Dataset, DataArray or dict of coordinates, optional
        Where to predict.  Default: every point of ``data`` (gap filling).
        A dask-chunked template gives a lazy result.  A dict of 1-D coordinates
        is a grid (scalars: a grid of one point).  A scalar time coordinate of the
        template is ignored (predictions carry the context's time); a time
        dimension selects the times to predict.  Its data variables are ignored,
        except the model's covariates (e.g. a land fraction on the target grid),
        which are read at the targets.
    time : optional
        Time(s) to predict, selected from ``data`` with ``.sel``; default all.
        For a forecast model these are the initialisation times: the context is
        the model's frames up to and including each of them.
    lead_time : optional
        Forecast models only: hours after ``time`` to predict (a number of
        hours, a timedelta, a string such as ``"6h"``, or a list of them).
        Default: the lead the model was trained for.
    context_radius : str or float, optional
        E.g. ``"500km"``: each chunk conditions only on context within that
        great-circle distance.
    chunks : dict or int, optional
        Dask chunks of the target dims, e.g. ``{"lat": 64}`` (an int: every
        dim); makes the result lazy even for an in-memory template.
    memory_budget : str or int
        Memory a chunk of targets may use (sets the chunk size).
    progress : bool
        Progress bar over chunks (eager path).
    context_sources : dict of name to Dataset, optional
        Multi-source models: further observations under the names the model was
        fitted with (see :func:`xnp.fit`); their frames at the context's
        times join the context.  Sources left out simply add nothing.
    trend : {None, "none", "constant", "linear"}
        Zero-shot models only: the context's large-scale mean, estimated before
        the model sees the values (:class:`xnp.data.trend.Trend`), per context
        set (each time; all of it, also with ``context_radius``).  ``None``: the
        model's own, ``training["trend"]``: ``"linear"`` for ``gp-sphere`` (chosen
        on validation data: real fields have large-scale gradients) and the
        models fine-tuned from it, that of ``fit(..., trend=)`` for a fine-tune
        that set one, else none.  ``"none"``: the model standardises the context
        by its plain mean, which it predicts far from the observations (the
        better choice for stationary fields with no large-scale gradient).  ``"constant"``:
        the mean is estimated by generalised least squares, with dense clusters
        of stations down-weighted as in ordinary kriging, and the prediction
        reverts to it where the observations leave the field unexplained.
        ``"linear"``: a plane (on the sphere, in the tangent plane at the
        context's centre), as universal kriging's drift, for fields with a
        large-scale gradient (temperature across a region); the model
        interpolates the residuals, and the plane is added back.  Either way the
        variance of the estimate is added to the predictive variance in the
        share the observations leave.  Recommended for station networks with
        gaps (coasts, mountains); on evenly observed stationary fields with short
        correlation lengths the plane costs a little accuracy (see the
        benchmarks).

    samples : int, optional
        Also draw this many joint samples of the field at the targets,
        ``{variable}_samples`` with a leading ``sample`` dimension, by
        autoregressive sampling (:mod:`xnp.infer.sampling`): the targets are
        visited in a random order per sample, ``sample_step`` at a time, each drawn
        from the model's prediction given the context and the values drawn before
        it.  Their marginals match ``{variable}_mean``/``_std``; unlike them, they
        carry the correlations between targets, for anything non-linear downstream
        (the area above a threshold, a regional mean with its uncertainty).  Cost:
        ``ceil(M / sample_step)`` passes over a context growing to ``N + M`` points
        for ``M`` targets.  Eager only (no ``chunks`` or ``context_radius``).  With
        a ``trend``, each sample adds the trend with one draw of its estimation
        error, shared by its targets.
    sample_step : int
        Targets drawn per step of the sampling (1 is the exact chain rule; larger
        steps treat the targets of a step as independent given the rest: faster,
        and close when they lie far apart, as random orders make likely).
    seed : int
        Seed of the samples' orders and draws, and of ``max_context``'s subset.
    max_context : int, optional
        Condition on at most this many observations per context set (per time;
        per initialisation time of a forecast): a random subset, the same on
        every run with the same ``seed`` and on the eager and lazy paths.  The
        cost of conditioning grows with the square of the context size, so this
        makes dense context cheap: e.g. the ``max_context`` the model was
        trained with (``model.task.max_context``).  A forecast model's baseline
        (persistence, diurnal change, regression) still reads every observation,
        so for forecasts from full grids this costs little accuracy (the
        forecasting guide measures it); for interpolation every dropped
        observation is information lost.  Default: all observations.
    calibrate : bool, optional
        Rescale the predictive std by the context's own 10-fold cross-validation
        (:mod:`xnp.prediction.calibration`): each tenth of the observations is
        predicted from the rest exactly as the targets are, and the std is
        multiplied by the root mean square of their standardised errors, per
        variable and per time (the result's ``xnp_calibration`` attribute gives
        the factors; joint samples spread around the mean by the same factor).
        For interpolation (not forecasts), with at least 10 observations; it
        costs 10 more conditionings.  Default (None): on for models that
        standardise each context by its own statistics (the pretrained zero-shot
        models and models fine-tuned from them, whose intervals were learned on
        synthetic fields: too wide on real temperature fields,
        :doc:`/user-guide/pretrained`) when a trend is removed (theirs, as
        ``gp-sphere``'s, or ``trend=``), at the times
        whose context holds at least 50 observations; off otherwise, for models
        fitted on your data and for forecasts.  ``False`` keeps the model's own
        std; ``True`` calibrates any interpolation.
    background : DataArray, or Dataset or dict of them (one per variable), optional
        A field the observations depart from (a climatology per hour of day, a
        model forecast): the model interpolates the departures of the
        observations from it, and it is added back to the mean (and samples) at
        the targets; the std is the interpolation's
        (:mod:`xnp.prediction.background`).  It is read at the points by
        coordinate value (linear interpolation in space, exact times), so it may
        lie on a grid other than the data's; its dimensions must match coordinates
        of the data by name or role (latitude, longitude, time).  A climatology
        grouped by a part of the date, e.g. ``train.t2m.groupby("time.hour").mean()``
        (or ``"time.month"``, ``"time.dayofyear"``), is read at each time's hour
        (month, day of the year).  Interpolation only (not forecasts); points it
        does not cover raise an error.

    Returns
    -------
    xr.Dataset
        ``{variable}_mean`` and ``{variable}_std`` (float32) on the target coordinates (and
        ``time``), with ``units``, ``long_name`` and provenance attributes (and
        ``{variable}_samples`` with ``samples``).  For a
        forecast model: on ``init_time`` and ``lead_time`` (dimensions, or scalar
        coordinates when ``time``/``lead_time`` are scalars), with the
        ``valid_time = init_time + lead_time`` coordinate.
    """
    if isinstance(model, str | os.PathLike):
        model = resolve_model(model)
    options = {
        "time": time, "lead_time": lead_time, "context_radius": context_radius,
        "chunks": chunks, "memory_budget": memory_budget, "progress": progress,
        "context_sources": context_sources, "trend": trend, "samples": samples,
        "sample_step": sample_step, "seed": seed, "max_context": max_context,
        "calibrate": calibrate, "background": background,
    }  # fmt: skip
    if isinstance(model, Ensemble):
        return model.predict(data, targets, **options)
    return predict_with(model, data, targets, **options)

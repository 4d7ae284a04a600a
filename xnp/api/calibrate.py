"""Intervals fitted to held-out data: :func:`calibrate`.

A model's predictive std is what its training made it: on a few weeks of data a
fit can end a little too sharp or too wide on the days after.  ``calibrate``
draws tasks from held-out data exactly as ``fit`` draws its validation tasks (the
model's own task spec, normalisation, baseline and padded sizes), and fits one
factor per variable to the std: the root mean square of the standardised errors
``(y − μ) / σ`` over the tasks' targets, the factor that minimises their Gaussian
NLL.  The mean is untouched, so RMSE is too; intervals widen or narrow by the
factor.  The factor is kept in ``model.training["std_scale"]``, saved with the
model, and applied by every prediction (eager, lazy, regional, forecasts, joint
samples), unless ``predict(..., calibrate=True)`` cross-validates the context
instead.

Fit the factor on the data the fit validated on (or on other held-out data), never
on data you then report scores on.
"""

from __future__ import annotations

import copy

import numpy as np
import xarray as xr

from xnp.api.inputs import MAIN_SOURCE
from xnp.api.sizes import fixed_batch
from xnp.data.sampler import TaskSampler
from xnp.errors import ConfigError, EmptyDataError
from xnp.neural_process import NeuralProcess
from xnp.train.metrics import eval_step, std_factors

__all__ = ["calibrate"]


def calibrate(
    model: NeuralProcess,
    data: xr.Dataset | xr.DataArray,
    *,
    batches: int = 8,
    batch_size: int | None = None,
    seed: int = 0,
) -> NeuralProcess:
    """A copy of a fitted ``model`` whose predictive std fits held-out ``data``.

    Parameters
    ----------
    model : NeuralProcess
        A model fitted by :func:`xnp.fit` (it needs the task spec it was fitted
        with; shipped zero-shot models have none: ``predict(..., calibrate=True)``
        calibrates them on each context instead).
    data : Dataset or DataArray
        Held-out data with the model's variables (and any data covariates), on the
        coordinates the model was fitted on: for a forecast model, consecutive
        frames spanning at least one task (its context frames and lead).
    batches, batch_size : int
        How many batches of tasks to draw, and how many tasks each holds (default:
        the fit's batch size).
    seed : int
        Seeds the draw of tasks.

    Returns
    -------
    NeuralProcess
        The same parameters, with ``training["std_scale"]`` (one factor per
        variable) and ``training["std_scale_points"]`` (the targets it was fitted on).

    Raises
    ------
    ConfigError
        For a model without a task spec, a multi-source model, or bad ``batches``.
    EmptyDataError
        If ``data`` holds no complete task.

    Examples
    --------
    >>> import xnp
    >>> from xnp.data.tasks import SpatialTasks
    >>> ds = xnp.datasets.gp_sphere(n_lat=6, n_lon=8, n_time=6, seed=0)
    >>> model = ds.isel(time=slice(0, 4)).np.fit(
    ...     "field",
    ...     model="bsa-tnp-tiny",
    ...     steps=2,
    ...     validation=None,
    ...     progress=False,
    ...     tasks=SpatialTasks(max_context=32, max_targets=32),
    ... )
    >>> tuned = xnp.calibrate(model, ds.isel(time=slice(4, 6)), batches=1)
    >>> tuned.std_scale.shape, model.std_scale is None
    ((1,), True)
    """
    if hasattr(model, "members") and not isinstance(model, NeuralProcess):
        raise ConfigError(
            "calibrate fits one model's std factor; an xnp.Ensemble's std also holds the "
            "spread between its members, which no member's factor accounts for. Calibrate "
            "the members' predictions on each context instead (predict(..., calibrate=True)), "
            "or calibrate one member (ensemble.members[i])."
        )
    if not isinstance(model, NeuralProcess):
        raise ConfigError(f"calibrate needs a fitted NeuralProcess; got {type(model).__name__}.")
    if model.task is None or "context_size" not in model.training:
        raise ConfigError(
            "calibrate draws tasks as the model's fit did, and this model has no record of "
            "them (a shipped zero-shot model?). Predict with calibrate=True to calibrate on "
            "each context instead, or calibrate a model fitted with xnp.fit."
        )
    if len(model.sources) > 1:
        raise ConfigError(
            f"calibrate reads one data source; this model conditions on {list(model.sources)}. "
            "Score it with held-out tasks of every source instead (xnp.fit's validation=)."
        )
    if not (isinstance(batches, int) and batches >= 1):
        raise ConfigError(f"batches must be a positive integer; got {batches!r}.")
    if isinstance(data, xr.DataArray):
        data = data.to_dataset(name=data.name or model.variables[0])
    missing = [v for v in model.variables if v not in data.data_vars]
    if missing:
        raise ConfigError(
            f"calibrate needs the model's variables {list(model.variables)} in the data; "
            f"{missing} are missing."
        )
    run = model.training
    size = int(batch_size or run.get("batch_size", 8))
    nc, nt = int(run["context_size"]), int(run["target_size"])
    try:
        sampler = TaskSampler(
            {MAIN_SOURCE: data}, list(model.variables), model.task,
            covariates=list(model.covariates), target_source=MAIN_SOURCE, batch_size=size,
            seed=seed, split="train", normaliser=model.normaliser, baseline=model.baseline,
            standardise=model.normalise, trend=run.get("trend_in_training"),
        )  # fmt: skip
        drawn = [fixed_batch(sampler.batch(k), nc, nt) for k in range(batches)]
    except EmptyDataError as err:
        raise EmptyDataError(
            f"calibrate found no complete task in the data: {err} Give it a longer period "
            "or more points."
        ) from err
    factors = std_factors(eval_step(model.graphdef), model.params_, drawn)
    points = int(sum(np.asarray(b.target.mask).sum() for b in drawn))
    if not np.all(np.isfinite(factors)) or np.any(factors <= 0):
        raise EmptyDataError(
            f"calibrate could not fit the std factors ({factors.tolist()}) from {points} "
            "target points: some variable has no valid target in the data."
        )
    out = copy.copy(model)
    out.training = dict(run) | {
        "std_scale": [round(float(f), 6) for f in factors],
        "std_scale_points": points,
    }
    return out

"""xarray in, model out: :func:`fit` trains a neural process on a dataset.

This layer resolves names (variables, covariates, coordinates, the model), picks
task defaults from the data, builds the seeded task samplers, fixes the padded
batch shape, and runs :func:`xnp.train.loop.train`, with checkpoints and
resumption.  The accessor (``ds.np.fit``) is a thin wrapper around :func:`fit`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
import xarray as xr
from flax import nnx

from xnp.api.finetune import (
    FINE_TUNE_CLUSTERED,
    FINE_TUNE_LEARNING_RATE,
    FINE_TUNE_STEPS,
    as_pretrained,
    fit_trend,
    pretrained_start,
)
from xnp.api.inputs import (
    MAIN_SOURCE,
    check_covariates,
    check_fit_arguments,
    context_sources_of,
    fingerprint,
    split_validation,
    warn_shared_times,
)
from xnp.api.members import fit_members
from xnp.api.sizes import (
    default_tasks,
    fixed_batch,
    inner_task,
    point_bounds,
    swin_grid_for,
    with_caps,
)
from xnp.arrays import padded_size
from xnp.data.coords import (
    find_coords,
    latlon,
    resolve_variables,
)
from xnp.data.covariates import covariate_channels
from xnp.data.sampler import TaskSampler
from xnp.data.tasks import (
    DEFAULT_MAX_POINTS,
    ForecastTasks,
    SpatialTasks,
    WindowTasks,
    task_to_dict,
)
from xnp.data.times import is_datetime
from xnp.ensemble import Ensemble
from xnp.errors import (
    CheckpointError,
    ConfigError,
    EmptyDataError,
    XnpWarning,
)
from xnp.history import history_dataset
from xnp.models.build import build_model, params_template
from xnp.models.registry import config_to_dict, model_config
from xnp.models.swin_config import SwinTNPConfig
from xnp.neural_process import NeuralProcess
from xnp.train.checkpoints import CheckpointDir, read_state, write_state
from xnp.train.loop import train
from xnp.train.settings import TrainConfig
from xnp.train.state import TrainState
from xnp.units import parse_seconds

__all__ = ["fit"]

log = logging.getLogger("xnp.api")

Tasks = SpatialTasks | ForecastTasks | WindowTasks


#: The most steps of a fit with a time budget and no steps given (the budget ends it).
_UNLIMITED_STEPS = 10**9

#: TrainConfig fields that do not change the result (free to differ when resuming).
_NOT_RUN = ("checkpoint_every", "keep_checkpoints", "prefetch")


def _run_config(config: TrainConfig) -> dict[str, Any]:
    """The TrainConfig fields that change a fit's result (as its checkpoints record them).

    ``ema`` is left out when off and ``loss`` when the default NLL, so checkpoints
    written before they existed resume.
    """
    fields = config.to_dict()
    default = {"ema": 0.0, "loss": "nll"}
    return {k: v for k, v in fields.items()
            if k not in _NOT_RUN and not (k in default and v == default[k])}  # fmt: skip


def fit(
    data: xr.Dataset | xr.DataArray,
    variable: str | Sequence[str] | None = None,
    *,
    model: str | Any = "bsa-tnp",
    covariates: Sequence[str] = (),
    tasks: Tasks | None = None,
    steps: int | None = None,
    batch_size: int = 8,
    learning_rate: float | None = None,
    validation: float | str | slice | Sequence[Any] | xr.Dataset | xr.DataArray | None = 0.1,
    seed: int = 0,
    checkpoint_dir: str | os.PathLike | None = None,
    resume: bool = False,
    progress: bool = True,
    config: TrainConfig | None = None,
    context_sources: Mapping[str, xr.Dataset | xr.DataArray] | None = None,
    time_budget: str | float | None = None,
    trend: str | None = None,
    members: int = 1,
) -> NeuralProcess | Ensemble:
    """Train a neural process on ``data`` to predict ``variable``.

    Parameters
    ----------
    data : Dataset or DataArray
        The training data (gridded or stations, with or without time); never
        modified.  Data held by dask are read into memory once (as a copy) when
        the variables fit 1 GiB, and frame by frame for each task otherwise
        (:class:`~xnp.data.TaskSampler`'s ``load_budget``); a log line says which.
    variable : str or list of str
        Variable(s) to learn (default for a DataArray: its name).
    model : str, BSATNPConfig or NeuralProcess
        A registered model name (:func:`xnp.models.registry.available_models`:
        ``"bsa-tnp"`` is the paper's size, ``"bsa-tnp-tiny"`` a small one) or a
        configuration, trained from a random initialisation; its ``dim_x``,
        ``dim_y`` and ``temporal_bias`` are set from the data and tasks.  Or a
        pretrained model to **fine-tune**: its name (:func:`xnp.available_pretrained`,
        e.g. ``"gp-sphere"``) or a zero-shot model; training then starts from its
        weights, interpolation tasks are the default (half of them with clustered
        contexts, ``SpatialTasks(clustered=0.5)``), and the fitted model
        standardises each context by its own statistics, as the pretrained one does
        (:mod:`xnp.api.finetune`).
    covariates : list of str
        Fixed effects: ``"elevation"``, ``"hour_of_day"``, ``"solar_time"``,
        ``"day_of_year"`` or names of variables/coordinates of ``data``.
    tasks : SpatialTasks, ForecastTasks or WindowTasks, optional
        What to learn; default :func:`default_tasks`.
    steps : int, optional
        Number of optimisation steps (default 2000, 500 when fine-tuning; with
        ``time_budget``, the most it may make, default unlimited).
    batch_size : int
        Tasks per step (split over the devices).
    learning_rate : float, optional
        Peak learning rate of the warm-up + cosine schedule (AdamW); default 5e-4,
        or 1e-4 when fine-tuning.
    validation : float, times, Dataset or None
        Fraction of the time axis held out at its end for validation (data with
        time); times of ``data`` to hold out (anything ``data.sel(time=...)``
        takes: ``slice("2019-03-17", "2019-03-18")``, ``"2019-03"``, a list of
        times), which are then left out of training; a separate dataset to validate
        on (used as it is: to hold out times of ``data``, drop them from ``data``
        too; a warning says when they are shared); or None for no validation.  With
        validation, the returned model has the parameters of the best validation NLL
        (CRPS with ``config=TrainConfig(loss="crps")``).
    seed : int
        Seed of the parameter initialisation and of the task stream: the same
        data, arguments and seed give bit-identical parameters on one machine.
    checkpoint_dir : path, optional
        Folder for periodic checkpoints (each a loadable model directory).
    resume : bool
        Continue from the latest checkpoint in ``checkpoint_dir`` (same arguments
        required); the result equals that of an uninterrupted run.
    progress : bool
        Show a progress bar with the loss and steps per second.
    config : TrainConfig, optional
        Rarely changed knobs (schedule, clipping, intervals, padded sizes, devices).
    context_sources : dict of name to Dataset, optional
        Other observations of the same variable(s) (e.g. ``{"stations": st}`` next
        to a gridded ``data``) that add context to every task, from the same times
        (and window); targets always come from ``data``.  Each point carries its
        source's id (one-hot channels of the fixed effects), so the model can
        weigh the sources differently; predict with the same names
        (``predict(..., context_sources={"stations": ...})``).
    time_budget : str or float, optional
        Wall-clock time the training may take, e.g. ``"10min"``, ``"1.5h"`` or
        seconds: the warm-up and cosine schedule are laid over it, and training
        stops cleanly when it is spent (after a last validation, returning the best
        validated parameters).  It counts the training loop (compilation and
        validation included), not reading the data before it; a resumed fit
        counts the time of the run before the interruption.
    trend : {None, "none", "constant", "linear"}
        Fine-tuning only: each task's context trend (generalised least squares,
        :class:`xnp.data.trend.Trend`) is removed before the model sees the values,
        so that it learns the residuals, as zero-shot prediction with ``trend=``
        shows them; the fitted model records it and applies it at prediction
        (``predict(..., trend="none")`` turns it off).  ``None``: plain training
        tasks, and the fine-tuned model keeps the pretrained model's own trend
        for prediction (``gp-sphere``'s is ``"linear"``; chosen on validation
        data, :func:`xnp.api.finetune.fit_trend`); ``"none"``: no trend at all.
    members : int
        Fit this many models with seeds ``seed``, ``seed + 1``, ... and return them
        as one :class:`xnp.Ensemble`, which predicts the equal mixture of their
        predictions (a deep ensemble: a fit on a few days of data depends on its
        seed, and the mixture averages that away).  ``time_budget`` is the
        ensemble's, shared equally; ``steps`` is each member's; member ``i``
        checkpoints to ``checkpoint_dir/member-i`` (:mod:`xnp.api.members`).

    Returns
    -------
    NeuralProcess or Ensemble
        The trained model, with its training history in ``history_``; an
        :class:`xnp.Ensemble` of them with ``members`` above 1.

    Examples
    --------
    >>> import xnp
    >>> ds = xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=12)
    >>> model = fit(
    ...     ds,
    ...     "field",
    ...     model="bsa-tnp-tiny",
    ...     steps=4,
    ...     batch_size=2,
    ...     progress=False,
    ...     config=TrainConfig(log_every=2, validate_every=2, validation_batches=1),
    ... )
    >>> model.history_.sizes["step"], model.variables
    (2, ('field',))
    """
    if isinstance(members, bool) or not (isinstance(members, int | np.integer) and members == 1):
        arguments = {
            "model": model, "covariates": covariates, "tasks": tasks, "steps": steps,
            "batch_size": batch_size, "learning_rate": learning_rate, "validation": validation,
            "seed": seed, "checkpoint_dir": checkpoint_dir, "resume": resume,
            "progress": progress, "config": config, "context_sources": context_sources,
            "time_budget": time_budget, "trend": trend,
        }  # fmt: skip
        return fit_members(lambda **kw: fit(data, variable, **kw), members, arguments)
    t0 = time.perf_counter()
    config = config or TrainConfig()
    if isinstance(data, xr.DataArray):
        if data.name is None and variable is None:
            raise ConfigError("This DataArray has no name; give it one with .rename('name').")
        name = str(data.name if data.name is not None else variable)
        data = data.to_dataset(name=name)
        variable = variable or name
    if variable is None:
        raise ConfigError("Name the variable to learn, e.g. fit(ds, 't2m').")
    budget = None if time_budget is None else parse_seconds(time_budget)
    base = as_pretrained(model)  # a pretrained model to fine-tune, or None
    trend, own_trend = fit_trend(trend, base, tasks)  # removed in training; at prediction
    if steps is None:
        steps = _UNLIMITED_STEPS if budget is not None else FINE_TUNE_STEPS if base else 2_000
    if learning_rate is None:
        learning_rate = FINE_TUNE_LEARNING_RATE if base is not None else 5e-4
    check_fit_arguments(
        steps=steps, batch_size=batch_size, learning_rate=learning_rate, config=config,
        seed=seed, tasks=tasks, resume=resume, checkpoint_dir=checkpoint_dir, variable=variable,
    )  # fmt: skip
    if covariates is None:
        covariates = ()
    if isinstance(covariates, str):
        covariates = [covariates]  # one name, not its letters
    variables = resolve_variables(data, variable)
    covariates = list(covariates)
    check_covariates(data, covariates)
    extra = context_sources_of(context_sources, variables, covariates)
    sources = [MAIN_SOURCE, *extra] if extra else []
    layout = find_coords(data, variables[0])

    if isinstance(validation, xr.DataArray) and not is_datetime(validation.values):
        validation = validation.to_dataset(name=variables[0])  # data, not times
    data, val_data, fraction = split_validation(data, validation, layout)
    if tasks is not None:
        task = tasks
    elif base is not None:  # a pretrained model interpolates; half the contexts clustered
        task = SpatialTasks(max_context=DEFAULT_MAX_POINTS, max_targets=DEFAULT_MAX_POINTS,
                            clustered=FINE_TUNE_CLUSTERED)  # fmt: skip
    else:
        task = default_tasks(data, variables[0], fraction or 0.1)
    if isinstance(validation, xr.Dataset):  # (for forecasts: targets only)
        warn_shared_times(data, validation, layout, inner_task(task))
    bound_c, bound_t = point_bounds(data, variables[0], task, extra)
    nc = config.context_size or padded_size(bound_c, minimum=16, tile=16)
    nt = config.target_size or padded_size(bound_t, minimum=16, tile=16)
    task = with_caps(task, nc, nt)

    standardise = "context" if base is not None else "fitted"
    sampler = TaskSampler(
        {MAIN_SOURCE: data, **extra}, variables, task, covariates=covariates,
        target_source=MAIN_SOURCE, batch_size=batch_size, seed=seed, split="train",
        validation_fraction=fraction, standardise=standardise, trend=trend,
    )  # fmt: skip
    n_sources = len(sources)
    val_batches = None
    if fraction or val_data is not None:
        try:
            val_sampler = TaskSampler(
                {MAIN_SOURCE: data if val_data is None else val_data, **extra}, variables,
                task, covariates=covariates, target_source=MAIN_SOURCE,
                batch_size=batch_size, seed=seed + 1,
                split="train" if val_data is not None else "validation",
                validation_fraction=fraction, normaliser=sampler.normaliser,
                baseline=sampler.baseline, standardise=standardise, trend=trend,
            )  # fmt: skip
            val_batches = [
                fixed_batch(val_sampler.batch(k), nc, nt, n_sources)
                for k in range(config.validation_batches)
            ]
        except EmptyDataError as err:
            raise EmptyDataError(
                f"The validation data hold no complete task of {type(inner_task(task)).__name__}: "
                f"{err}  Hold out a longer period or more points, or change validation=."
            ) from err

    temporal = isinstance(inner_task(task), ForecastTasks)
    dim_x = len(covariate_channels(covariates)) + (n_sources if n_sources > 1 else 0)
    if temporal and inner_task(task).baseline_input:  # the baseline forecast, per variable
        dim_x += len(variables)
    start = None
    if base is not None:
        lat, lon = latlon(data, layout)
        start = pretrained_start(
            base, variables=variables, n_covariate_channels=dim_x, temporal=temporal,
            n_sources=n_sources, lat=lat, lon=lon,
        )  # fmt: skip
        cfg = start.config
    else:
        cfg = model_config(model, dim_x=dim_x, dim_y=len(variables), temporal=temporal)
    if isinstance(model, str) and isinstance(cfg, SwinTNPConfig):
        cfg = swin_grid_for(cfg, *latlon(data, layout))
    if getattr(cfg, "gp_inputs", False) and config.devices is None and _cpu_devices() > 1:
        # the GP bank's linear algebra (LAPACK calls) stalls XLA's all-reduce between
        # CPU devices that share one thread pool: a batch is not worth splitting there
        log.info("a model with a GP bank trains on one of the %d CPU devices", _cpu_devices())
        config = dataclasses.replace(config, devices=1)
    graphdef, params = nnx.split(build_model(cfg, rngs=nnx.Rngs(seed)))
    if start is not None:  # the pretrained weights (with zero covariate channels)
        params = jax.tree.map(lambda _, p: jax.numpy.asarray(p), params, start.params)
    run = {
        "model": config_to_dict(cfg), "variables": variables, "covariates": covariates,
        "task": task_to_dict(task), "steps": int(steps), "batch_size": int(batch_size),
        "learning_rate": float(learning_rate), "seed": int(seed),
        "validation": fraction if val_data is None else (
            "dataset" if isinstance(validation, xr.Dataset) else "times"),
        "train_config": _run_config(config),
        "context_size": nc, "target_size": nt, "sources": sources, "time_budget_s": budget,
        "fine_tuned_from": None if start is None else start.record, "trend": own_trend,
        "trend_in_training": trend,
    }  # fmt: skip
    run["data"] = fingerprint(data, layout, variables, sampler.normaliser)
    if val_data is not None:
        layout_v = find_coords(val_data, variables[0])
        run["validation_data"] = fingerprint(val_data, layout_v, variables)
    for name, src in extra.items():  # the extra context sources are data of the fit too
        held = [v for v in variables if v in src.data_vars]
        run[f"source_data/{name}"] = fingerprint(src, find_coords(src, held[0]), held)
    run = json.loads(json.dumps(run))  # the form it takes in config.json
    state = TrainState(step=0, params=params, opt_state=config.init_optimizer(params))
    checkpoints = None
    if checkpoint_dir is not None:
        checkpoints = CheckpointDir(checkpoint_dir, keep=config.keep_checkpoints)
        latest = checkpoints.latest()
        if latest is not None and not resume:
            raise CheckpointError(
                f"{checkpoint_dir} already holds the checkpoints of a fit (latest: "
                f"{latest.name}); pass resume=True to continue it, or another checkpoint_dir "
                "(or delete this one) to start a new fit. Nothing was overwritten."
            )
        if latest is not None:
            state = read_state(latest, params_template(cfg), config.init_optimizer, run)
            log.info("resuming from %s (step %d)", latest, state.step)
        elif resume:
            log.info("no checkpoint in %s; starting from step 0", checkpoint_dir)

    units = [sampler.normaliser.stats[v].units for v in variables]
    coords = {k: v for k, v in dataclasses.asdict(layout).items() if k not in ("crs",)}
    coords = json.loads(json.dumps(coords))

    # a fine-tuned model keeps the pretrained one's distance limit (rescaled)
    carried = {} if start is None else {
        k: start.training[k] for k in ("max_distance_km",) if k in start.training}  # fmt: skip

    def make_model(s: TrainState, final: bool) -> NeuralProcess:
        use_best = final and s.best_params is not None
        return NeuralProcess(
            cfg,
            s.best_params if use_best else (s.averaged if final else s.params),
            normaliser=sampler.normaliser,
            variables=variables,
            covariates=covariates,
            sources=sources,
            coords=coords,
            task=task,
            history=history_dataset(s.history, variables, units),
            training=run
            | carried
            | {"step": s.step, "best_step": s.best_step if use_best else None},
            baseline=sampler.baseline,
            normalise=standardise,
        )

    def save_checkpoint(s: TrainState) -> None:
        assert checkpoints is not None
        with checkpoints.write(s.step) as tmp:
            record = write_state(tmp, s, run)
            make_model(s, final=False).write_files(tmp, extra={"checkpoint": record})

    log.info(
        "fitting %s (%d parameters) on %s: %r, padded to %d context / %d target points",
        run["model"]["kind"], sum(int(np.size(a)) for a in jax.tree.leaves(params)),
        ", ".join(variables), task, nc, nt,
    )  # fmt: skip
    scale = [sampler.normaliser.stats[v].std for v in variables]
    if sampler.baseline is not None:  # targets are changes in the baseline's scale
        scale = list(sampler.baseline.change_scale(scale))
    state = train(
        graphdef, state, lambda k: fixed_batch(sampler.batch(k), nc, nt, n_sources), steps=steps,
        learning_rate=learning_rate, config=config, batch_size=batch_size,
        validation=val_batches, value_scale=scale, progress=progress,
        on_checkpoint=save_checkpoint if checkpoints is not None else None, time_budget=budget,
    )  # fmt: skip
    result = make_model(state, final=True)
    result.training["seconds"] = round(time.perf_counter() - t0, 3)
    result.training["train_seconds"] = round(state.seconds, 3)
    if budget is not None:
        result.training["stopped_at_budget"] = bool(state.out_of_time)
    if state.interrupted:
        result.training["interrupted"] = True
        kept = f"the parameters of step {state.step}"
        if state.best_params is not None:
            kept = f"the best validated parameters (step {state.best_step})"
        again = ""
        if checkpoints is not None:
            again = " fit(..., resume=True) with the same checkpoint_dir continues the run."
        warnings.warn(
            f"fit interrupted after {state.step} of {steps} steps; returning the model with "
            f"{kept}.{again}",
            XnpWarning,
            stacklevel=2,
        )
    return result


def _cpu_devices() -> int:
    """How many devices JAX has, when they are CPU devices (else 0)."""
    return len(jax.devices()) if jax.default_backend() == "cpu" else 0

"""``xnp fit``: train a neural process on a file and save it.

Imports :mod:`xnp.api.fit` and the training settings only when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from pathlib import Path
from typing import Any

from xnp.cli.checks import check_model_out, check_variables, open_sources, time_dim
from xnp.errors import ConfigError, UsageError
from xnp.storage import open_data

__all__ = ["forecast_tasks", "run_fit", "train_config"]

log = logging.getLogger(__name__)


def train_config(steps: int, **overrides: Any) -> Any:
    """A TrainConfig whose logging and validation intervals suit a run of ``steps``.

    Parameters
    ----------
    steps : int
        Optimisation steps of the run.
    **overrides
        Further fields of :class:`xnp.train.TrainConfig`.

    Returns
    -------
    TrainConfig
    """
    from xnp.train import TrainConfig

    log_every = min(50, steps)
    validate_every = log_every * max(1, min(250, steps) // log_every)
    return TrainConfig(log_every=log_every, validate_every=validate_every,
                       checkpoint_every=validate_every * 2, **overrides)  # fmt: skip


def run_fit(args: argparse.Namespace, files: contextlib.ExitStack) -> int:
    """``xnp fit``: train a neural process on DATA and save it to ``--out``.

    The options are checked, and ``--out`` with them, before any training.

    Takes the parsed command line and the stack that closes the files it opens;
    returns the exit status, 0 (failures raise, and :func:`xnp.cli.main` reports them).
    """
    from xnp.data.tasks import DEFAULT_MAX_POINTS, SpatialTasks

    if args.max_points is not None and args.tasks != "spatial":
        raise UsageError(
            "--max-points caps the points of spatial tasks (--tasks spatial); --tasks auto "
            f"caps its tasks at {DEFAULT_MAX_POINTS} points. Leave out one of the two."
        )
    out = Path(args.out).expanduser()
    if args.checkpoint_dir and Path(args.checkpoint_dir).expanduser().resolve() == out.resolve():
        raise UsageError(
            "--out and --checkpoint-dir must be different folders: the model saved at the "
            "end would have to replace the checkpoints."
        )
    check_model_out(out)  # before training, not after it
    data = files.enter_context(open_data(args.data))
    variables = args.variable
    check_variables(data, variables, "data")
    validation: float | str | slice | None = args.validation or None
    if validation is not None and time_dim(data, variables[0]) is None:
        if not isinstance(validation, float):  # dates given: they cannot be held out
            v = validation
            shown = f"{v.start or ''}/{v.stop or ''}" if isinstance(v, slice) else v
            raise ConfigError(
                f"--validation {shown} holds out times, but the data has no time "
                f"axis; leave --validation out, or give data of {variables[0]!r} over time."
            )
        log.info("the data has no time axis: training without validation")
        validation = None
    max_points = args.max_points or DEFAULT_MAX_POINTS
    tasks = (SpatialTasks(max_context=max_points, max_targets=max_points)
             if args.tasks == "spatial" else None)  # fmt: skip
    forecast_options = (args.lead is not None, args.baseline is not None, args.baseline_input)
    if args.tasks != "spatial" or any(forecast_options):
        tasks = forecast_tasks(args, data, variables[0], validation)
    from xnp.api.fit import fit  # (here: a wrong --out is refused without loading JAX)

    model_spec: Any = args.model
    if args.start is not None:
        from xnp.shipped import resolve_model

        model_spec = resolve_model(args.start)
    model = fit(
        data, variables, model=model_spec, covariates=args.covariates, tasks=tasks,
        steps=args.steps, time_budget=args.time_budget, trend=args.trend,
        batch_size=args.batch_size, learning_rate=args.learning_rate,
        validation=validation, seed=args.seed, checkpoint_dir=args.checkpoint_dir,
        resume=args.resume, progress=args.progress,
        config=train_config(args.steps or (500 if args.start else 2000), ema=args.ema,
                            loss=args.loss),
        context_sources=open_sources(args, files), members=args.members,
    )  # fmt: skip
    path = model.save(out)
    for line in repr(model).splitlines():
        log.info("%s", line)
    print(f"model: {path}")
    return 0


def forecast_tasks(args: argparse.Namespace, data: Any, variable: str, validation: Any) -> Any:
    """The tasks of ``--tasks auto|forecast`` with the forecast options applied.

    ``--lead``, ``--baseline`` and ``--baseline-input`` set the lead, the baseline and
    whether the network sees it.  ``--tasks auto`` on data without a regular time axis
    gives spatial tasks, unless a forecast option asks for forecasts; a forecast option
    with ``--tasks spatial`` is a usage error.
    """
    import dataclasses

    from xnp.api.sizes import default_tasks
    from xnp.data.tasks import ForecastTasks

    given = (("--lead", args.lead), ("--baseline", args.baseline),
             ("--baseline-input", getattr(args, "baseline_input", False) or None))  # fmt: skip
    asked = [o for o, v in given if v is not None]
    if args.tasks == "spatial":
        raise UsageError(
            f"{' and '.join(asked)} set forecast tasks; add --tasks forecast (or leave "
            f"{' and '.join(asked)} out to interpolate)."
        )
    fraction = validation if isinstance(validation, float) else 0.1
    tasks = default_tasks(data, variable, fraction)
    if not isinstance(tasks, ForecastTasks):
        if args.tasks == "auto" and not asked:
            return tasks
        raise ConfigError(
            f"forecast tasks need a regular time axis of {variable!r} with at least three "
            "times; this data has none (its default tasks are spatial). Give data over "
            "time, or use --tasks spatial."
        )
    baseline = tasks.baseline if args.baseline is None else args.baseline
    baseline = None if baseline == "none" else baseline
    inputs = bool(getattr(args, "baseline_input", False))
    return dataclasses.replace(
        tasks, lead=args.lead or tasks.lead, baseline=baseline, baseline_input=inputs
    )

""":func:`predict_with`: a model object's predictions at the targets, eager or lazy.

The function behind :func:`xnp.predict` and :meth:`xnp.NeuralProcess.predict`
once the model is an object (names and paths are resolved one layer up).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from xnp.data.coords import find_coords, locators_as_coords
from xnp.data.normalise import is_zero_shot
from xnp.data.tasks import ForecastTasks, WindowTasks, check_count, check_seed
from xnp.data.trend import DEGREES
from xnp.errors import (
    ConfigError,
)
from xnp.prediction.background import as_backgrounds, restore, subtract
from xnp.prediction.context import Options, check_sources, coord_names, zero_shot_variable
from xnp.prediction.forecast import forecast
from xnp.prediction.frames import predict_each_time
from xnp.prediction.run import one_time
from xnp.prediction.samples import check_sampling
from xnp.prediction.templates import check_chunks, checked_dataset, template_of
from xnp.units import parse_distance_km

__all__ = ["check_model", "predict_with", "resolve_trend", "with_context"]


def check_model(model: Any) -> Any:
    """``model`` if it is a model object, else a :class:`~xnp.errors.ConfigError`."""
    if hasattr(model, "members") and not hasattr(model, "params_"):
        raise ConfigError(
            "this needs one model, and an xnp.Ensemble is several: xnp.predict mixes its "
            "members' predictions; for anything else use one member (ensemble.members[0])."
        )
    if not all(hasattr(model, a) for a in ("variables", "normaliser", "params_")):
        raise ConfigError(
            f"model must be a NeuralProcess (from fit, xnp.load or xnp.pretrained), a model "
            f"directory or a pretrained model's name; got {type(model).__name__}."
        )
    return model


def with_context(model: Any, data: xr.Dataset | xr.DataArray, what: str) -> tuple[Any, xr.Dataset]:
    """The observations ``data`` as a checked Dataset, and the model set to read them.

    An unnamed DataArray holds a one-variable model's variable; a zero-shot model
    takes whichever single variable the data holds (``what`` names the data in
    errors).
    """
    if isinstance(data, xr.DataArray) and data.name is None and len(model.variables) == 1:
        data = data.rename(model.variables[0])  # an unnamed array holds the model's variable
    data = checked_dataset(data, what)
    if is_zero_shot(model):
        located, _ = locators_as_coords(data, getattr(model, "coords", None))
        model = zero_shot_variable(model, located)
    return model, data


def resolve_trend(model: Any, trend: str | None) -> str | None:
    """The trend a zero-shot ``model`` removes from a context: ``trend=`` as given, or its own.

    ``None`` is the model's own (``training["trend"]``: ``gp-sphere``'s, or a
    fine-tune's; else none); ``"none"`` none; ``"constant"`` / ``"linear"`` those.
    Returns ``None`` (no trend) or the degree's name.

    Raises
    ------
    ConfigError
        For another value, or a trend asked of a fitted (not zero-shot) model.
    """
    if trend is not None and trend != "none" and trend not in DEGREES:
        raise ConfigError(f"trend must be None, 'none', 'constant' or 'linear'; got {trend!r}.")
    if trend is None:
        trend = (getattr(model, "training", None) or {}).get("trend")
    trend = None if trend == "none" else trend
    if trend is not None and not is_zero_shot(model):
        raise ConfigError(
            "trend= is for zero-shot models, which standardise each context set by its own "
            "statistics; a fitted model learned the large-scale structure of its training "
            "data. Predict without trend=."
        )
    return trend


def predict_with(
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
    background: Any = None,
) -> xr.Dataset:
    """Predictions of the model object ``model`` at ``targets``; see :func:`xnp.predict`.

    The arguments are those of :func:`xnp.predict`, but ``model`` is a model
    object (a :class:`~xnp.NeuralProcess`, or anything with its interface):
    names of shipped models and model directories are resolved by
    :func:`xnp.predict`, one layer up.
    """
    model = check_model(model)
    if calibrate is not None and not isinstance(calibrate, bool | np.bool_):
        raise ConfigError(f"calibrate must be None, True or False; got {calibrate!r}.")
    calibrate = None if calibrate is None else bool(calibrate)
    trend = resolve_trend(model, trend)
    model, data = with_context(model, data, "data")
    missing = [v for v in model.variables if v not in data.data_vars]
    if missing:
        raise ConfigError(
            f"the context has no variable {missing}; the model predicts {list(model.variables)} "
            f"and the data holds {list(data.data_vars)}."
        )
    backgrounds = None if background is None else as_backgrounds(background, model.variables)
    where = template_of(targets, data, tuple(getattr(model, "covariates", None) or ()),
                      getattr(model, "coords", None))  # fmt: skip
    template = where.points
    # the user's chunks, else those of a dask-backed template
    chunks = check_chunks(chunks, template) or check_chunks(where.chunks, template)
    radius_km = None if context_radius is None else parse_distance_km(context_radius)
    optional = {"samples": samples, "max_context": max_context}
    check_count(sample_step=sample_step, **{k: v for k, v in optional.items() if v is not None})
    check_seed(seed)
    sources = check_sources(model, context_sources)
    task = getattr(model, "task", None)
    task = task.task if isinstance(task, WindowTasks) else task
    if backgrounds and isinstance(task, ForecastTasks):
        raise ConfigError(
            "background= is for interpolation; a forecast model starts from its own "
            "baseline (fit(..., tasks=ForecastTasks(baseline=...))). Predict without "
            "background=."
        )
    if backgrounds:  # the model sees the departures from the background, in every source
        data = subtract(data, backgrounds)
        sources = tuple((i, subtract(src, backgrounds)) for i, src in sources)
    opts = Options(radius_km, chunks, memory_budget, progress, sources, trend, samples,
                   sample_step, seed, max_context, calibrate)  # fmt: skip
    check_sampling(opts)
    layout = find_coords(data, model.variables[0], **coord_names(model, data))
    if isinstance(task, ForecastTasks):
        if calibrate:  # (the default, None, leaves forecasts as they are)
            raise ConfigError(
                "calibrate=True cross-validates an interpolation's context; a forecast's "
                "targets lie hours ahead of it, so its errors there say nothing of the "
                "forecast's. A forecast model's std is calibrated by its training; predict "
                "without calibrate=."
            )
        return where.arrange(
            forecast(model, data, template, task, layout, opts, time=time, lead_time=lead_time)
        )
    if lead_time is not None:
        raise ConfigError(
            "lead_time is for forecast models; this model interpolates at the context's "
            "own time. Select times with `time=`."
        )
    out = where.arrange(predict_each_time(
        data, template, layout, time,
        lambda frame, tmpl: one_time(model, frame, tmpl, opts), require=model.variables,
    ))  # fmt: skip
    return restore(out, backgrounds) if backgrounds else out

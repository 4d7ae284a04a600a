"""The inputs of a fit, checked: context sources, covariates, validation, fingerprints.

What ``fit`` is given is checked before any work: the extra context sources and
the covariates exist, the validation times or dataset are usable (and not the
training data again), and the data are fingerprinted so that a resumed fit
refuses other data.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from xnp.data.coords import (
    find_coords,
    latlon,
    source_dataset,
)
from xnp.data.covariates import PERIODIC_COVARIATES, covariate_channels
from xnp.data.normalise import Normaliser
from xnp.data.tasks import ForecastTasks, SpatialTasks, WindowTasks, check_seed
from xnp.data.times import match_hours, time_hours
from xnp.errors import (
    ConfigError,
    VariableNotFoundError,
    XnpError,
    XnpWarning,
)
from xnp.train.settings import TrainConfig

__all__ = [
    "MAIN_SOURCE",
    "check_covariates",
    "check_fit_arguments",
    "context_sources_of",
    "fingerprint",
    "hold_out_times",
    "is_real",
    "split_validation",
    "warn_shared_times",
]

log = logging.getLogger("xnp.api")

Tasks = SpatialTasks | ForecastTasks | WindowTasks


#: Name of the source ``data`` itself among the sources of a multi-source model.
MAIN_SOURCE = "data"


def context_sources_of(
    sources: Mapping[str, xr.Dataset | xr.DataArray] | None,
    variables: Sequence[str],
    covariates: Sequence[str],
) -> dict[str, xr.Dataset]:
    """Check the extra context sources of ``fit`` and return them as Datasets."""
    if sources is None:
        return {}
    if not isinstance(sources, Mapping):
        raise ConfigError(
            "context_sources must be a dict of name to Dataset, e.g. {'stations': st}; "
            f"got {type(sources).__name__}."
        )
    out = {}
    for name, src in sources.items():
        if not isinstance(name, str) or not name or name == MAIN_SOURCE:
            raise ConfigError(
                f"context source names must be non-empty strings other than {MAIN_SOURCE!r} "
                f"(the name of the data itself); got {name!r}."
            )
        src = source_dataset(name, src, variables)
        check_covariates(src, covariates)
        out[name] = src
    return out


def check_covariates(data: xr.Dataset, covariates: Sequence[str]) -> None:
    """Raise unless every covariate is in ``data`` or built in (and none is repeated)."""
    present = {str(n) for n in data.coords} | {str(n) for n in data.data_vars}
    for name in covariates:
        if name not in present and name not in (*PERIODIC_COVARIATES, "elevation"):
            raise VariableNotFoundError(
                f"Covariate {name!r} is not in the data (variables and coordinates: "
                f"{sorted(present)}) and is not built in (elevation, "
                f"{', '.join(PERIODIC_COVARIATES)})."
            )
    covariate_channels(covariates)  # raises on duplicates


def warn_shared_times(
    data: xr.Dataset, val_data: xr.Dataset, layout: Any, task: Any = None
) -> None:
    """Warn when a validation Dataset's targets are frames (same places, times) of ``data``.

    Validating on other places at the same times is a legitimate spatial split;
    the same places at the same times are training data, and their scores are
    not held out.  For forecast tasks only the validation *targets* count: the
    context frames of the first validation forecasts may lie in the training
    period (they are inputs, not scores).
    """
    if layout.time is None or layout.time not in val_data.coords:
        return
    val_times = np.asarray(val_data[layout.time].values).ravel()
    if isinstance(task, ForecastTasks):
        val_times = forecast_targets(val_times, task)
    shared = np.intersect1d(np.asarray(data[layout.time].values).ravel(), val_times)
    space = [d for d in layout.point_dims if d in val_data.dims]
    same_places = len(space) == len(layout.point_dims) and all(
        data.sizes[d] == val_data.sizes[d]
        and (d not in data.coords or np.array_equal(data[d].values, val_data[d].values))
        for d in space
    )
    if same_places:  # the same sizes; the same locations too? (stations need not be)
        try:
            val_layout = find_coords(val_data)
            same_places = all(
                np.allclose(a, b, equal_nan=True)
                for a, b in zip(latlon(data, layout), latlon(val_data, val_layout), strict=True)
            )
        except (XnpError, ValueError):
            pass  # cannot tell: warn on the sizes alone
    if shared.size and same_places:
        warnings.warn(
            f"the validation data share {shared.size} time(s) with the training data at the "
            "same places, so their scores are not held out; train on the other times, e.g. "
            f"ds.drop_sel({layout.time}=validation.{layout.time}.values).",
            XnpWarning,
            stacklevel=3,
        )


def forecast_targets(times: np.ndarray, task: ForecastTasks) -> np.ndarray:
    """The times among ``times`` that forecast tasks can target (their frames are there too).

    Examples
    --------
    >>> t = np.datetime64("2020-01-01T00") + np.arange(4) * np.timedelta64(6, "h")
    >>> forecast_targets(t, ForecastTasks(frames=2, step=6, lead=6)).size
    2
    """
    hours = time_hours(times)
    order = np.argsort(hours)
    axis = hours[order]
    ok = np.zeros(times.size, bool)
    for lead in task.leads:
        frames = [match_hours(axis, hours - lead + o) >= 0 for o in task.offsets]
        ok |= np.all(frames, axis=0)
    return times[ok]


def hold_out_times(data: xr.Dataset, when: Any, layout: Any) -> tuple[xr.Dataset, xr.Dataset]:
    """``(training, validation)``: the times ``when`` of ``data`` held out from the rest.

    ``when`` is what ``data.sel(time=...)`` takes: a slice of dates, a date string
    (e.g. ``"2019-03"``: that month) or a list of times.
    """
    dim = layout.time_dim
    if dim is None or dim not in data.indexes:
        raise ConfigError(
            f"validation={when!r} selects times, but the data has no indexed time dimension "
            "to select them from; give validation a Dataset to validate on, or None."
        )
    try:
        val = data.sel({dim: when})
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(
            "validation must be a fraction in (0, 1), times of the data to hold out (what "
            f"ds.sel({dim}=...) takes: a slice of dates, a date string, a list of times), a "
            f"Dataset or None; {when!r} selects no time of the data ({dim} runs from "
            f"{data[dim].values[0]} to {data[dim].values[-1]}): {err}"
        ) from err
    if dim not in val.dims:  # one time selected by an exact value
        val = val.expand_dims(dim)
    n = val.sizes[dim]
    if n == 0 or n == data.sizes[dim]:
        raise ConfigError(
            f"validation={when!r} selects {n} of the {data.sizes[dim]} times of the data; "
            "it must leave some for training and hold out at least one."
        )
    return data.drop_sel({dim: val[dim].values}), val


def split_validation(
    data: xr.Dataset, validation: Any, layout: Any
) -> tuple[xr.Dataset, xr.Dataset | None, float]:
    """What ``fit(..., validation=)`` means: ``(training data, validation data, fraction)``.

    A Dataset is the validation data (the training data are left whole); times of
    ``data`` (anything ``data.sel(time=...)`` takes) are held out of it and become
    the validation data; a fraction in (0, 1) is the share of the time axis the
    sampler holds out at its end (0 without a time axis, with a warning); ``None``
    is no validation.

    Raises
    ------
    ConfigError
        For a number outside (0, 1).
    """
    if isinstance(validation, xr.Dataset):
        return data, validation, 0.0
    if validation is None:
        return data, None, 0.0
    if not is_real(validation):  # times to hold out
        return (*hold_out_times(data, validation, layout), 0.0)
    if not 0.0 < float(validation) < 1.0:
        raise ConfigError(
            f"validation must be a fraction in (0, 1), times of the data to hold out, a "
            f"Dataset or None; got {validation!r}."
        )
    if layout.time_dim is None:
        warnings.warn(
            "The data has no time axis, so no period can be held out for validation; "
            "training without validation. Pass validation=<Dataset> to validate on other "
            "data, or validation=None to silence this warning.",
            XnpWarning,
            stacklevel=3,
        )
        return data, None, 0.0
    return data, None, float(validation)


def check_fit_arguments(
    *,
    steps: Any,
    batch_size: Any,
    learning_rate: Any,
    config: Any,
    seed: Any,
    tasks: Any,
    resume: bool,
    checkpoint_dir: Any,
    variable: Any,
) -> None:
    """Raise :class:`~xnp.errors.ConfigError` naming the first unusable argument of ``fit``."""
    for name, count in (("steps", steps), ("batch_size", batch_size)):
        if not isinstance(count, int | np.integer) or isinstance(count, bool) or count < 1:
            raise ConfigError(f"{name} must be a positive integer; got {count!r}.")
    if not is_real(learning_rate) or not 0 < learning_rate < math.inf:
        raise ConfigError(
            f"learning_rate must be a positive finite number; got {learning_rate!r}."
        )
    if config is not None and not isinstance(config, TrainConfig):
        raise ConfigError(f"config must be an xnp.TrainConfig or None; got {config!r}.")
    check_seed(seed)
    if tasks is not None and not isinstance(tasks, SpatialTasks | ForecastTasks | WindowTasks):
        raise ConfigError(
            f"tasks must be a task specification (xnp.data.SpatialTasks(), ForecastTasks(), "
            f"WindowTasks(...)) or None for the default; got {tasks!r}."
        )
    if resume and checkpoint_dir is None:
        raise ConfigError("resume=True needs the checkpoint_dir of the run to continue.")
    if not isinstance(variable, str) and (
        not variable or len(set(map(str, variable))) != len(variable)
    ):
        raise ConfigError(f"variable must name one or more distinct variables; got {variable!r}.")


def is_real(x: Any) -> bool:
    """Whether ``x`` is a real number (not a string, array or bool)."""
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


def fingerprint(data: xr.Dataset, layout: Any, variables: Sequence[str],
                 normaliser: Normaliser | None = None) -> dict[str, Any]:  # fmt: skip
    """What identifies the data of a fit, so that ``resume=True`` refuses other data.

    Sizes, the time span, the extent of the spatial coordinates and the statistics of
    the variables (the normaliser's, to 9 significant digits so that another
    chunking of the same data still matches).
    """
    out: dict[str, Any] = {"sizes": {str(k): int(v) for k, v in data.sizes.items()}}
    for name in (layout.lat, layout.lon, layout.x, layout.y):
        if name is not None:  # same sizes but another region must not be resumed
            c = np.asarray(data[name].values, np.float64)
            extent = (np.nanmin(c), np.nanmax(c), np.nanmean(c)) if c.size else ()
            out.setdefault("coords", {})[str(name)] = [float(f"{v:.9g}") for v in extent]
    if layout.time is not None:
        t = np.asarray(data[layout.time].values).ravel()
        out["time"] = [str(t.min()), str(t.max())] if t.size else []
    if normaliser is not None:
        stats = {k: (s.mean, s.std) for k, s in normaliser.stats.items()}
    else:
        stats = {v: (float(data[v].mean()), float(data[v].std())) for v in variables}
    out["stats"] = {k: [float(f"{m:.9g}"), float(f"{sd:.9g}")] for k, (m, sd) in stats.items()}
    return out

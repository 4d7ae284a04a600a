"""xarray in, model out: :func:`fit` trains a neural process on a dataset.

This layer resolves names (variables, covariates, coordinates, the model), picks
task defaults from the data, builds the seeded task samplers, fixes the padded
batch shape, and runs :func:`xnp.train.train`, with checkpoints and resumption.
The accessor (``ds.np.fit``) is a thin wrapper around :func:`fit`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import xarray as xr
from flax import nnx

from xnp import checkpoint as ckpt
from xnp.arrays import Points, padded_size
from xnp.data.batch import Batch, source_channels
from xnp.data.coords import (
    _is_datetime,
    find_coords,
    latlon,
    resolve_variables,
    source_dataset,
)
from xnp.data.covariates import PERIODIC_COVARIATES, covariate_channels
from xnp.data.normalise import Normaliser
from xnp.data.sampler import TaskSampler
from xnp.data.tasks import ForecastTasks, SpatialTasks, WindowTasks, in_window
from xnp.data.times import time_hours, validation_cut
from xnp.errors import (
    CheckpointError,
    ConfigError,
    EmptyDataError,
    VariableNotFoundError,
    XnpError,
    XnpWarning,
)
from xnp.estimator import (
    NeuralProcess,
    history_dataset,
    history_lists,
    params_template,
    task_to_dict,
)
from xnp.models.registry import build_model, config_to_dict, model_config
from xnp.models.swin_config import SwinTNPConfig
from xnp.train import TrainConfig, TrainState, train

__all__ = ["default_tasks", "fit", "swin_grid_for"]

log = logging.getLogger(__name__)

Tasks = SpatialTasks | ForecastTasks | WindowTasks
#: TrainConfig fields that do not change the result (free to differ when resuming).
_NOT_RUN = ("checkpoint_every", "keep_checkpoints", "prefetch")
#: Caps on the points per task of the default task specifications.
DEFAULT_MAX_POINTS = 1024


def default_tasks(data: xr.Dataset, variable: str, validation_fraction: float = 0.1) -> Tasks:
    """The task specification :func:`fit` uses when none is given.

    Without a time axis (or with fewer than three times), or with times whose
    steps are not whole multiples of one step (calendar months or years, whose
    lengths differ): :class:`SpatialTasks`.  Otherwise :class:`ForecastTasks` following the BSA-TNP ERA5 setup, 4 context
    frames 6 h apart and targets 6 h after the last one, when the data's time
    step divides 6 h; otherwise frames one time step apart and a one-step lead
    (fewer frames if the training period is short).  Both cap tasks at
    1024 context and 1024 target points (random subsets beyond).

    Examples
    --------
    >>> from xnp.datasets import gp_sphere
    >>> default_tasks(gp_sphere(n_time=20), "field")
    ForecastTasks(frames=4, step=6.0, lead=6.0, context_fraction=1.0, max_context=1024, max_targets=1024)
    >>> default_tasks(gp_sphere(n_time=1).isel(time=0), "field").max_targets
    1024
    """  # noqa: E501
    caps = {"max_context": DEFAULT_MAX_POINTS, "max_targets": DEFAULT_MAX_POINTS}
    layout = find_coords(data, variable)
    if layout.time_dim is None or data.sizes[layout.time_dim] < 3:
        return SpatialTasks(**caps)
    hours = np.sort(time_hours(data[layout.time].values))
    steps = np.diff(hours)
    dt = float(np.median(steps))
    if dt <= 0:
        return SpatialTasks(**caps)
    multiples = steps / dt
    if np.any(np.abs(multiples - np.round(multiples)) > 1e-6):
        log.info(
            "The time steps of %r are irregular (from %.0f h to %.0f h, e.g. calendar "
            "months): the default tasks are spatial.  Forecast tasks need a regular step.",
            variable, float(steps.min()), float(steps.max()),
        )  # fmt: skip
        return SpatialTasks(**caps)
    ratio = 6.0 / dt
    step = 6.0 if abs(ratio - round(ratio)) < 1e-9 and round(ratio) >= 1 else dt
    n_train = validation_cut(hours.size, validation_fraction)
    span = float(hours[n_train - 1] - hours[0])
    frames = min(4, math.floor((span - step) / step + 1e-9) + 1)
    if frames < 1:
        return SpatialTasks(**caps)
    return ForecastTasks(frames=frames, step=step, lead=step, **caps)


def _inner(task: Tasks) -> SpatialTasks | ForecastTasks:
    return task.task if isinstance(task, WindowTasks) else task


def _point_bounds(
    data: xr.Dataset, variable: str, task: Tasks, sources: Mapping[str, xr.Dataset] | None = None
) -> tuple[int, int]:
    """Upper bounds on the context and target points of one task.

    The extra context ``sources`` add their points to every task's context.
    """
    n = _points_per_frame(data, variable, task)
    inner = _inner(task)
    frames = inner.frames if isinstance(inner, ForecastTasks) else 1
    extra = frames * sum(_points_per_frame(s, variable, task) for s in (sources or {}).values())
    if isinstance(inner, ForecastTasks):
        return min(inner.max_context, frames * n + extra), min(inner.max_targets, n)
    return min(inner.max_context, max(n - 1, 1) + extra), min(inner.max_targets, max(n - 1, 1))


def _points_per_frame(data: xr.Dataset, variable: str, task: Tasks) -> int:
    """Points of one frame of ``data`` a task can hold (those in a window, for windows)."""
    layout = find_coords(data, variable)
    n = int(np.prod([data.sizes[d] for d in layout.point_dims]))
    if isinstance(task, WindowTasks):
        lat, lon = latlon(data, layout)
        lat, lon = np.ravel(lat), np.ravel(lon)
        rng = np.random.default_rng(0)
        centres = rng.choice(lat.size, size=min(lat.size, 256), replace=False)
        counts = [
            int(in_window(lat, lon, (lat[i], lon[i]), task.half_widths(lat[i])).sum())
            for i in centres
        ]
        n = min(n, int(1.25 * max(counts)) + 1)
    return n


def _with_caps(task: Tasks, context: int, target: int) -> Tasks:
    inner = _inner(task)
    inner = dataclasses.replace(
        inner,
        max_context=min(inner.max_context, context),
        max_targets=min(inner.max_targets, target),
    )
    return dataclasses.replace(task, task=inner) if isinstance(task, WindowTasks) else inner


def _resize(points: Points, n: int) -> Points:
    """Pad (or drop trailing padding) so the point axis has length ``n`` (numpy)."""
    arrays = {k: np.asarray(getattr(points, k)) for k in ("s", "t", "x", "f", "mask")}
    size = arrays["mask"].shape[1]
    if size > n:
        if arrays["mask"][:, n:].any():
            raise ConfigError(f"A task has more than {n} points; raise TrainConfig sizes.")
        arrays = {k: a[:, :n] for k, a in arrays.items()}
    elif size < n:
        arrays = {
            k: np.pad(a, [(0, 0), (0, n - size)] + [(0, 0)] * (a.ndim - 2))
            for k, a in arrays.items()
        }
    return Points(**arrays)


def _fixed(batch: Batch, nc: int, nt: int, n_sources: int = 1) -> Batch:
    """``batch`` padded to ``nc`` context and ``nt`` target points, with source channels."""

    def ids(a: Any, n: int) -> np.ndarray:
        a = np.asarray(a)
        return a[:, :n] if a.shape[1] >= n else np.pad(a, [(0, 0), (0, n - a.shape[1])])

    def with_sources(points: Points, source: np.ndarray) -> Points:
        if n_sources <= 1:
            return points
        return points.replace(x=source_channels(points.x, source, n_sources))

    y = np.asarray(batch.y)
    y = y[:, :nt] if y.shape[1] >= nt else np.pad(y, [(0, 0), (0, nt - y.shape[1]), (0, 0)])
    c_ids, t_ids = ids(batch.context_source, nc), ids(batch.target_source, nt)
    return Batch(
        context=with_sources(_resize(batch.context, nc), c_ids),
        target=with_sources(_resize(batch.target, nt), t_ids),
        y=y,
        context_source=c_ids,
        target_source=t_ids,
    )


def swin_grid_for(config: SwinTNPConfig, lat: np.ndarray, lon: np.ndarray) -> SwinTNPConfig:
    """A Swin-TNP preset's pseudo-token grid fitted to the domain of the data.

    A preset's grid is global; for regional data (less than 270° of longitude and
    150° of latitude) the grid instead covers the data's bounding box plus a
    margin (5 % of the span, at least one data spacing), with nodes about two data
    spacings apart (the spacing estimated as ``√(area / number of locations)``),
    rounded up to whole windows and at most the preset's node counts.  Global
    data, and regions across the date line, keep the global grid.

    Examples
    --------
    >>> lat, lon = np.meshgrid(np.arange(50, 58.25, 0.25), np.arange(-6, 6.25, 0.25))
    >>> cfg = swin_grid_for(SwinTNPConfig(), lat, lon)
    >>> cfg.grid_shape, [round(v, 2) for v in cfg.extent[0]]
    ((20, 28), [49.59, 58.41])
    """
    ok = np.isfinite(lat) & np.isfinite(lon)
    lat, lon = np.asarray(lat, np.float64)[ok], np.asarray(lon, np.float64)[ok]
    if lat.size < 2:
        return config
    spans = [float(np.ptp(lat)), float(np.ptp(lon))]
    if spans[1] > 270.0 or spans[0] > 150.0:
        return config
    locations = np.unique(np.round(np.stack([lat, lon], -1), 6), axis=0).shape[0]
    area = max(spans[0], 1e-3) * max(spans[1], 1e-3)
    step = float(np.sqrt(area / locations))
    extent, shape = [], []
    for axis, values in enumerate((lat, lon)):
        margin = max(0.05 * spans[axis], step)
        lo, hi = float(values.min()) - margin, float(values.max()) + margin
        if axis == 0:
            lo, hi = max(lo, -90.0), min(hi, 90.0)
        window = config.window[axis]
        n = -(-int(np.ceil((hi - lo) / (2.0 * step))) // window) * window
        shape.append(int(min(max(n, window), config.grid_shape[axis])))
        extent.append((lo, hi))
    return config.replace(grid_shape=tuple(shape), extent=tuple(extent))


#: Name of the source ``data`` itself among the sources of a multi-source model.
MAIN_SOURCE = "data"


def _context_sources(
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
        _check_covariates(src, covariates)
        out[name] = src
    return out


def _check_covariates(data: xr.Dataset, covariates: Sequence[str]) -> None:
    present = {str(n) for n in data.coords} | {str(n) for n in data.data_vars}
    for name in covariates:
        if name not in present and name not in (*PERIODIC_COVARIATES, "elevation"):
            raise VariableNotFoundError(
                f"Covariate {name!r} is not in the data (variables and coordinates: "
                f"{sorted(present)}) and is not built in (elevation, "
                f"{', '.join(PERIODIC_COVARIATES)})."
            )
    covariate_channels(covariates)  # raises on duplicates


def _restore(
    directory: Path, graph_params: nnx.State, tx_init: Any, run: dict[str, Any]
) -> TrainState:
    try:
        return _read_state(directory, graph_params, tx_init, run)
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"The checkpoint {directory} is incomplete: {err!r}.") from err


def _read_state(
    directory: Path, graph_params: nnx.State, tx_init: Any, run: dict[str, Any]
) -> TrainState:
    meta = ckpt.read_json(directory / "config.json")
    stored = meta.get("checkpoint", {})
    if stored.get("run") != run:
        diff = sorted(k for k in set(run) | set(stored.get("run", {}))
                      if run.get(k) != stored.get("run", {}).get(k))  # fmt: skip
        raise CheckpointError(
            f"The checkpoint in {directory.parent} was written by a different fit (differs in "
            f"{diff}). Use another checkpoint_dir, or resume=False to start over."
        )
    weights = meta["weights"]
    params = ckpt.arrays_to_tree(
        graph_params, ckpt.read_arrays(directory / weights["file"], weights["sha256"])
    )
    opt_state = ckpt.arrays_to_tree(
        tx_init(params),
        ckpt.read_arrays(directory / "opt_state.safetensors", stored["opt_state_sha256"]),
        by_path=False,
    )
    best = None
    if stored.get("best_sha256"):
        best = ckpt.arrays_to_tree(
            graph_params,
            ckpt.read_arrays(directory / "best_params.safetensors", stored["best_sha256"]),
        )
    history = history_lists(ckpt.read_json(directory / "history.json"))
    best_nll = math.inf if stored.get("best_nll") is None else float(stored["best_nll"])
    to_jax = lambda tree: jax.tree.map(jax.numpy.asarray, tree)  # noqa: E731
    return TrainState(
        step=int(stored["step"]),
        params=to_jax(params),
        opt_state=to_jax(opt_state),
        best_params=None if best is None else to_jax(best),
        best_step=int(stored.get("best_step", 0)),
        best_nll=best_nll,
        history=history,
        pending_losses=tuple(float(x) for x in stored.get("pending_losses", [])),
    )


def _warn_shared_times(data: xr.Dataset, val_data: xr.Dataset, layout: Any) -> None:
    """Warn when a validation Dataset holds frames (same places, same times) of ``data``.

    Validating on other places at the same times is a legitimate spatial split;
    the same places at the same times are training data, and their scores are
    not held out.
    """
    if layout.time is None or layout.time not in val_data.coords:
        return
    shared = np.intersect1d(np.asarray(data[layout.time].values).ravel(),
                            np.asarray(val_data[layout.time].values).ravel())  # fmt: skip
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


def _hold_out_times(data: xr.Dataset, when: Any, layout: Any) -> tuple[xr.Dataset, xr.Dataset]:
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


def _is_real(x: Any) -> bool:
    """Whether ``x`` is a real number (not a string, array or bool)."""
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


def _fingerprint(data: xr.Dataset, layout: Any, variables: Sequence[str],
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


def fit(
    data: xr.Dataset | xr.DataArray,
    variable: str | Sequence[str] | None = None,
    *,
    model: str | Any = "bsa-tnp",
    covariates: Sequence[str] = (),
    tasks: Tasks | None = None,
    steps: int = 2_000,
    batch_size: int = 8,
    learning_rate: float = 5e-4,
    validation: float | str | slice | Sequence[Any] | xr.Dataset | xr.DataArray | None = 0.1,
    seed: int = 0,
    checkpoint_dir: str | os.PathLike | None = None,
    resume: bool = False,
    progress: bool = True,
    config: TrainConfig | None = None,
    context_sources: Mapping[str, xr.Dataset | xr.DataArray] | None = None,
) -> NeuralProcess:
    """Train a neural process on ``data`` to predict ``variable``.

    Parameters
    ----------
    data : Dataset or DataArray
        The training data (gridded or stations, with or without time); never
        loaded as a whole or modified.
    variable : str or list of str
        Variable(s) to learn (default for a DataArray: its name).
    model : str or BSATNPConfig
        A registered model name (:func:`xnp.models.registry.available_models`:
        ``"bsa-tnp"`` is the paper's size, ``"bsa-tnp-tiny"`` a small one) or a
        configuration.  Its ``dim_x``, ``dim_y`` and ``temporal_bias`` are set from
        the data and tasks.
    covariates : list of str
        Fixed effects: ``"elevation"``, ``"hour_of_day"``, ``"solar_time"``,
        ``"day_of_year"`` or names of variables/coordinates of ``data``.
    tasks : SpatialTasks, ForecastTasks or WindowTasks, optional
        What to learn; default :func:`default_tasks`.
    steps : int
        Number of optimisation steps.
    batch_size : int
        Tasks per step (split over the devices).
    learning_rate : float
        Peak learning rate of the warm-up + cosine schedule (AdamW).
    validation : float, times, Dataset or None
        Fraction of the time axis held out at its end for validation (data with
        time); times of ``data`` to hold out (anything ``data.sel(time=...)``
        takes: ``slice("2019-03-17", "2019-03-18")``, ``"2019-03"``, a list of
        times), which are then left out of training; a separate dataset to validate
        on (used as it is: to hold out times of ``data``, drop them from ``data``
        too; a warning says when they are shared); or None for no validation.  With
        validation, the returned model has the parameters of the best validation NLL.
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

    Returns
    -------
    NeuralProcess
        The trained model, with its training history in ``history_``.

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
    for name, count in (("steps", steps), ("batch_size", batch_size)):
        if not isinstance(count, int | np.integer) or isinstance(count, bool) or count < 1:
            raise ConfigError(f"{name} must be a positive integer; got {count!r}.")
    if not _is_real(learning_rate) or not 0 < learning_rate < math.inf:
        raise ConfigError(
            f"learning_rate must be a positive finite number; got {learning_rate!r}."
        )
    if config is not None and not isinstance(config, TrainConfig):
        raise ConfigError(f"config must be an xnp.TrainConfig or None; got {config!r}.")
    if covariates is None:
        covariates = ()
    if not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer; got {seed!r}.")
    if tasks is not None and not isinstance(tasks, SpatialTasks | ForecastTasks | WindowTasks):
        raise ConfigError(
            f"tasks must be a task specification (xnp.data.SpatialTasks(), ForecastTasks(), "
            f"WindowTasks(...)) or None for the default; got {tasks!r}."
        )
    if isinstance(covariates, str):
        covariates = [covariates]  # one name, not its letters
    if resume and checkpoint_dir is None:
        raise ConfigError("resume=True needs the checkpoint_dir of the run to continue.")
    if not isinstance(variable, str) and (
        not variable or len(set(map(str, variable))) != len(variable)
    ):
        raise ConfigError(f"variable must name one or more distinct variables; got {variable!r}.")
    variables = resolve_variables(data, variable)
    covariates = list(covariates)
    _check_covariates(data, covariates)
    extra = _context_sources(context_sources, variables, covariates)
    sources = [MAIN_SOURCE, *extra] if extra else []
    layout = find_coords(data, variables[0])

    val_data: xr.Dataset | None = None
    fraction = 0.0
    if isinstance(validation, xr.DataArray) and not _is_datetime(validation.values):
        validation = validation.to_dataset(name=variables[0])  # data, not times
    if isinstance(validation, xr.Dataset):
        val_data = validation
        _warn_shared_times(data, val_data, layout)
    elif validation is not None and not _is_real(validation):  # times to hold out
        data, val_data = _hold_out_times(data, validation, layout)
    elif validation is not None:
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
                stacklevel=2,
            )
        else:
            fraction = float(validation)
    task = tasks if tasks is not None else default_tasks(data, variables[0], fraction or 0.1)
    bound_c, bound_t = _point_bounds(data, variables[0], task, extra)
    nc = config.context_size or padded_size(bound_c, minimum=16, tile=16)
    nt = config.target_size or padded_size(bound_t, minimum=16, tile=16)
    task = _with_caps(task, nc, nt)

    sampler = TaskSampler(
        {MAIN_SOURCE: data, **extra}, variables, task, covariates=covariates,
        target_source=MAIN_SOURCE, batch_size=batch_size, seed=seed, split="train",
        validation_fraction=fraction,
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
            )  # fmt: skip
            val_batches = [
                _fixed(val_sampler.batch(k), nc, nt, n_sources)
                for k in range(config.validation_batches)
            ]
        except EmptyDataError as err:
            raise EmptyDataError(
                f"The validation data hold no complete task of {type(_inner(task)).__name__}: "
                f"{err}  Hold out a longer period or more points, or change validation=."
            ) from err

    temporal = isinstance(_inner(task), ForecastTasks)
    dim_x = len(covariate_channels(covariates)) + (n_sources if n_sources > 1 else 0)
    cfg = model_config(model, dim_x=dim_x, dim_y=len(variables), temporal=temporal)
    if isinstance(model, str) and isinstance(cfg, SwinTNPConfig):
        cfg = swin_grid_for(cfg, *latlon(data, layout))
    graphdef, params = nnx.split(build_model(cfg, rngs=nnx.Rngs(seed)))
    run = {
        "model": config_to_dict(cfg), "variables": variables, "covariates": covariates,
        "task": task_to_dict(task), "steps": int(steps), "batch_size": int(batch_size),
        "learning_rate": float(learning_rate), "seed": int(seed),
        "validation": fraction if val_data is None else (
            "dataset" if isinstance(validation, xr.Dataset) else "times"),
        "train_config": {k: v for k, v in config.to_dict().items() if k not in _NOT_RUN},
        "context_size": nc, "target_size": nt, "sources": sources,
    }  # fmt: skip
    run["data"] = _fingerprint(data, layout, variables, sampler.normaliser)
    if val_data is not None:
        layout_v = find_coords(val_data, variables[0])
        run["validation_data"] = _fingerprint(val_data, layout_v, variables)
    for name, src in extra.items():  # the extra context sources are data of the fit too
        held = [v for v in variables if v in src.data_vars]
        run[f"source_data/{name}"] = _fingerprint(src, find_coords(src, held[0]), held)
    run = json.loads(json.dumps(run))  # the form it takes in config.json
    state = TrainState(step=0, params=params, opt_state=config.init_optimizer(params))
    checkpoints = None
    if checkpoint_dir is not None:
        checkpoints = ckpt.CheckpointDir(checkpoint_dir, keep=config.keep_checkpoints)
        latest = checkpoints.latest()
        if latest is not None and not resume:
            raise CheckpointError(
                f"{checkpoint_dir} already holds the checkpoints of a fit (latest: "
                f"{latest.name}); pass resume=True to continue it, or another checkpoint_dir "
                "(or delete this one) to start a new fit. Nothing was overwritten."
            )
        if latest is not None:
            state = _restore(latest, params_template(cfg), config.init_optimizer, run)
            log.info("resuming from %s (step %d)", latest, state.step)
        elif resume:
            log.info("no checkpoint in %s; starting from step 0", checkpoint_dir)

    units = [sampler.normaliser.stats[v].units for v in variables]
    coords = {k: v for k, v in dataclasses.asdict(layout).items() if k not in ("crs",)}
    coords = json.loads(json.dumps(coords))

    def make_model(s: TrainState, final: bool) -> NeuralProcess:
        use_best = final and s.best_params is not None
        return NeuralProcess(
            cfg,
            s.best_params if use_best else s.params,
            normaliser=sampler.normaliser,
            variables=variables,
            covariates=covariates,
            sources=sources,
            coords=coords,
            task=task,
            history=history_dataset(s.history, variables, units),
            training=run | {"step": s.step, "best_step": s.best_step if use_best else None},
        )

    def save_checkpoint(s: TrainState) -> None:
        assert checkpoints is not None
        with checkpoints.write(s.step) as tmp:
            record: dict[str, Any] = {
                "step": s.step, "best_step": s.best_step, "run": run,
                "best_nll": None if math.isinf(s.best_nll) else s.best_nll,
                "pending_losses": list(s.pending_losses),
                "opt_state_sha256": ckpt.write_arrays(
                    tmp / "opt_state.safetensors", ckpt.tree_to_arrays(s.opt_state, by_path=False)
                ),
            }  # fmt: skip
            if s.best_params is not None:
                record["best_sha256"] = ckpt.write_arrays(
                    tmp / "best_params.safetensors", ckpt.tree_to_arrays(s.best_params)
                )
            make_model(s, final=False).write_files(tmp, extra={"checkpoint": record})

    log.info(
        "fitting %s (%d parameters) on %s: %r, padded to %d context / %d target points",
        run["model"]["kind"], sum(int(np.size(a)) for a in jax.tree.leaves(params)),
        ", ".join(variables), task, nc, nt,
    )  # fmt: skip
    scale = [sampler.normaliser.stats[v].std for v in variables]
    state = train(
        graphdef, state, lambda k: _fixed(sampler.batch(k), nc, nt, n_sources), steps=steps,
        learning_rate=learning_rate, config=config, batch_size=batch_size,
        validation=val_batches, value_scale=scale, progress=progress,
        on_checkpoint=save_checkpoint if checkpoints is not None else None,
    )  # fmt: skip
    result = make_model(state, final=True)
    result.training["seconds"] = round(time.perf_counter() - t0, 3)
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

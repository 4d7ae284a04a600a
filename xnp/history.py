"""A model's training history: its xarray form, its JSON form, and its learning curves.

The training loop keeps the history as lists (:class:`xnp.train.state.TrainState`);
a fitted model holds it as an ``xr.Dataset`` indexed by ``step``
(:func:`history_dataset`), saves it as ``history.json`` (:func:`history_json`)
and draws it (:func:`plot_history`, used by :meth:`xnp.NeuralProcess.plot_history`
and :func:`xnp.plot.plot_history`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from xnp.errors import ConfigError, MissingDependencyError
from xnp.train.state import HISTORY_FIELDS

__all__ = ["default_metrics", "history_dataset", "history_json", "plot_history"]

_NAN_FIELDS = (
    "train_nll", "val_nll", "val_coverage", "learning_rate", "steps_per_second",
    "train_crps", "val_crps",
)  # fmt: skip


def history_dataset(
    history: Mapping[str, Sequence[Any]], variables: Sequence[str], units: Sequence[str | None]
) -> xr.Dataset:
    """The training history as an ``xr.Dataset`` indexed by ``step``.

    ``val_rmse`` is in the data's units; with several variables it gains a
    ``variable`` dimension and a ``units`` coordinate along it.
    """
    steps = np.asarray(history.get("step", []), np.int64)
    data: dict[str, Any] = {}
    attrs = {
        "train_nll": "mean training Gaussian NLL per target point (normalised units)",
        "val_nll": "validation Gaussian NLL per target point (normalised units)",
        "val_coverage": "fraction of validation targets inside the central 95% interval",
        "learning_rate": "learning rate",
        "steps_per_second": (
            "training steps per second over the logging interval, the first step of a "
            "run (which compiles) excluded"
        ),
        "train_crps": "mean training CRPS per target point (normalised units)",
        "val_crps": "validation CRPS per target point (normalised units)",
    }
    for name in _NAN_FIELDS:  # a column written before it existed: NaN at every step
        values = np.asarray(history.get(name, [math.nan] * steps.size), np.float64).reshape(-1)
        data[name] = ("step", values, {"long_name": attrs[name]})
    no_rmse = [[math.nan] * len(variables)] * steps.size
    rmse = np.asarray(history.get("val_rmse", no_rmse), np.float64).reshape(-1, len(variables))
    rmse_attrs = {"long_name": "validation root-mean-square error (data units)"}
    if len(variables) == 1:
        if units[0]:
            rmse_attrs["units"] = units[0]
        data["val_rmse"] = ("step", rmse[:, 0], rmse_attrs)
    else:
        data["val_rmse"] = (("step", "variable"), rmse, rmse_attrs)
    coords: dict[str, Any] = {"step": steps}
    if len(variables) > 1:
        coords["variable"] = list(variables)
        # one ``units`` attribute cannot hold several units: each variable's units
        # ("" when unknown) are a coordinate along ``variable`` instead
        coords["units"] = ("variable", [u or "" for u in units])
    return xr.Dataset(data, coords=coords)[[n for n in HISTORY_FIELDS if n != "step"]]


def history_json(history: xr.Dataset) -> dict[str, Any]:
    """The history as JSON lists (``None`` for NaN), as ``history.json`` holds it."""

    def clean(values: np.ndarray) -> list[Any]:
        return [None if not math.isfinite(v) else float(v) for v in values.reshape(-1)]

    out: dict[str, Any] = {"step": history["step"].values.astype(int).tolist()}
    for name in _NAN_FIELDS:
        out[name] = clean(history[name].values)
    rmse = history["val_rmse"].values
    rmse = rmse[:, None] if rmse.ndim == 1 else rmse
    out["val_rmse"] = [clean(row) for row in rmse]
    return out


def default_metrics(history: xr.Dataset) -> tuple[str, str]:
    """The curves of the run's training objective: ``train_/val_crps`` or ``train_/val_nll``.

    Examples
    --------
    >>> default_metrics(history_dataset({"step": [1], "train_crps": [0.3]}, ["v"], [None]))
    ('train_crps', 'val_crps')
    """
    crps = "train_crps" in history and bool(np.isfinite(history["train_crps"].values).any())
    nll = bool(np.isfinite(history["train_nll"].values).any())
    return ("train_crps", "val_crps") if crps and not nll else ("train_nll", "val_nll")


def plot_history(
    history: xr.Dataset, ax: Any = None, *, metrics: Sequence[str] | None = None
) -> Any:
    """Plot learning curves of a training ``history`` with matplotlib; return the axes.

    Parameters
    ----------
    history : xr.Dataset
        A model's ``history_`` (see :func:`history_dataset`).
    ax : matplotlib Axes, optional
        Where to draw (default: a new figure).
    metrics : sequence of str, optional
        Variables of ``history`` to draw against the step; per-variable ones
        (``val_rmse`` of several variables) get a line each, labelled with units.
        Default: the training and validation values of the objective the run
        trained (:func:`default_metrics`).
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(
            "plot_history needs matplotlib: pip install 'xnp[plot]'."
        ) from err
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for name in default_metrics(history) if metrics is None else metrics:
        if name not in history:
            raise ConfigError(f"{name!r} is not in the history ({list(history)}).")
        series = history[name]
        if "variable" in series.dims:
            for v in series["variable"].values:
                s = series.sel(variable=v)
                ok = np.isfinite(s.values)
                unit = str(s["units"].values) if "units" in s.coords else ""
                label = f"{name} {v}" + (f" ({unit})" if unit else "")
                ax.plot(s["step"].values[ok], s.values[ok], ".-", label=label)
            continue
        ok = np.isfinite(series.values)
        ax.plot(series["step"].values[ok], series.values[ok], ".-", label=name)
    ax.set_xlabel("step")
    ax.legend()
    ax.grid(alpha=0.3)
    return ax

"""Diagnostic plots: learning curves and the calibration of predictions.

:func:`plot_history` draws a fitted model's learning curves (with
:func:`xnp.history.plot_history`); :func:`plot_calibration` draws the histogram of
the probability integral transform (:func:`xnp.scoring.evaluation.pit`) and the
reliability curve of the central predictive intervals.  Like every figure of
:mod:`xnp.plot`, they are made without pyplot.

This module imports :mod:`xnp.scoring`, :mod:`xnp.errors` and numpy; matplotlib,
and ``xnp.history`` (which loads the training state's optax and flax), only inside
functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from xnp.errors import ConfigError, EmptyDataError, MissingDependencyError
from xnp.plot.canvas import figure_class
from xnp.scoring.evaluation import pit

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.figure import Figure

    from xnp.neural_process import NeuralProcess

__all__ = ["plot_calibration", "plot_history"]


def plot_history(model: NeuralProcess, *, metrics: Sequence[str] | None = None) -> Figure:
    """Learning curves of a fitted model, as a new figure.

    Draws ``model.history_`` on the axes of a new figure with
    ``xnp.history.plot_history``, as :meth:`xnp.NeuralProcess.plot_history` does.

    Parameters
    ----------
    model : NeuralProcess
        A fitted or loaded model (its ``history_``).
    metrics : sequence of str, optional
        Variables of ``model.history_`` to draw against the step (default: the
        training and validation values of the objective it was trained with).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from xnp.models.config import BSATNPConfig
    >>> from xnp.data.normalise import Normaliser, Stats
    >>> from xnp.neural_process import NeuralProcess
    >>> model = NeuralProcess.init(BSATNPConfig.tiny(), Normaliser({"v": Stats(0.0, 1.0)}), ["v"])
    >>> plot_history(model).axes[0].get_xlabel()
    'step'
    """
    from xnp.history import plot_history as draw_history  # loads optax and flax: on use

    fig = figure_class()(figsize=(6.0, 3.5), layout="constrained")
    draw_history(model.history_, fig.add_subplot(), metrics=metrics)
    return fig


def plot_calibration(
    pred: xr.Dataset,
    truth: xr.Dataset | xr.DataArray,
    ax: Sequence[Any] | None = None,
    *,
    variables: str | Sequence[str] | None = None,
    bins: int = 10,
) -> tuple[Any, Any]:
    """Draw the PIT histogram and the reliability curve of the predictions.

    Left: histogram of the PIT values (:func:`~xnp.scoring.evaluation.pit`) as a
    density, flat at 1 for calibrated predictions.  Right: observed coverage of the
    central predictive intervals against their nominal level (5 % … 95 %), on the
    diagonal for calibrated predictions (below it: over-confident).  Needs matplotlib.

    Parameters
    ----------
    pred, truth, variables
        As for :func:`xnp.evaluate`; each variable is drawn in its own colour.
    ax : pair of matplotlib Axes, optional
        Where to draw the histogram and the reliability curve; default a new
        figure with two panels, made without pyplot (like every figure of
        :mod:`xnp.plot`: nothing is registered with pyplot, so nothing leaks).
    bins : int
        Number of histogram bins.

    Returns
    -------
    (Axes, Axes)
        The histogram and reliability axes (``axes[0].figure`` is their figure).

    Raises
    ------
    MissingDependencyError
        If matplotlib is not installed (``pip install xnp[plot]``).

    Examples
    --------
    >>> import io, numpy as np, xarray as xr
    >>> rng = np.random.default_rng(0)
    >>> pred = xr.Dataset({"v_mean": ("x", np.zeros(200)), "v_std": ("x", np.ones(200))})
    >>> truth = xr.Dataset({"v": ("x", rng.normal(size=200))})
    >>> hist_ax, rel_ax = plot_calibration(pred, truth)
    >>> rel_ax.get_xlabel()
    'nominal coverage'
    >>> hist_ax.figure.savefig(io.BytesIO(), format="png")
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as err:  # pragma: no cover - exercised only without matplotlib
        raise MissingDependencyError(
            "plot_calibration needs matplotlib; install it with `pip install 'xnp[plot]'` "
            "(or `pip install matplotlib`)."
        ) from err
    if ax is None:
        fig = Figure(figsize=(9.0, 3.8), layout="constrained")
        hist_ax, rel_ax = fig.subplots(1, 2)
    else:
        if len(ax) != 2:
            raise ConfigError(f"ax must be a pair of Axes (histogram, reliability); got {ax!r}.")
        hist_ax, rel_ax = ax
    values = pit(pred, truth, variables=variables).compute()
    levels = np.linspace(0.05, 0.95, 19)
    for name, da in values.data_vars.items():
        u = da.values.ravel()
        u = u[np.isfinite(u)]
        if u.size == 0:
            raise EmptyDataError(f"{name}: no point with both a finite truth and prediction.")
        label = str(name)[: -len("_pit")]
        hist_ax.hist(u, bins=bins, range=(0.0, 1.0), density=True, histtype="step", label=label)
        observed = [(np.abs(u - 0.5) <= 0.5 * p).mean() for p in levels]
        rel_ax.plot(levels, observed, marker="o", markersize=3, label=label)
    hist_ax.axhline(1.0, color="0.5", linestyle="--", linewidth=1)
    hist_ax.set(xlabel="PIT", ylabel="density", xlim=(0.0, 1.0), title="PIT histogram")
    rel_ax.plot([0.0, 1.0], [0.0, 1.0], color="0.5", linestyle="--", linewidth=1)
    rel_ax.set(
        xlabel="nominal coverage",
        ylabel="observed coverage",
        xlim=(0.0, 1.0),
        ylim=(0.0, 1.0),
        title="reliability of central intervals",
    )
    if len(values.data_vars) > 1:
        rel_ax.legend()
    return hist_ax, rel_ax

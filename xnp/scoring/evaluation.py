"""Scoring probabilistic predictions against the truth: ``xnp.evaluate`` and ``pit``.

``pred`` is what :func:`xnp.predict` (or a baseline of :mod:`xnp.baselines`)
returns: a Gaussian predictive distribution per point, ``{var}_mean`` and
``{var}_std``.  ``truth`` holds the observed values ``{var}``.  :func:`evaluate`
scores the predictions with

* ``rmse``, ``mae``: root-mean-square and mean absolute error of the mean;
* ``crps``: continuous ranked probability score of the Gaussian, in closed form
  ``σ [z (2Φ(z) − 1) + 2φ(z) − 1/√π]`` with ``z = (y − μ) / σ`` (lower is better;
  equals the absolute error when ``σ = 0``);
* ``nll``: Gaussian negative log-likelihood ``½ log(2πσ²) + (y − μ)² / 2σ²``, in
  nats, averaged over points (infinite where ``σ = 0``);
* ``coverage_50``, ``coverage_90``, ``coverage_95``: fraction of the truth inside
  the central 50 %, 90 %, 95 % predictive interval (equal to the nominal level
  for calibrated predictions);
* ``n``: the number of points scored.

:func:`pit` gives the probability integral transform ``Φ((y − μ)/σ)`` of every
point (uniform on [0, 1] for calibrated predictions) and
:func:`xnp.plot.plot_calibration` draws its histogram and the reliability curve.

The truth is looked up at the prediction's coordinates: floating-point
coordinates match within float32 rounding, longitudes also across the 0…360 and
−180…180 conventions, and other coordinates (station names, times) must be equal.
Latitude and longitude dimensions are matched by what they hold (name, CF standard
name or units), so a prediction on ``lat``/``lon`` scores against a truth on
``latitude``/``longitude``.
Predicted points without a truth are left out with an ``UnmatchedPointsWarning``;
truth beyond the prediction is ignored.  A prediction whose ``{var}_mean`` has other
``units`` than the truth's ``{var}`` raises :class:`~xnp.errors.IncompatibleUnitsError`.
The pairing is :mod:`xnp.scoring.align`'s, the pointwise scores
:mod:`xnp.scoring.scores`'.

Every score is computed point by point with xarray operations, so dask-backed
inputs give a lazy result.

The function :func:`evaluate` is also ``xnp.evaluate``, so the package attribute
``xnp.evaluate`` is the function, not this module; import the other names from
the modules, e.g. ``from xnp.scoring.evaluation import pit``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import xarray as xr

from xnp.errors import ConfigError, DimensionError, EmptyDataError
from xnp.scoring.align import pair, prediction_variables, scored_variables, truth_dataset
from xnp.scoring.scores import (
    COVERAGE_LEVELS,
    METRICS,
    SUMMED_SCORES,
    pointwise,
    score_pit,
    score_valid,
)

__all__ = ["evaluate", "pit"]


def _reduce_dims(dims: tuple[Hashable, ...], dim: str | Sequence[str] | None) -> list[Hashable]:
    if dim is None:
        return list(dims)
    wanted = [dim] if isinstance(dim, str) else list(dim)
    unknown = [d for d in wanted if d not in dims]
    if unknown:
        raise DimensionError(
            f"cannot reduce over {unknown}: the scored points have dims {tuple(dims)}."
        )
    return wanted


def _is_lazy(*arrays: xr.DataArray) -> bool:
    return any(a.chunks is not None for a in arrays)


# --------------------------------------------------------------------------- public API


def evaluate(
    pred: xr.Dataset,
    truth: xr.Dataset | xr.DataArray,
    *,
    variables: str | Sequence[str] | None = None,
    dim: str | Sequence[str] | None = None,
) -> xr.Dataset:
    """Score Gaussian predictions against the truth.

    Parameters
    ----------
    pred : Dataset
        Predictions holding ``{var}_mean`` and ``{var}_std`` (the output of
        :func:`xnp.predict`, ``ds.np.predict`` or a baseline's ``predict``).
    truth : Dataset or DataArray
        The observed values ``{var}`` (an unnamed DataArray is taken to observe the
        only predicted variable).  Never modified.
    variables : str or list of str, optional
        Variables to score; default every variable both predicted and observed.
    dim : str or list of str, optional
        Dimensions to average over; default all.  Dimensions not listed are kept,
        giving metrics per ``lead_time``, per ``station``, ...

    Returns
    -------
    Dataset
        One data variable ``{var}_{metric}`` per variable and metric of
        :data:`~xnp.scoring.scores.METRICS` (``t2m_rmse``, ``t2m_crps``, ...,
        ``t2m_n``) over the kept dimensions.  This flat naming mirrors the
        ``{var}_mean``/``{var}_std`` of the predictions and gives every array a
        single unit (``rmse``, ``mae`` and ``crps`` carry the variable's ``units``;
        the others are dimensionless or in nats), which a ``metric`` dimension
        mixing K, nats and counts could not.
        Slices of the kept dimensions without any valid point get ``n = 0`` and
        NaN metrics.

    Notes
    -----
    The truth is looked up at each dimension coordinate of the prediction:
    floating-point coordinates (latitude, longitude, ...) match within float32
    rounding (``1e-5 + 1e-6 |x|``), longitudes modulo 360° (a truth on 0…360
    matches a prediction on −180…180), and other coordinates (station names,
    times) must be equal.  Predicted points without a truth are not scored and an
    ``UnmatchedPointsWarning`` says how many; truth points beyond the
    prediction are ignored.  The scores carry the prediction's coordinates.  A
    scalar coordinate of one (e.g. the ``time`` of a prediction made at one time)
    selects the other along that dimension.  A
    forecast (``init_time``, ``lead_time`` and a ``valid_time`` coordinate) is
    compared with the truth at its valid times; keep ``lead_time`` (e.g.
    ``dim=["init_time", "lat", "lon"]``) for scores per lead time.  A point
    is scored when truth, mean and std are all finite; ``n`` counts them.  With
    dask-backed inputs the result is lazy, and the check that some point is valid
    is left to the caller (``n`` is then 0 and the metrics NaN).

    Raises
    ------
    VariableNotFoundError
        A variable is missing from ``pred`` or ``truth``.
    DimensionError, CoordinateError
        Prediction and truth have different dimensions or share no coordinates.
    IncompatibleUnitsError
        ``{var}_mean`` and the truth's ``{var}`` both have a ``units`` attribute and
        they differ (as strings, after whitespace and the common spellings of one
        unit, such as ``K`` and ``kelvin``, are normalised).
    EmptyDataError
        No point has a finite truth (and prediction).

    Warns
    -----
    UnmatchedPointsWarning
        Some predicted points have no truth at their coordinates and are not scored.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> pred = xr.Dataset(
    ...     {"t2m_mean": ("station", [1.0, 2.0, 3.0]), "t2m_std": ("station", [1.0, 1.0, 1.0])}
    ... )
    >>> truth = xr.Dataset({"t2m": ("station", [1.0, 4.0, np.nan])})
    >>> scores = evaluate(pred, truth)
    >>> float(scores.t2m_rmse), float(scores.t2m_mae), int(scores.t2m_n)
    (1.4142135623730951, 1.0, 2)
    >>> float(scores.t2m_coverage_95)
    0.5
    """
    if not isinstance(pred, xr.Dataset):
        raise ConfigError(
            f"pred must be the Dataset returned by xnp.predict ({{var}}_mean, {{var}}_std); "
            f"got {type(pred)}."
        )
    truth_ds = truth_dataset(truth, prediction_variables(pred))
    names = scored_variables(pred, truth_ds, variables)
    out: dict[str, xr.DataArray] = {}
    reduced: set[Hashable] = set()
    for v in names:
        y, mu, sigma = pair(pred, truth_ds, v)
        dims = _reduce_dims(mu.dims, dim)
        reduced.update(dims)
        n = pointwise(score_valid, y, mu, sigma).sum(dims)
        if not _is_lazy(y, mu, sigma) and int(n.sum()) == 0:
            raise EmptyDataError(
                f"{v!r}: no point has both a finite truth and a finite prediction "
                f"({y.size} points compared); nothing to score. Check the selection and "
                "that the prediction covers the observed places and times."
            )
        has = n > 0
        sums = {k: pointwise(fn, y, mu, sigma).sum(dims) for k, fn in SUMMED_SCORES.items()}
        means = {k: s.where(has) / n.where(has) for k, s in sums.items()}
        units = truth_ds[v].attrs.get("units", pred[f"{v}_mean"].attrs.get("units"))
        label = truth_ds[v].attrs.get("long_name", v)
        metrics = {
            "rmse": (np.sqrt(means["se"]), "root-mean-square error", units),
            "mae": (means["ae"], "mean absolute error", units),
            "crps": (means["crps"], "mean continuous ranked probability score", units),
            "nll": (means["nll"], "mean Gaussian negative log-likelihood (nats)", None),
        }
        for p in COVERAGE_LEVELS:
            key = f"coverage_{round(100 * p)}"
            what = f"fraction inside the central {round(100 * p)} % predictive interval"
            metrics[key] = (means[key], what, "1")
        metrics["n"] = (n.astype(np.int64), "number of points scored", "1")
        for metric in METRICS:
            values, what, unit = metrics[metric]
            attrs = {"long_name": f"{what} of {label}"}
            if unit is not None:
                attrs["units"] = unit
            out[f"{v}_{metric}"] = values.rename(f"{v}_{metric}").assign_attrs(attrs)
    attrs = {
        "xnp_evaluated_variables": " ".join(names),
        "xnp_reduced_dims": " ".join(str(d) for d in sorted(reduced, key=str)),
    }
    return xr.Dataset(out, attrs=attrs)


def pit(
    pred: xr.Dataset,
    truth: xr.Dataset | xr.DataArray,
    *,
    variables: str | Sequence[str] | None = None,
) -> xr.Dataset:
    """Probability integral transform ``Φ((y − μ)/σ)`` of every point.

    Calibrated predictions give PIT values uniform on [0, 1]; a U shape means
    over-confident (too small) std, a hump under-confident, a slope a biased mean.

    Parameters
    ----------
    pred, truth, variables
        As for :func:`evaluate`.

    Returns
    -------
    Dataset
        ``{var}_pit`` at the predicted points that have a truth (see
        :func:`evaluate`); NaN where the truth or prediction is missing.  Lazy for
        dask-backed inputs.

    Examples
    --------
    >>> import xarray as xr
    >>> pred = xr.Dataset({"v_mean": ("x", [0.0, 0.0]), "v_std": ("x", [1.0, 2.0])})
    >>> pit(pred, xr.Dataset({"v": ("x", [0.0, 2.0])})).v_pit.values.round(3).tolist()
    [0.5, 0.841]
    """
    if not isinstance(pred, xr.Dataset):
        raise ConfigError(f"pred must be a Dataset holding {{var}}_mean/_std; got {type(pred)}.")
    truth_ds = truth_dataset(truth, prediction_variables(pred))
    out = {}
    for v in scored_variables(pred, truth_ds, variables):
        y, mu, sigma = pair(pred, truth_ds, v)
        label = truth_ds[v].attrs.get("long_name", v)
        out[f"{v}_pit"] = pointwise(score_pit, y, mu, sigma).assign_attrs(
            long_name=f"probability integral transform of {label}", units="1"
        )
    return xr.Dataset(out)

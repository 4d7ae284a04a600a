"""Scoring probabilistic predictions against the truth: ``xnp.evaluate``.

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
point (uniform on [0, 1] for calibrated predictions) and :func:`plot_calibration`
draws its histogram and the reliability curve.

The truth is looked up at the prediction's coordinates: floating-point
coordinates match within float32 rounding, longitudes also across the 0…360 and
−180…180 conventions, and other coordinates (station names, times) must be equal.
Latitude and longitude dimensions are matched by what they hold (name, CF standard
name or units), so a prediction on ``lat``/``lon`` scores against a truth on
``latitude``/``longitude``.
Predicted points without a truth are left out with an ``UnmatchedPointsWarning``;
truth beyond the prediction is ignored.  A prediction whose ``{var}_mean`` has other
``units`` than the truth's ``{var}`` raises :class:`~xnp.errors.IncompatibleUnitsError`.

Every score is computed point by point with xarray operations, so dask-backed
inputs give a lazy result.

The function :func:`evaluate` is also ``xnp.evaluate``, so the package attribute
``xnp.evaluate`` is the function, not this module; import the other names from
the module, e.g. ``from xnp.scoring.evaluation import pit, plot_calibration``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from scipy import special

from xnp.data.coords import is_latitude, is_longitude
from xnp.data.normalise import check_same_units
from xnp.errors import (
    ConfigError,
    CoordinateError,
    DimensionError,
    EmptyDataError,
    MissingDependencyError,
    VariableNotFoundError,
    XnpWarning,
)

__all__ = [
    "COVERAGE_LEVELS",
    "METRICS",
    "UnmatchedPointsWarning",
    "evaluate",
    "pit",
    "plot_calibration",
]

#: Nominal levels of the central predictive intervals whose coverage is reported.
COVERAGE_LEVELS = (0.5, 0.9, 0.95)

#: The metrics :func:`evaluate` returns for every variable, in order.
METRICS = ("rmse", "mae", "crps", "nll", "coverage_50", "coverage_90", "coverage_95", "n")

_INV_SQRT_PI = 1.0 / np.sqrt(np.pi)

# Floating-point coordinates of prediction and truth match within
# ``_ATOL + _RTOL * |value|``: far above float32 rounding (6e-8 relative), far below
# any grid spacing (e.g. 1e-5° is about 1 m).
_ATOL = 1e-5
_RTOL = 1e-6


class UnmatchedPointsWarning(XnpWarning):
    """Some predicted points have no truth at their coordinates and are not scored."""


# --------------------------------------------------------------------------- pointwise scores
# Each takes float arrays (truth y, mean mu, std sigma) and returns float64 with NaN
# where the point is not scored (any input missing), so sums over points skip them.


def _prepare(y: Any, mu: Any, sigma: Any) -> tuple[np.ndarray, ...]:
    y, mu, sigma = (np.asarray(a, np.float64) for a in (y, mu, sigma))
    valid = np.isfinite(y) & np.isfinite(mu) & np.isfinite(sigma)
    if np.any(sigma[valid] < 0):
        raise ConfigError(
            "the predictive standard deviation has negative values; it must be ≥ 0. "
            "Check that the `_std` variables really hold standard deviations."
        )
    return y - mu, sigma, valid


def _z(err: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """``err / sigma``, ±inf (or 0 for a zero error) where ``sigma == 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = err / sigma
    degenerate = np.where(err > 0, np.inf, np.where(err < 0, -np.inf, 0.0))
    return np.where(sigma > 0, z, degenerate)


def _score_valid(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    _, _, valid = _prepare(y, mu, sigma)
    return valid.astype(np.float64)


def _score_se(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    err, _, valid = _prepare(y, mu, sigma)
    return np.where(valid, err * err, np.nan)


def _score_ae(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    err, _, valid = _prepare(y, mu, sigma)
    return np.where(valid, np.abs(err), np.nan)


def _score_crps(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    err, sigma, valid = _prepare(y, mu, sigma)
    z = np.where(sigma > 0, _z(err, sigma), 0.0)
    gauss = sigma * (z * (2.0 * special.ndtr(z) - 1.0) + 2.0 * _phi(z) - _INV_SQRT_PI)
    crps = np.where(sigma > 0, gauss, np.abs(err))
    return np.where(valid, crps, np.nan)


def _score_nll(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    err, sigma, valid = _prepare(y, mu, sigma)
    safe = np.where(sigma > 0, sigma, 1.0)
    nll = 0.5 * np.log(2.0 * np.pi * safe * safe) + 0.5 * (err / safe) ** 2
    nll = np.where(sigma > 0, nll, np.inf)
    return np.where(valid, nll, np.nan)


def _coverage_score(level: float):
    half_width = float(special.ndtri(0.5 + 0.5 * level))

    def score(y: Any, mu: Any, sigma: Any) -> np.ndarray:
        err, sigma, valid = _prepare(y, mu, sigma)
        inside = (np.abs(err) <= half_width * sigma).astype(np.float64)
        return np.where(valid, inside, np.nan)

    return score


def _score_pit(y: Any, mu: Any, sigma: Any) -> np.ndarray:
    err, sigma, valid = _prepare(y, mu, sigma)
    return np.where(valid, special.ndtr(_z(err, sigma)), np.nan)


def _phi(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)


_SUMMED = {
    "se": _score_se,
    "ae": _score_ae,
    "crps": _score_crps,
    "nll": _score_nll,
    **{f"coverage_{round(100 * p)}": _coverage_score(p) for p in COVERAGE_LEVELS},
}


def _pointwise(fn: Any, y: xr.DataArray, mu: xr.DataArray, sigma: xr.DataArray) -> xr.DataArray:
    """Apply a numpy score point by point (lazily for dask-backed inputs)."""
    return xr.apply_ufunc(
        fn, y, mu, sigma, dask="parallelized", output_dtypes=[np.float64], keep_attrs=False
    )


# --------------------------------------------------------------------------- pairing inputs


def _prediction_variables(pred: xr.Dataset) -> list[str]:
    names = [str(n) for n in pred.data_vars]
    return [n[: -len("_mean")] for n in names if n.endswith("_mean") and f"{n[:-5]}_std" in names]


def _truth_dataset(truth: xr.Dataset | xr.DataArray, predicted: list[str]) -> xr.Dataset:
    if isinstance(truth, xr.Dataset):
        return truth
    if not isinstance(truth, xr.DataArray):
        raise ConfigError(f"truth must be an xarray Dataset or DataArray; got {type(truth)}.")
    if truth.name is None:
        if len(predicted) != 1:
            raise ConfigError(
                f"the truth DataArray has no name and the prediction holds {predicted}; "
                "name it after the variable it observes, e.g. truth.rename('t2m')."
            )
        return truth.to_dataset(name=predicted[0])
    return truth.to_dataset()


def _resolve(
    pred: xr.Dataset, truth: xr.Dataset, variables: str | Sequence[str] | None
) -> list[str]:
    predicted = _prediction_variables(pred)
    if variables is None:
        names = [v for v in predicted if v in truth.data_vars]
        if not names:
            raise VariableNotFoundError(
                f"no variable is both predicted and observed: the prediction holds "
                f"{predicted} (as '{{var}}_mean'/'{{var}}_std') and the truth holds "
                f"{[str(v) for v in truth.data_vars]}. Rename one to match, or pass "
                "variables=..."
            )
        return names
    names = [variables] if isinstance(variables, str) else list(variables)
    for v in names:
        if v not in predicted:
            raise VariableNotFoundError(
                f"the prediction has no {v!r}: it needs '{v}_mean' and '{v}_std'; its data "
                f"variables are {[str(n) for n in pred.data_vars]}."
            )
        if v not in truth.data_vars:
            raise VariableNotFoundError(
                f"the truth has no variable {v!r}; its data variables are "
                f"{[str(n) for n in truth.data_vars]}."
            )
    return names


def _match_scalar_coords(a: xr.DataArray, b: xr.DataArray) -> xr.DataArray:
    """Select ``b`` at each scalar coordinate of ``a`` that is a dimension of ``b``.

    Floating-point coordinates match within float32 rounding (longitudes modulo
    360°, see :func:`_positions`); other coordinates must be equal.
    """
    for name, coord in a.coords.items():
        if coord.ndim != 0 or name not in b.coords:
            continue
        periodic = is_longitude(coord) or is_longitude(b[name])
        if name in b.dims:
            pos = _positions(np.atleast_1d(coord.values), b[name].values, periodic=periodic)
            if pos[0] < 0:
                raise CoordinateError(
                    f"the prediction is for {name}={coord.values} but the truth has no such "
                    f"{name}; its {name} holds {_span(b.coords.to_dataset(), name)}."
                )
            b = b.isel({name: int(pos[0])}).assign_coords({name: coord.variable})
        elif b[name].ndim == 0:
            wanted, have = np.atleast_1d(coord.values), np.atleast_1d(b[name].values)
            if _positions(wanted, have, periodic=periodic)[0] < 0:
                raise CoordinateError(
                    f"the prediction and the truth are for different {name}: "
                    f"{coord.values} and {b[name].values}."
                )
    return b


def _same_dim_names(mu: xr.DataArray, y: xr.DataArray) -> xr.DataArray:
    """``y`` with its latitude/longitude dims renamed to the prediction's names.

    A prediction on a grid given as ``{"lat": ..., "lon": ...}`` is then scored
    against a truth whose dims are ``latitude``/``longitude`` (or the reverse).
    Only a dimension coordinate recognised as latitude (longitude) on both sides,
    one on each, is renamed.
    """
    renames = {}
    for is_role in (is_latitude, is_longitude):
        # the prediction's dimension or scalar (one selected row or point) coordinate
        ours = [c for c in mu.coords if c not in y.dims and (c in mu.dims or mu[c].ndim == 0)
                and is_role(mu[c])]  # fmt: skip
        theirs = [d for d in y.dims if d not in mu.dims and d in y.coords and is_role(y[d])]
        if len(ours) == 1 and len(theirs) == 1 and ours[0] not in y.coords:
            renames[theirs[0]] = ours[0]
    return y.rename(renames) if renames else y


def _is_float_pair(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two coordinate arrays are numeric and at least one is floating point."""
    kinds = {a.dtype.kind, b.dtype.kind}
    return kinds <= {"i", "u", "f"} and "f" in kinds


def _positions(wanted: np.ndarray, have: np.ndarray, *, periodic: bool = False) -> np.ndarray:
    """Position in ``have`` of each value of ``wanted``; -1 where there is none.

    Floating-point values match the nearest value of ``have`` within
    ``_ATOL + _RTOL * |value|`` (float32 rounding of degrees, metres or hours is
    far smaller), capped below half the spacing of ``have`` so that no two values
    of ``have`` are ever within tolerance of one value.  With ``periodic`` the
    values are longitudes compared modulo 360°, so 0…360 and −180…180 match.
    Other values (strings, integers, datetimes) must be equal.
    """
    wanted, have = np.asarray(wanted), np.asarray(have)
    if not _is_float_pair(wanted, have):
        index = pd.Index(have)
        first = np.flatnonzero(~index.duplicated())  # the first of repeated values
        pos = index[first].get_indexer(wanted)
        return np.where(pos >= 0, first[np.maximum(pos, 0)], -1) if first.size else pos
    w = wanted.astype(np.float64)
    tol = _ATOL + _RTOL * np.abs(w)
    index = np.flatnonzero(np.isfinite(have))
    values = have[index].astype(np.float64)
    if periodic:
        w, values = np.mod(w, 360.0), np.mod(values, 360.0)
        values = np.concatenate([values - 360.0, values, values + 360.0])
        index = np.tile(index, 3)
    if values.size == 0:
        return np.full(w.shape, -1, dtype=np.intp)
    order = np.argsort(values, kind="stable")
    values, index = values[order], index[order]
    spacing = np.diff(values)
    spacing = spacing[spacing > 0]
    if spacing.size:
        tol = np.minimum(tol, 0.49 * spacing.min())
    right = np.clip(np.searchsorted(values, w), 0, values.size - 1)
    left = np.clip(right - 1, 0, values.size - 1)
    with np.errstate(invalid="ignore"):
        nearest = np.where(np.abs(values[left] - w) <= np.abs(values[right] - w), left, right)
        found = np.abs(values[nearest] - w) <= tol
    return np.where(found, index[nearest], -1)


def _time_dim(obj: xr.DataArray) -> Hashable | None:
    """The dimension of ``obj`` indexed by datetimes (None if not exactly one)."""
    found = [d for d in obj.dims if d in obj.indexes and _is_datetime(obj[d].values)]
    return found[0] if len(found) == 1 else None


def _is_datetime(values: np.ndarray) -> bool:
    if np.issubdtype(values.dtype, np.datetime64):
        return True
    return values.dtype == object and values.size > 0 and hasattr(values.flat[0], "calendar")


def _at_valid_times(mu: xr.DataArray, y: xr.DataArray) -> xr.DataArray:
    """The truth at a forecast's ``valid_time`` (``init_time`` + ``lead_time``).

    Valid times the truth does not cover give NaN (those points are not scored).
    """
    if "valid_time" not in mu.coords or "valid_time" in mu.dims:
        return y  # not a forecast layout
    time = _time_dim(y)
    if time is None:
        return y
    valid = mu["valid_time"].reset_coords(drop=True)
    wanted = np.unique(valid.values.ravel())
    if np.intersect1d(wanted, y[time].values).size == 0:
        raise CoordinateError(
            f"the forecast is valid from {wanted.min()} to {wanted.max()}, but the truth's "
            f"{time} runs from {y[time].values.min()} to {y[time].values.max()}: no overlap."
        )
    if time in y.indexes and not y.indexes[time].is_unique:
        raise DimensionError(
            f"the truth's {time!r} coordinate has duplicate values, so a forecast's valid "
            "times cannot be looked up in it; make it unique (e.g. "
            f"truth.drop_duplicates({time!r})) before evaluating."
        )
    out = y.reindex({time: wanted}).sel({time: valid})
    return out.drop_vars(time)


def _check_units(mu: xr.DataArray, y: xr.DataArray, v: str) -> None:
    """Raise :class:`~xnp.errors.IncompatibleUnitsError` if ``v``'s units differ.

    Only checked when both the prediction's ``{v}_mean`` and the truth's ``{v}``
    state ``units``; spellings of one unit (``K``, ``kelvin``) are equal, as for
    the context data of :func:`xnp.predict`.
    """
    pred_units, truth_units = mu.attrs.get("units"), y.attrs.get("units")
    if pred_units is None or truth_units is None:
        return
    check_same_units(v, str(pred_units), str(truth_units), (f"prediction ({v}_mean)", "truth"))


def _pair(
    pred: xr.Dataset, truth: xr.Dataset, v: str
) -> tuple[xr.DataArray, xr.DataArray, xr.DataArray]:
    """The truth, mean and std of ``v`` on the prediction's matched points.

    The truth is looked up at each dimension coordinate of the prediction (see
    :func:`_positions`); predicted points without a truth are left out with an
    ``UnmatchedPointsWarning``, and a :class:`~xnp.errors.CoordinateError` is
    raised when no point matches.  Truth points beyond the prediction are ignored.
    """
    mu, sigma, y = pred[f"{v}_mean"], pred[f"{v}_std"], truth[v]
    _check_units(mu, y, v)
    y = _same_dim_names(mu, _at_valid_times(mu, y))
    y = _match_scalar_coords(mu, y)
    mu = _match_scalar_coords(y, mu)
    sigma = _match_scalar_coords(y, sigma)
    if set(mu.dims) != set(y.dims) or set(sigma.dims) != set(mu.dims):
        raise DimensionError(
            f"{v!r}: the prediction has dims {mu.dims} and the truth {y.dims}; they must "
            "match (select the truth at the predicted times, or predict at the truth's "
            "coordinates)."
        )
    pick_pred: dict[Hashable, slice | np.ndarray] = {}
    pick_truth: dict[Hashable, slice | np.ndarray] = {}
    missing: list[str] = []
    scored = dict(mu.sizes)
    for d in mu.dims:
        if d not in mu.indexes or d not in y.indexes:
            if mu.sizes[d] != y.sizes[d]:
                raise DimensionError(
                    f"{v!r}: the prediction {dict(mu.sizes)} and the truth {dict(y.sizes)} "
                    f"cannot be aligned: {d!r} has different sizes and no coordinate on one "
                    "side. Give both the same dimension coordinates."
                )
            continue
        if not y.indexes[d].is_unique:
            raise DimensionError(
                f"{v!r}: the truth's {d!r} coordinate has duplicate values; make it unique "
                "(e.g. truth.drop_duplicates(...)) before evaluating."
            )
        periodic = is_longitude(mu[d]) or is_longitude(y[d])
        pos = _positions(mu[d].values, y[d].values, periodic=periodic)
        matched = np.flatnonzero(pos >= 0)
        if matched.size == 0:
            raise CoordinateError(
                f"{v!r}: no {d!r} coordinate value of the prediction is in the truth "
                f"(pred: {_span(mu, d)}, truth: {_span(y, d)}); check that the truth "
                f"covers the predicted {d}."
            )
        if matched.size < pos.size:
            missing.append(
                f"{pos.size - matched.size} of the {pos.size} predicted {d} values have no "
                f"match in the truth (pred: {_span(mu, d)}, truth: {_span(y, d)})"
            )
        pick_pred[d], pick_truth[d] = _indexer(matched), _indexer(pos[matched])
        scored[d] = matched.size
    if missing:
        warnings.warn(
            f"{v!r}: only {math.prod(scored.values())} of the {mu.size} predicted points have "
            f"a truth at their coordinates and are scored; {'; '.join(missing)}. "
            "Floating-point coordinates match within float32 rounding and longitudes modulo "
            "360°; select the prediction where the truth is known to score every point.",
            UnmatchedPointsWarning,
            stacklevel=3,
        )
    mu, sigma, y = mu.isel(pick_pred), sigma.isel(pick_pred), y.isel(pick_truth)
    # the prediction's coordinates win: the truth's may differ by rounding or convention
    # (an index over several coordinates, as a stacked grid's MultiIndex, goes whole)
    indexed = [n for d in pick_truth for n in _index_coords(y, d)]
    shared = [c for c in y.coords if c in mu.coords and c not in y.dims and c not in indexed]
    y = y.drop_vars(list(dict.fromkeys(shared + indexed)))
    names = list(dict.fromkeys(n for d in pick_truth for n in [d, *_index_coords(mu, d)]))
    y = y.assign_coords(mu.coords.to_dataset()[names].coords)
    return y, mu, sigma.transpose(*mu.dims)


def _index_coords(da: xr.DataArray, dim: str) -> list[str]:
    """The coordinates that share ``dim``'s index (its levels, for a MultiIndex)."""
    return list(da.xindexes.get_all_coords(dim)) if dim in da.xindexes else []


def _indexer(positions: np.ndarray) -> slice | np.ndarray:
    """``positions`` as a slice when they are consecutive (no copy of the data)."""
    if positions.size and np.array_equal(positions, np.arange(positions[0], positions[-1] + 1)):
        return slice(int(positions[0]), int(positions[-1]) + 1)
    return positions


def _span(obj: xr.Dataset | xr.DataArray, d: Hashable) -> str:
    if d not in obj.coords or obj[d].size == 0:
        return f"{obj.sizes.get(d, 0)} values"
    values = obj[d].values
    return f"{values.size} values, {values[0]} … {values[-1]}"


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
        :data:`METRICS` (``t2m_rmse``, ``t2m_crps``, ..., ``t2m_n``) over the kept
        dimensions.  This flat naming mirrors the ``{var}_mean``/``{var}_std`` of
        the predictions and gives every array a single unit (``rmse``, ``mae`` and
        ``crps`` carry the variable's ``units``; the others are dimensionless or
        in nats), which a ``metric`` dimension mixing K, nats and counts could not.
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
    truth_ds = _truth_dataset(truth, _prediction_variables(pred))
    names = _resolve(pred, truth_ds, variables)
    out: dict[str, xr.DataArray] = {}
    reduced: set[Hashable] = set()
    for v in names:
        y, mu, sigma = _pair(pred, truth_ds, v)
        dims = _reduce_dims(mu.dims, dim)
        reduced.update(dims)
        n = _pointwise(_score_valid, y, mu, sigma).sum(dims)
        if not _is_lazy(y, mu, sigma) and int(n.sum()) == 0:
            raise EmptyDataError(
                f"{v!r}: no point has both a finite truth and a finite prediction "
                f"({y.size} points compared); nothing to score. Check the selection and "
                "that the prediction covers the observed places and times."
            )
        has = n > 0
        sums = {k: _pointwise(fn, y, mu, sigma).sum(dims) for k, fn in _SUMMED.items()}
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
    truth_ds = _truth_dataset(truth, _prediction_variables(pred))
    out = {}
    for v in _resolve(pred, truth_ds, variables):
        y, mu, sigma = _pair(pred, truth_ds, v)
        label = truth_ds[v].attrs.get("long_name", v)
        out[f"{v}_pit"] = _pointwise(_score_pit, y, mu, sigma).assign_attrs(
            long_name=f"probability integral transform of {label}", units="1"
        )
    return xr.Dataset(out)


def plot_calibration(
    pred: xr.Dataset,
    truth: xr.Dataset | xr.DataArray,
    ax: Sequence[Any] | None = None,
    *,
    variables: str | Sequence[str] | None = None,
    bins: int = 10,
) -> tuple[Any, Any]:
    """Draw the PIT histogram and the reliability curve of the predictions.

    Left: histogram of the PIT values (:func:`pit`) as a density, flat at 1 for
    calibrated predictions.  Right: observed coverage of the central predictive
    intervals against their nominal level (5 % … 95 %), on the diagonal for
    calibrated predictions (below it: over-confident).  Needs matplotlib.

    Parameters
    ----------
    pred, truth, variables
        As for :func:`evaluate`; each variable is drawn in its own colour.
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

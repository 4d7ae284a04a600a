"""Pairing a prediction with the truth: the points :func:`xnp.evaluate` scores.

``pair`` gives the truth, mean and std of one variable on the prediction's
points that have a truth.  The truth is looked up at the prediction's coordinates:
floating-point coordinates match within float32 rounding, longitudes also across
the 0…360 and −180…180 conventions, and other coordinates (station names, times)
must be equal.  Latitude and longitude dimensions are matched by what they hold
(name, CF standard name or units), a scalar coordinate of one side selects the
other, and a forecast is compared with the truth at its valid times.  Predicted
points without a truth are left out with an :class:`UnmatchedPointsWarning`; a
prediction whose ``{var}_mean`` has other ``units`` than the truth's ``{var}``
raises :class:`~xnp.errors.IncompatibleUnitsError`.

This module imports :mod:`xnp.data`, :mod:`xnp.errors`, xarray, pandas and numpy.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Sequence

import numpy as np
import pandas as pd
import xarray as xr

from xnp.data.coords import is_latitude, is_longitude
from xnp.data.normalise import check_same_units
from xnp.data.times import is_datetime
from xnp.errors import (
    ConfigError,
    CoordinateError,
    DimensionError,
    VariableNotFoundError,
    XnpWarning,
)

__all__ = [
    "UnmatchedPointsWarning",
    "pair",
    "prediction_variables",
    "scored_variables",
    "truth_dataset",
]

# Floating-point coordinates of prediction and truth match within
# ``_ATOL + _RTOL * |value|``: far above float32 rounding (6e-8 relative), far below
# any grid spacing (e.g. 1e-5° is about 1 m).
_ATOL = 1e-5
_RTOL = 1e-6


class UnmatchedPointsWarning(XnpWarning):
    """Some predicted points have no truth at their coordinates and are not scored."""


def prediction_variables(pred: xr.Dataset) -> list[str]:
    """The variables a prediction holds, as ``{var}_mean`` and ``{var}_std`` pairs.

    Parameters
    ----------
    pred : Dataset
        A prediction.

    Returns
    -------
    list of str
        The names ``var``, in the order of the ``{var}_mean`` data variables.
    """
    names = [str(n) for n in pred.data_vars]
    return [n[: -len("_mean")] for n in names if n.endswith("_mean") and f"{n[:-5]}_std" in names]


def truth_dataset(truth: xr.Dataset | xr.DataArray, predicted: list[str]) -> xr.Dataset:
    """The truth as a Dataset: a DataArray becomes its only variable.

    Parameters
    ----------
    truth : Dataset or DataArray
        The observed values; an unnamed DataArray is taken to observe the only
        predicted variable.
    predicted : list of str
        The predicted variables (:func:`prediction_variables`).

    Returns
    -------
    Dataset
        ``truth`` itself when it is a Dataset.

    Raises
    ------
    ConfigError
        If ``truth`` is not xarray, or an unnamed DataArray while several variables
        are predicted.
    """
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


def scored_variables(
    pred: xr.Dataset, truth: xr.Dataset, variables: str | Sequence[str] | None
) -> list[str]:
    """The variables to score: those asked for, or every one predicted and observed.

    Parameters
    ----------
    pred : Dataset
        The prediction (``{var}_mean`` and ``{var}_std``).
    truth : Dataset
        The truth (:func:`truth_dataset`).
    variables : str or sequence of str or None
        The variables asked for; None for every variable both predicted and observed.

    Returns
    -------
    list of str
        The variable names.

    Raises
    ------
    VariableNotFoundError
        If no variable is both predicted and observed, or one asked for is missing
        from either side.
    """
    predicted = prediction_variables(pred)
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
    found = [d for d in obj.dims if d in obj.indexes and is_datetime(obj[d].values)]
    return found[0] if len(found) == 1 else None


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


def pair(
    pred: xr.Dataset, truth: xr.Dataset, v: str
) -> tuple[xr.DataArray, xr.DataArray, xr.DataArray]:
    """The truth, mean and std of ``v`` on the prediction's matched points.

    The truth is looked up at each dimension coordinate of the prediction (see
    the module's description); predicted points without a truth are left out with
    an ``UnmatchedPointsWarning``, and a :class:`~xnp.errors.CoordinateError` is
    raised when no point matches.  Truth points beyond the prediction are ignored.

    Parameters
    ----------
    pred : Dataset
        The prediction, holding ``{v}_mean`` and ``{v}_std``.
    truth : Dataset
        The truth, holding ``{v}``.
    v : str
        The variable.

    Returns
    -------
    (DataArray, DataArray, DataArray)
        The truth, mean and std on the same points, with the prediction's
        coordinates and dimension order.

    Raises
    ------
    IncompatibleUnitsError
        If ``{v}_mean`` and the truth's ``{v}`` state different ``units``.
    DimensionError, CoordinateError
        If prediction and truth have different dimensions or share no coordinates.

    Warns
    -----
    UnmatchedPointsWarning
        Some predicted points have no truth at their coordinates and are not scored.
        The warning points at the caller of the function that calls :func:`pair`
        (``stacklevel=3``), the user's call of :func:`xnp.evaluate`.
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

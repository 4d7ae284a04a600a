"""Cross-validation of spatial predictions on station (point) data.

Neighbouring stations are correlated, so holding out random stations rewards
methods that copy their neighbours and overstates skill far from stations.
:class:`BlockKFold` holds out whole latitude/longitude blocks instead; it yields
``(train_index, test_index)`` pairs of positions along the station dimension.
:func:`cross_validate` runs any predict-style callable on each fold and scores it
with :func:`xnp.evaluate`; :func:`cross_val_predict` returns the
out-of-fold predictions themselves.

Data layout: a Dataset (or DataArray) with one point dimension (``station``,
``cell``, ...) carrying latitude/longitude coordinates, optionally with a time
dimension.  A grid can be cross-validated as points after
``ds.stack(cell=("lat", "lon"))``.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import xarray as xr

from xnp.data.coords import find_coords, latlon, resolve_variables
from xnp.errors import ConfigError, DimensionError, EmptyDataError
from xnp.scoring.evaluation import evaluate

__all__ = ["BlockKFold", "LeaveOneOut", "cross_val_predict", "cross_validate"]

PredictFn = Callable[[xr.Dataset, xr.Dataset], xr.Dataset]


def _point_dim(data: xr.Dataset | xr.DataArray, variable: str | None = None) -> tuple[str, Any]:
    layout = find_coords(data, variable)
    if layout.kind == "projected" or len(layout.point_dims) != 1:
        raise DimensionError(
            f"cross-validation works on point data with one spatial dimension; these data "
            f"have spatial dims {layout.point_dims} ({layout.kind} layout). Stack a grid "
            "into points first, e.g. ds.stack(cell=('lat', 'lon'))."
        )
    return layout.point_dims[0], layout


def _point_latlon(data: xr.Dataset | xr.DataArray) -> tuple[np.ndarray, np.ndarray]:
    _, layout = _point_dim(data)
    lat, lon = latlon(data, layout)
    return lat.ravel(), lon.ravel()


class BlockKFold:
    """K-fold cross-validation over latitude/longitude blocks.

    Points are grouped into blocks of a regular latitude/longitude grid; every
    block goes whole into one test fold.  Blocks are dealt to folds one at a time,
    largest first, each to the fold that has the fewest points so far, so folds
    hold about the same number of points (they differ by at most the size of the
    largest block, usually far less).  ``shuffle`` randomises the order of blocks
    of equal size, and so which blocks share a fold.

    Parameters
    ----------
    spacing_deg : float or (float, float), optional
        Block size in degrees, ``(lat, lon)`` or one for both.  Blocks are aligned
        on multiples of the spacing from (−90°, −180°).
    n_blocks : int or (int, int), optional
        Number of blocks along latitude and longitude over the data's extent
        (instead of ``spacing_deg``; give exactly one of the two).
    n_splits : int
        Number of folds (at least 2, at most the number of non-empty blocks).
    shuffle : bool
        Deal blocks to folds in random order.
    seed : int
        Seed of the shuffle.

    Notes
    -----
    Longitudes are wrapped to [−180°, 180°), so with ``n_blocks`` a station set
    crossing the antimeridian spans the whole longitude range; use
    ``spacing_deg`` there.  Blocks are rectangles in degrees: near the poles
    they are narrow in distance.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> lat, lon = rng.uniform(40, 50, 100), rng.uniform(0, 10, 100)
    >>> cv = BlockKFold(spacing_deg=2.0, n_splits=4)
    >>> folds = list(cv.split_points(lat, lon))
    >>> [len(test) for _, test in folds]
    [25, 25, 25, 25]
    >>> sorted(np.concatenate([test for _, test in folds]).tolist()) == list(range(100))
    True
    """

    def __init__(
        self,
        spacing_deg: float | tuple[float, float] | None = None,
        *,
        n_blocks: int | tuple[int, int] | None = None,
        n_splits: int = 5,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if (spacing_deg is None) == (n_blocks is None):
            raise ConfigError("give exactly one of spacing_deg and n_blocks.")
        if spacing_deg is not None:
            spacing = _pair(spacing_deg, "spacing_deg", np.float64)
            if not np.all(spacing > 0):
                raise ConfigError(f"spacing_deg must be positive; got {spacing_deg!r}.")
            self.spacing_deg: tuple[float, float] | None = (float(spacing[0]), float(spacing[1]))
            self.n_blocks: tuple[int, int] | None = None
        else:
            counts = _pair(n_blocks, "n_blocks", None)
            if not (np.issubdtype(counts.dtype, np.integer) and np.all(counts >= 1)):
                raise ConfigError(f"n_blocks must be positive integers; got {n_blocks!r}.")
            self.spacing_deg = None
            self.n_blocks = (int(counts[0]), int(counts[1]))
        if (
            not isinstance(n_splits, numbers.Integral)
            or isinstance(n_splits, bool)
            or n_splits < 2
        ):
            raise ConfigError(f"n_splits must be an integer ≥ 2; got {n_splits!r}.")
        self.n_splits = int(n_splits)
        self.shuffle = shuffle
        self.seed = seed

    def get_n_splits(self) -> int:
        """Number of folds."""
        return self.n_splits

    def blocks(self, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
        """Block label (an integer) of every point; equal labels share a block.

        Examples
        --------
        >>> BlockKFold(spacing_deg=10.0).blocks(np.array([1.0, 9.0, 11.0]), np.zeros(3))
        array([0, 0, 1])
        """
        lat = np.asarray(lat, np.float64).ravel()
        lon = (np.asarray(lon, np.float64).ravel() + 180.0) % 360.0 - 180.0
        if lat.shape != lon.shape:
            raise ConfigError(f"lat and lon differ in size: {lat.size} and {lon.size}.")
        if self.spacing_deg is not None:
            i = np.floor((lat + 90.0) / self.spacing_deg[0])
            j = np.floor((lon + 180.0) / self.spacing_deg[1])
        else:
            assert self.n_blocks is not None
            i = _bin(lat, self.n_blocks[0])
            j = _bin(lon, self.n_blocks[1])
        _, labels = np.unique(np.stack([i, j], -1), axis=0, return_inverse=True)
        return labels.reshape(-1)

    def split_points(
        self, lat: np.ndarray, lon: np.ndarray
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(train_index, test_index)`` for points at ``lat``, ``lon`` (degrees)."""
        labels = self.blocks(lat, lon)
        sizes = np.bincount(labels)
        if sizes.size < self.n_splits:
            raise ConfigError(
                f"only {sizes.size} non-empty blocks for n_splits={self.n_splits}; use smaller "
                "blocks or fewer splits."
            )
        order = np.arange(sizes.size)
        if self.shuffle:
            order = np.random.default_rng(self.seed).permutation(sizes.size)
        order = order[np.argsort(-sizes[order], kind="stable")]  # largest blocks first
        fold_of_block = np.empty(sizes.size, np.int64)
        load = np.zeros(self.n_splits, np.int64)
        for block in order:
            fold = int(np.argmin(load))  # the emptiest fold (lowest index on ties)
            fold_of_block[block] = fold
            load[fold] += sizes[block]
        fold_of_point = fold_of_block[labels]
        for fold in range(self.n_splits):
            test = np.flatnonzero(fold_of_point == fold)
            yield np.flatnonzero(fold_of_point != fold), test

    def split(self, data: xr.Dataset | xr.DataArray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(train_index, test_index)``: positions along the point dimension of ``data``."""
        return self.split_points(*_point_latlon(data))


def _pair(value: Any, name: str, dtype: Any) -> np.ndarray:
    """One value or a (latitude, longitude) pair, as an array of two."""
    try:
        array = np.asarray(value, dtype)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{name} must be a number or a pair of numbers; got {value!r}.") from err
    if array.size not in (1, 2) or array.ndim > 1:
        raise ConfigError(
            f"{name} must be one number or a (latitude, longitude) pair; got {value!r}."
        )
    return np.broadcast_to(array.ravel(), (2,))


def _bin(values: np.ndarray, n: int) -> np.ndarray:
    """Index of ``n`` equal bins spanning the values' range (the maximum in the last)."""
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    width = (hi - lo) / n if hi > lo else 1.0
    return np.clip(np.floor((values - lo) / width), 0, n - 1)


class LeaveOneOut:
    """Hold out one point at a time (``n_splits`` equals the number of points).

    Examples
    --------
    >>> [test.tolist() for _, test in LeaveOneOut().split_points(np.zeros(3), np.zeros(3))]
    [[0], [1], [2]]
    """

    def split_points(
        self, lat: np.ndarray, lon: np.ndarray
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(train_index, test_index)`` with one test point each."""
        n = np.asarray(lat).size
        everything = np.arange(n)
        for i in range(n):
            yield np.delete(everything, i), everything[i : i + 1]

    def split(self, data: xr.Dataset | xr.DataArray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(train_index, test_index)``: positions along the point dimension of ``data``."""
        return self.split_points(*_point_latlon(data))


def _folds(
    predictor_fn: PredictFn, data: xr.Dataset, variables: list[str], cv: Any
) -> Iterator[tuple[np.ndarray, xr.Dataset]]:
    dim, _ = _point_dim(data, variables[0])
    template = data.drop_vars(variables)  # never the values being predicted
    for train, test in cv.split(data):
        if len(test) == 0:
            continue
        if len(train) == 0:
            raise ConfigError("a fold leaves no training point; use more points or folds.")
        targets = template.isel({dim: test})
        pred = predictor_fn(data.isel({dim: train}), targets)
        if not isinstance(pred, xr.Dataset):
            raise ConfigError(
                f"predictor_fn must return the Dataset of xnp.predict ({{var}}_mean, "
                f"{{var}}_std); got {type(pred)}."
            )
        yield test, _in_order_of(pred, targets, dim)


def _in_order_of(pred: xr.Dataset, targets: xr.Dataset, dim: str) -> xr.Dataset:
    """``pred`` with its points in the order of ``targets`` (matched by label).

    A predictor may return its points in another order; the folds are put back
    together by position, so they are matched here by the point dimension's index
    when both have one (without an index the order is taken as given).
    """
    if dim not in pred.dims or dim not in pred.indexes or dim not in targets.indexes:
        return pred
    want, have = targets.indexes[dim], pred.indexes[dim]
    if have.equals(want):
        return pred
    where = have.get_indexer(want) if have.is_unique else np.full(len(want), -1)
    if len(have) != len(want) or (where < 0).any():
        raise ConfigError(
            f"predictor_fn returned points along {dim!r} that are not the {len(want)} target "
            "points it was given; it must predict at exactly the targets."
        )
    return pred.isel({dim: where})


def _prepare(data: xr.Dataset | xr.DataArray, variable: str | Sequence[str] | None):
    if isinstance(data, xr.DataArray):
        data = data.to_dataset(name=str(data.name) if data.name is not None else "value")
    if variable is None:
        variables = [str(v) for v in data.data_vars]
    else:
        variables = resolve_variables(data, variable)
    # Other data variables along the points (covariates such as elevation, which a
    # model reads at the targets too) travel as coordinates: a predictor then sees
    # only the scored variables as data, as it would predict every data variable.
    dim, _ = _point_dim(data, variables[0])
    extra = {v: data[v] for v in data.data_vars if v not in variables and dim in data[v].dims}
    return data[variables].assign_coords(extra), variables


def cross_val_predict(
    predictor_fn: PredictFn,
    data: xr.Dataset | xr.DataArray,
    variable: str | Sequence[str] | None,
    cv: Any,
) -> xr.Dataset:
    """Out-of-fold predictions: each point predicted by the fold that held it out.

    Parameters
    ----------
    predictor_fn, data, variable, cv
        As for :func:`cross_validate`.

    Returns
    -------
    Dataset
        The predictions of every fold, put back in the order of ``data``'s point
        dimension (points never held out are left out).

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> from xnp.baselines import InverseDistanceWeighting
    >>> obs = xr.Dataset(
    ...     {"t": ("station", [1.0, 2.0, 3.0])},
    ...     coords={"lat": ("station", [0.0, 0.0, 0.0]), "lon": ("station", [0.0, 1.0, 2.0])},
    ... )
    >>> pred = cross_val_predict(InverseDistanceWeighting().predict, obs, "t", LeaveOneOut())
    >>> pred.t_mean.values.round(2).tolist()
    [2.2, 2.0, 1.8]
    """
    data, variables = _prepare(data, variable)
    dim, _ = _point_dim(data, variables[0])
    folds = list(_folds(predictor_fn, data, variables, cv))
    if not folds:
        raise ConfigError("cv yielded no fold with test points.")
    tests, preds = zip(*folds, strict=True)
    order = np.argsort(np.concatenate(tests), kind="stable")
    return xr.concat(preds, dim=dim).isel({dim: order})


def cross_validate(
    predictor_fn: PredictFn,
    data: xr.Dataset | xr.DataArray,
    variable: str | Sequence[str] | None,
    cv: Any,
    *,
    dim: str | Sequence[str] | None = None,
) -> xr.Dataset:
    """Score a predictor on each fold of ``cv`` and on all held-out points together.

    Parameters
    ----------
    predictor_fn : callable
        ``predictor_fn(context, targets) -> Dataset`` of ``{var}_mean``/``{var}_std``,
        e.g. ``lambda ctx, tgt: xnp.predict(model, ctx, tgt)`` or a baseline's
        ``.predict``.  ``context`` is ``data`` at the training points, ``targets``
        the coordinates of the test points (no values).  The other data variables
        of ``data`` along the points (covariates such as elevation) come with both
        as coordinates.
    data : Dataset or DataArray
        Point data with one spatial dimension (e.g. ``station``) and lat/lon
        coordinates along it; optionally a time dimension.  Never modified.
    variable : str or list of str, optional
        Variable(s) given to the predictor and scored; default every data variable.
    cv : BlockKFold, LeaveOneOut or similar
        Anything with ``split(data)`` yielding ``(train_index, test_index)``.
    dim : str or list of str, optional
        Dimensions each score is averaged over (default all); see
        :func:`xnp.evaluate`.

    Returns
    -------
    Dataset
        The metrics of :func:`~xnp.evaluate` along a ``fold`` dimension
        whose labels are ``"0"``, ``"1"``, ... for the folds and ``"pooled"`` for all
        out-of-fold predictions scored together (not the mean of the folds).  When
        the point dimension is kept (``dim="time"``: scores per station), a fold's
        scores are NaN (``n = 0``) at the stations it did not hold out.  Points that
        no fold holds out are not scored; a fold whose held-out points have no valid
        truth gets ``n = 0`` and NaN scores.  The predictions of a fold are matched to
        its targets by the point dimension's labels when it has them (a predictor may
        return the points in any order).

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> from xnp.baselines import InverseDistanceWeighting
    >>> rng = np.random.default_rng(0)
    >>> lat, lon = rng.uniform(40, 50, 40), rng.uniform(0, 10, 40)
    >>> obs = xr.Dataset(
    ...     {"t": ("station", lat + 0.1 * rng.normal(size=40))},
    ...     coords={"lat": ("station", lat), "lon": ("station", lon)},
    ... )
    >>> cv = BlockKFold(spacing_deg=3.0, n_splits=4)
    >>> scores = cross_validate(InverseDistanceWeighting().predict, obs, "t", cv)
    >>> scores.fold.values.tolist()
    ['0', '1', '2', '3', 'pooled']
    >>> scores.t_n.values.tolist()
    [10, 10, 10, 10, 40]
    """
    data, variables = _prepare(data, variable)
    point_dim, _ = _point_dim(data, variables[0])
    tests, preds, scores = [], [], []
    for test, pred in _folds(predictor_fn, data, variables, cv):
        tests.append(test)
        preds.append(pred)
        try:
            fold = evaluate(pred, data.isel({point_dim: test}), variables=variables, dim=dim)
        except EmptyDataError:  # no valid truth in this fold: n = 0, NaN scores (below)
            fold = None
        scores.append(fold)
    if not scores:
        raise ConfigError("cv yielded no fold with test points.")
    held = np.concatenate(tests)
    order = np.argsort(held, kind="stable")
    held_sorted = held[order]  # the positions of the pooled points
    pooled_pred = xr.concat(preds, dim=point_dim).isel({point_dim: order})
    # only the points some fold held out (a splitter need not hold out every point)
    pooled = evaluate(pooled_pred, data.isel({point_dim: held_sorted}), variables=variables,
                      dim=dim)  # fmt: skip
    kept = point_dim in pooled.dims
    counts = {f"{v}_n": 0 for v in variables if f"{v}_n" in pooled}
    nothing = xr.Dataset(
        {k: xr.full_like(v, 0 if k in counts else np.nan, dtype=v.dtype if k in counts else float)
         for k, v in pooled.data_vars.items()}, coords=pooled.coords, attrs=pooled.attrs,
    )  # fmt: skip
    for i, fold in enumerate(scores):
        if fold is None:
            rows = np.searchsorted(held_sorted, tests[i])
            scores[i] = nothing.isel({point_dim: rows}) if kept else nothing
    labels = [str(i) for i in range(len(scores))] + ["pooled"]
    parts = [*scores, pooled]
    if kept:
        # each fold scores its own test points: align the folds on the points' positions
        # (a point dimension need not have a coordinate), then give every fold the
        # coordinates of all points (an outer join would leave them NaN where a fold
        # held no test point)
        along = [c for c in pooled.coords if point_dim in pooled[c].dims]
        positions = [*tests, held_sorted]
        parts = [p.drop_vars(along).assign_coords({point_dim: i})
                 for p, i in zip(parts, positions, strict=True)]  # fmt: skip
    out = xr.concat(parts, dim="fold", coords="minimal", compat="override", join="outer",
                    fill_value={**counts, **{k: np.nan for k in pooled.data_vars
                                             if k not in counts}})  # fmt: skip
    if kept:
        out = out.drop_vars(point_dim).assign_coords(
            {c: pooled[c] for c in pooled.coords if point_dim in pooled[c].dims}
        )
    return out.assign_coords(fold=labels)

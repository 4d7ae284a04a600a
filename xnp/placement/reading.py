"""Where placement reads its points: the candidates, the region, the truth and weights at them."""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr
from scipy.spatial import cKDTree

from xnp.data.flatten import PointSet, to_points
from xnp.errors import ConfigError, EmptyDataError
from xnp.geo.sphere import unit_vectors
from xnp.prediction.context import coord_names
from xnp.prediction.guards import outside_grid
from xnp.prediction.templates import template_of

__all__ = ["points_of", "shares", "truth_at", "values_at"]


def points_of(obj: Any, data: xr.Dataset, model: Any, what: str) -> PointSet:
    """The points of ``obj`` (a template, or a boolean mask: its True cells)."""
    allowed = None
    if isinstance(obj, xr.DataArray) and obj.dtype == bool:
        allowed = obj
        obj = obj.to_dataset(name="_allowed").drop_vars("_allowed")
    template = template_of(obj, data, tuple(model.covariates), getattr(model, "coords", None))
    ps = to_points(
        template.points, None, covariates=model.covariates, **coord_names(model, template.points)
    )
    if allowed is not None:
        keep = np.asarray(allowed.transpose(*ps.dims).values).ravel()[ps.index]
        ps = ps.take(keep)
    if not len(ps):
        raise EmptyDataError(
            f"the {what} hold no point (with the model's covariates); give at least one."
        )
    outside = outside_grid(model, ps.s)
    if outside is not None and outside.any():
        raise ConfigError(
            f"{int(outside.sum())} of the {what} lie outside the model's grid; "
            "select points inside it."
        )
    return ps


def truth_at(truth: Any, ps: PointSet, model: Any) -> np.ndarray:
    """The true values ``[N, Dy]`` at the points ``ps`` (the nearest truth point, same place)."""
    if isinstance(truth, xr.DataArray):
        truth = truth.to_dataset(name=truth.name or model.variables[0])
    missing = [v for v in model.variables if v not in truth.data_vars]
    if missing:
        raise ConfigError(f"truth holds no {missing}; it needs the model's variables.")
    return values_at(truth, list(model.variables), ps, model, "truth")


def values_at(data: xr.Dataset, names: list[str], ps: PointSet, model: Any, what: str):
    """``data``'s variables ``names`` ``[N, len(names)]`` at the points ``ps`` (same places)."""
    tp = to_points(data, names, **coord_names(model, data))
    dist, nearest = cKDTree(unit_vectors(tp.s)).query(unit_vectors(ps.s))
    if np.any(dist > 1e-6):
        raise ConfigError(
            f"{what} does not cover every candidate and region point; give it on "
            "the same coordinates."
        )
    return tp.f[nearest]


def shares(weights: Any, region: PointSet, model: Any) -> np.ndarray | None:
    """Each region point's share ``[R]`` of the region acquisitions (summing to 1), or None."""
    if weights is None:
        return None
    if not isinstance(weights, xr.DataArray):
        raise ConfigError(
            "weights must be a DataArray on the region's coordinates; got "
            f"{type(weights).__name__}."
        )
    # a missing weight is marked -1 (read as points, NaN would look like a missing point)
    marked = weights.fillna(-1.0).to_dataset(name="_weight")
    w = values_at(marked, ["_weight"], region, model, "weights")
    w = w[:, 0].astype(np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        raise ConfigError(
            "weights must be finite (not NaN) and at least 0 at every region point, and not "
            "all 0; "
            "fill gaps (e.g. weights.fillna(0)) or drop those points from the region."
        )
    return w / w.sum()

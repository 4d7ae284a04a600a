"""Inverse-distance weighting on great-circle distances: :class:`InverseDistanceWeighting`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.spatial import cKDTree

from xnp.baselines.base import SpatialBaseline
from xnp.data.flatten import PointSet
from xnp.data.tasks import check_count
from xnp.errors import ConfigError
from xnp.geo.sphere import great_circle_km, unit_vectors

__all__ = ["InverseDistanceWeighting"]


class InverseDistanceWeighting(SpatialBaseline):
    """Inverse-distance weighting on great-circle distances.

    The mean at a target is ``Σ wᵢ fᵢ / Σ wᵢ`` over its ``neighbours`` nearest
    observations, with ``wᵢ = dᵢ^(−power)`` and ``dᵢ`` the great-circle distance.
    The std is the weighted standard deviation of those observations,
    ``sqrt(Σ wᵢ (fᵢ − mean)² / Σ wᵢ)``: the spread of the values the mean is made
    of — a heuristic, not a calibrated uncertainty.  Observations closer than one
    metre count as coincident: the prediction is then their value (their mean) and
    the std is zero (the limit of both formulas), so IDW is an exact interpolator.

    Parameters
    ----------
    power : float
        Exponent of the distance in the weights (> 0).
    neighbours : int or None
        Number of nearest observations used (all when None or fewer available).
    variables : str or list of str, optional
        Variables to predict; default every data variable (except elevation).

    Examples
    --------
    >>> import xarray as xr
    >>> obs = xr.Dataset(
    ...     {"t": ("station", [1.0, 3.0])},
    ...     coords={"lat": ("station", [0.0, 0.0]), "lon": ("station", [0.0, 2.0])},
    ... )
    >>> pred = InverseDistanceWeighting().predict(obs, {"lat": [0.0], "lon": [0.0, 1.0]})
    >>> pred.t_mean.values.round(6).tolist(), pred.t_std.values.round(6).tolist()
    ([[1.0, 2.0]], [[0.0, 1.0]])
    """

    name = "inverse distance weighting"

    def __init__(
        self,
        power: float = 2.0,
        neighbours: int | None = 8,
        *,
        variables: str | Sequence[str] | None = None,
    ) -> None:
        if not 0 < power < np.inf:
            raise ConfigError(f"power must be a positive finite number; got {power!r}.")
        if neighbours is not None:
            check_count(neighbours=neighbours)
        super().__init__(variables)
        self.power = float(power)
        self.neighbours = None if neighbours is None else int(neighbours)

    def _predict_points(
        self, context: PointSet, targets: PointSet
    ) -> tuple[np.ndarray, np.ndarray]:
        n = len(context)
        k = n if self.neighbours is None else min(self.neighbours, n)
        chord, idx = cKDTree(unit_vectors(context.s)).query(unit_vectors(targets.s), k=k)
        chord = np.reshape(chord, (len(targets), k))
        idx = np.reshape(idx, (len(targets), k))
        dist_km = great_circle_km(chord)
        values = context.f[:, 0][idx]
        coincident = dist_km < 1e-3
        # relative to the nearest neighbour's distance, so that a large power neither
        # underflows every weight to 0 nor overflows one to inf (0/0 = NaN otherwise)
        nearest = np.maximum(dist_km.min(-1, keepdims=True), 1e-3)
        with np.errstate(divide="ignore"):
            weights = (dist_km / nearest) ** (-self.power)
        weights = np.where(coincident.any(-1, keepdims=True), coincident * 1.0, weights)
        weights = weights / weights.sum(-1, keepdims=True)
        mean = np.sum(weights * values, axis=-1)
        var = np.sum(weights * (values - mean[:, None]) ** 2, axis=-1)
        return mean, np.sqrt(var)

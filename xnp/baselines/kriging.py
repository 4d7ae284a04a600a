"""Ordinary kriging with pykrige in geographic coordinates: :class:`OrdinaryKriging`.

pykrige is optional (``pip install 'xnp[kriging]'``); it is imported when a
kriging baseline is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xnp.baselines.base import TARGET_CHUNK, SpatialBaseline
from xnp.data.flatten import PointSet
from xnp.data.tasks import check_count
from xnp.errors import ConfigError, EmptyDataError, MissingDependencyError
from xnp.geo.sphere import unit_vectors

__all__ = ["OrdinaryKriging"]


def _pykrige_ok() -> Any:
    try:
        from pykrige.ok import OrdinaryKriging as PyKrigeOK
    except ImportError as err:
        raise MissingDependencyError(
            "OrdinaryKriging needs pykrige; install it with `pip install 'xnp[kriging]'` "
            "(or `pip install pykrige`)."
        ) from err
    return PyKrigeOK


_VARIOGRAM_MODELS = ("spherical", "exponential", "gaussian", "linear", "power", "hole-effect")


def _merge_colocated(context: PointSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Latitudes, longitudes and values with observations at one place averaged.

    Kriging with a zero nugget cannot honour two observations at one place (its
    matrix is singular, and pykrige inverts it without warning): a grid row at a
    pole, or two stations in one grid cell, gave values far outside the data.
    Places are matched on their unit vectors (to about a millimetre), so every
    longitude of a pole is one place.
    """
    xyz = unit_vectors(context.s)
    _, first, inverse = np.unique(
        np.round(xyz, 10), axis=0, return_index=True, return_inverse=True
    )
    inverse = inverse.reshape(-1)
    values = context.f[:, 0].astype(np.float64)
    if len(first) == len(values):
        return context.lat, context.lon, values
    sums = np.bincount(inverse, weights=values, minlength=len(first))
    counts = np.bincount(inverse, minlength=len(first))
    return context.lat[first], context.lon[first], sums / counts


class OrdinaryKriging(SpatialBaseline):
    """Ordinary kriging with pykrige, on great-circle distances.

    A variogram model is fitted to the observations of each time (pykrige's
    ``OrdinaryKriging`` with ``coordinates_type="geographic"``: distances are
    great-circle arcs in degrees), then the kriging mean and variance are
    computed at the targets; the std is ``sqrt(kriging variance)``.  Needs the
    ``kriging`` extra (``pip install xnp[kriging]``).

    Parameters
    ----------
    variogram_model : str
        ``"spherical"``, ``"exponential"``, ``"gaussian"``, ``"linear"``, ``"power"``
        or ``"hole-effect"``.
    nlags : int
        Number of lag bins of the empirical variogram.
    variogram_parameters : dict or list, optional
        Fixed variogram parameters in pykrige's convention (ranges in degrees of arc);
        default fitted.
    variables : str or list of str, optional
        Variables to predict; default every data variable (except elevation).

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> rng = np.random.default_rng(0)
    >>> lat, lon = rng.uniform(40, 50, 30), rng.uniform(-5, 5, 30)
    >>> obs = xr.Dataset(
    ...     {"t": ("station", np.sin(lat / 3) + np.cos(lon / 2))},
    ...     coords={"lat": ("station", lat), "lon": ("station", lon)},
    ... )
    >>> pred = OrdinaryKriging().predict(obs, obs.drop_vars("t"))
    >>> bool(np.allclose(pred.t_mean, obs.t)), float(pred.t_std.max()) < 1e-6
    (True, True)
    """

    name = "ordinary kriging"

    def __init__(
        self,
        variogram_model: str = "spherical",
        *,
        nlags: int = 6,
        variogram_parameters: Any = None,
        variables: str | Sequence[str] | None = None,
    ) -> None:
        if variogram_model not in _VARIOGRAM_MODELS:
            raise ConfigError(
                f"variogram_model must be one of {_VARIOGRAM_MODELS}; got {variogram_model!r}."
            )
        check_count(nlags=nlags)
        self._ok = _pykrige_ok()
        super().__init__(variables)
        self.variogram_model = variogram_model
        self.nlags = int(nlags)
        self.variogram_parameters = variogram_parameters

    def _predict_points(
        self, context: PointSet, targets: PointSet
    ) -> tuple[np.ndarray, np.ndarray]:
        lat, lon, values = _merge_colocated(context)
        if len(values) < 3:
            raise EmptyDataError(
                "ordinary kriging needs observations at 3 or more distinct places to fit a "
                f"variogram; got {len(values)} (from {len(context)} observations)."
            )
        if np.ptp(values) == 0:  # a constant field (a dry day): no variogram to fit
            return np.full(len(targets), values[0], np.float64), np.zeros(len(targets))
        ok = self._ok(
            lon,
            lat,
            values,
            variogram_model=self.variogram_model,
            variogram_parameters=self.variogram_parameters,
            nlags=self.nlags,
            coordinates_type="geographic",
        )
        means, variances = [], []
        for start in range(0, len(targets), TARGET_CHUNK):
            sl = slice(start, start + TARGET_CHUNK)
            z, ss = ok.execute("points", targets.lon[sl], targets.lat[sl])
            means.append(np.asarray(np.ma.getdata(z), np.float64))
            variances.append(np.asarray(np.ma.getdata(ss), np.float64))
        if not means:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(means), np.sqrt(np.maximum(np.concatenate(variances), 0.0))

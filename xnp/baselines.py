"""Classical baselines with the same ``predict`` call and output as :func:`xnp.predict`.

Each baseline is a small object whose ``predict(data, targets=None, *, time=None)``
takes the same arguments as ``xnp.predict(model, data, targets, time=...)`` and
returns the same layout: ``{var}_mean`` and ``{var}_std`` on the target
coordinates (and ``time``), with the same attributes.  So a neural process and
a baseline are scored on identical inputs with :func:`xnp.evaluate`::

    scores_np = evaluate(xnp.predict(model, context, targets), truth)
    scores_idw = evaluate(InverseDistanceWeighting().predict(context, targets), truth)

and a baseline's ``predict`` can be handed to :func:`xnp.validation.cross_validate`
as it is.

Spatial baselines (each time on its own, like :func:`xnp.predict`):

* :class:`InverseDistanceWeighting`: great-circle inverse-distance weighting;
* :class:`GaussianProcess`: exact GP regression with hyperparameters fitted by
  maximising the marginal likelihood (JAX + optax);
* :class:`OrdinaryKriging`: pykrige's ordinary kriging in geographic coordinates
  (``pip install 'xnp[kriging]'``).

Forecasting baseline: :class:`Persistence` (the last observation, with an
uncertainty from the history of changes over the same lag).

Baselines ignore covariates and compute eagerly (a dask-chunked ``targets``
template gives an in-memory result).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import xarray as xr
from scipy import linalg
from scipy.spatial import cKDTree
from scipy.spatial.distance import cdist

from xnp.arrays import padded_size
from xnp.data.coords import find_coords, latlon
from xnp.data.points import PointSet, predictions_to_xarray, to_points
from xnp.data.tasks import check_count
from xnp.data.times import match_hours, time_hours
from xnp.errors import (
    ConfigError,
    CoordinateError,
    DimensionError,
    EmptyDataError,
    MissingDependencyError,
    VariableNotFoundError,
)
from xnp.geo.distance import EARTH_RADIUS_KM
from xnp.geo.sphere import great_circle_km, unit_vectors
from xnp.prediction.forecast import add_hours, forecast_layout, lead_hours
from xnp.prediction.frames import at_time, predict_each_time
from xnp.prediction.templates import checked_dataset, template_of

__all__ = [
    "GPHyperparameters",
    "GaussianProcess",
    "InverseDistanceWeighting",
    "OrdinaryKriging",
    "Persistence",
]

_TARGET_CHUNK = 4096  # targets predicted at a time (bounds the cross-covariance memory)


# --------------------------------------------------------------------------- shared plumbing


def _dataset(data: xr.Dataset | xr.DataArray) -> xr.Dataset:
    if isinstance(data, xr.DataArray) and data.name is None:
        return data.to_dataset(name="value")
    return checked_dataset(data, "data")


def _variables(data: xr.Dataset, variables: tuple[str, ...] | None) -> list[str]:
    if variables is not None:
        missing = [v for v in variables if v not in data.data_vars]
        if missing:
            raise VariableNotFoundError(
                f"the data has no variable {missing}; its data variables are "
                f"{[str(v) for v in data.data_vars]}."
            )
        return list(variables)
    names = [str(v) for v in data.data_vars]
    if not names:
        raise VariableNotFoundError("the data holds no data variable to predict.")
    elevation = find_coords(data, names[0]).elevation
    names = [v for v in names if v != elevation]
    if not names:
        raise VariableNotFoundError(
            "the data holds only an elevation variable; nothing to predict."
        )
    return names


def _as_tuple(variables: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if variables is None:
        return None
    return (variables,) if isinstance(variables, str) else tuple(variables)


def _label(out: xr.Dataset, name: str) -> xr.Dataset:
    """Say in the provenance attributes which baseline made the prediction."""
    source = out.attrs["source"].replace("neural process", f"baseline: {name}")
    out = out.assign_attrs(source=source)
    for v in out.data_vars.values():
        v.attrs["source"] = source  # our own fresh arrays, not user data
    return out


def _time_label(frame: xr.Dataset, layout: Any) -> str:
    return f" at time {frame[layout.time].values}" if layout.time is not None else ""


class _SpatialBaseline:
    """Spatial interpolation of each time on its own, with the layout of ``xnp.predict``."""

    name = "baseline"

    def __init__(self, variables: str | Sequence[str] | None = None) -> None:
        self.variables = _as_tuple(variables)

    def predict(
        self,
        data: xr.Dataset | xr.DataArray,
        targets: xr.Dataset | xr.DataArray | dict[str, Any] | None = None,
        *,
        time: Any = None,
    ) -> xr.Dataset:
        """Predictive mean and std at ``targets`` from the observations in ``data``.

        Parameters
        ----------
        data : Dataset or DataArray
            Observations (missing values skipped); never modified.
        targets : Dataset, DataArray or dict of coordinates, optional
            Where to predict; default every point of ``data``.
        time : optional
            Time(s) to predict, selected from ``data`` with ``.sel``; default all.

        Returns
        -------
        Dataset
            ``{var}_mean`` and ``{var}_std`` laid out as :func:`xnp.predict` would.
        """
        data = _dataset(data)
        variables = _variables(data, self.variables)
        where = template_of(targets, data)
        layout = find_coords(data, variables[0])
        return where.arrange(predict_each_time(
            data, where.points, layout, time,
            lambda frame, tmpl: self._one_time(frame, tmpl, variables, layout),
        ))  # fmt: skip

    def _one_time(
        self, data: xr.Dataset, template: xr.Dataset, variables: list[str], layout: Any
    ) -> xr.Dataset:
        targets = to_points(template, None)
        means, stds = [], []
        for v in variables:
            if int(data[v].count()) == 0:
                raise EmptyDataError(
                    f"no observation of {v!r}{_time_label(data, layout)}; drop that time or "
                    "choose another."
                )
            context = to_points(data, v)
            mean, std = self._predict_points(context, targets)
            means.append(mean)
            stds.append(std)
        attrs = {v: dict(data[v].attrs) for v in variables}
        out = predictions_to_xarray(
            targets, np.stack(means, -1), np.stack(stds, -1), variables, attrs=attrs
        )
        return _label(out, self.name)

    def _predict_points(
        self, context: PointSet, targets: PointSet
    ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError  # pragma: no cover


# --------------------------------------------------------------------------- IDW


class InverseDistanceWeighting(_SpatialBaseline):
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


# --------------------------------------------------------------------------- Gaussian process


@dataclasses.dataclass(frozen=True)
class GPHyperparameters:
    """Hyperparameters of :class:`GaussianProcess`, in the data's units.

    Attributes
    ----------
    lengthscale_km : float
        Lengthscale of the kernel of the chord distance, in km.
    variance : float
        Prior variance of the field (units²).
    noise : float
        Standard deviation of the observation noise (units).
    mean : float
        Constant prior mean (units).
    """

    lengthscale_km: float
    variance: float
    noise: float
    mean: float


_KERNELS = ("rbf", "matern52")
_NOISE_FLOOR = 1e-3  # relative to the data's std: keeps the covariance well conditioned


def _kernel(r: Any, lengthscale: Any, variance: Any, kind: str, xp: Any = np) -> Any:
    """Covariance at distances ``r`` (same units as ``lengthscale``); numpy or jax.numpy."""
    if kind == "rbf":
        return variance * xp.exp(-0.5 * (r / lengthscale) ** 2)
    a = np.sqrt(5.0) * r / lengthscale
    return variance * (1.0 + a + a * a / 3.0) * xp.exp(-a)


def _chord_km(lat_a: np.ndarray, lon_a: np.ndarray, lat_b: np.ndarray, lon_b: np.ndarray):
    a = unit_vectors(np.stack([lat_a, lon_a], -1))
    b = unit_vectors(np.stack([lat_b, lon_b], -1))
    return cdist(a, b) * EARTH_RADIUS_KM


def _neg_log_marginal(
    params: dict[str, jax.Array],
    r: jax.Array,
    y: jax.Array,
    mask: jax.Array,
    kind: str,
    floor2: float | jax.Array = 0.0,
) -> jax.Array:
    """Negative log marginal likelihood per real point of standardised values.

    The noise variance is ``exp(2 log_noise) + floor2``.  Padded points
    (``mask == 0``) get a unit, uncorrelated covariance and a zero residual, which
    adds exactly nothing to the quadratic form or the log-determinant.
    """
    ell = jnp.exp(params["log_lengthscale"])
    var = jnp.exp(params["log_variance"])
    noise2 = jnp.exp(2.0 * params["log_noise"]) + floor2
    pair = mask[:, None] * mask[None, :]
    cov = _kernel(r, ell, var, kind, jnp) * pair + jnp.diag(mask * noise2 + (1.0 - mask))
    chol = jnp.linalg.cholesky(cov)
    resid = (y - params["mean"]) * mask
    alpha = jax.scipy.linalg.solve_triangular(chol, resid, lower=True)
    n = jnp.sum(mask)
    nll = 0.5 * jnp.sum(alpha * alpha) + jnp.sum(jnp.log(jnp.diag(chol)))
    return nll / n + 0.5 * jnp.log(2.0 * jnp.pi)


@functools.partial(jax.jit, static_argnames=("kind", "steps"))
def _fit_hyperparameters(
    free: dict[str, jax.Array],
    fixed: dict[str, jax.Array],
    r: jax.Array,
    y: jax.Array,
    mask: jax.Array,
    floor2: jax.Array,
    *,
    kind: str,
    steps: int,
) -> tuple[dict[str, jax.Array], jax.Array]:
    """L-BFGS (zoom line search) on the marginal likelihood over the ``free`` parameters.

    Stops after ``steps`` iterations or when the gradient norm falls below 1e-6;
    returns the parameters and their loss.
    """

    def loss(params):
        return _neg_log_marginal({**fixed, **params}, r, y, mask, kind, floor2)

    tx = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(loss)

    def step(carry):
        params, state = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = tx.update(grad, state, params, value=value, grad=grad, value_fn=loss)
        return optax.apply_updates(params, updates), state

    def going(carry):
        _, state = carry
        count = optax.tree_utils.tree_get(state, "count")
        grad = optax.tree_utils.tree_get(state, "grad")
        return (count == 0) | ((count < steps) & (optax.tree_utils.tree_norm(grad) > 1e-6))

    params, _ = jax.lax.while_loop(going, step, (free, tx.init(free)))
    return params, loss(params)


class GaussianProcess(_SpatialBaseline):
    """Exact Gaussian-process regression on the sphere.

    The covariance is an RBF or Matérn-5/2 kernel of the **chord** distance
    ``R·|u − v|`` between the unit vectors ``u``, ``v`` of two places (``R`` the
    Earth's radius, lengthscale in km).  These kernels are positive definite in
    3-D Euclidean space and so on any set of points on the sphere; the same
    kernels of the great-circle distance are not positive definite in general
    (the covariance matrix can fail to factorise).  For places closer than the
    lengthscale the two distances agree to within ``(d/R)²/24``.

    The model is ``y = m + f(s) + ε`` with ``f ~ GP(0, σ²·k)``, ``ε ~ N(0, τ²)``.
    Hyperparameters ``(ℓ, σ², τ, m)`` left as None are fitted per time and variable
    by maximising the marginal likelihood with L-BFGS (optax, jitted, float64) on
    at most ``fit_points`` random observations, starting from data-based values: ``ℓ``
    the median distance between observations, ``σ²`` the sample variance, ``τ`` a
    tenth of the sample std, ``m`` the sample mean.  Given values are held fixed.
    Prediction then conditions exactly on every observation (float64 Cholesky, up
    to ``max_context`` points: the cost is O(N³) time and O(N²) memory).

    Parameters
    ----------
    kernel : {"rbf", "matern52"}
        Covariance function of the chord distance.
    fit : bool
        Fit the hyperparameters left as None (True) or use the data-based values.
    lengthscale_km, variance, noise, mean : float, optional
        Fixed hyperparameters (``noise`` is a std, in the data's units).  A fitted
        noise is at least ``1e-3`` times the data's std, which keeps the solve stable.
    steps : int
        Maximum number of L-BFGS iterations (on log-parameters of standardised data).
    fit_points : int
        Maximum number of observations used to fit the hyperparameters.
    max_context : int
        Maximum number of observations to condition on; more raise a ConfigError.
    observation_noise : bool
        Whether the std includes the noise ``τ`` (the spread of a new observation,
        comparable with held-out data and with xnp's predictions) or is the std of
        the noiseless field ``f``.
    seed : int
        Seed of the subsample used for fitting.
    variables : str or list of str, optional
        Variables to predict; default every data variable (except elevation).

    Examples
    --------
    >>> import xarray as xr
    >>> obs = xr.Dataset(
    ...     {"t": ("station", [1.0, 2.0, 1.5])},
    ...     coords={"lat": ("station", [0.0, 1.0, 2.0]), "lon": ("station", [0.0, 1.0, 0.0])},
    ... )
    >>> gp = GaussianProcess(lengthscale_km=200.0, variance=1.0, noise=0.01, mean=1.5)
    >>> pred = gp.predict(obs, obs.drop_vars("t"))
    >>> pred.t_mean.values.round(2).tolist()
    [1.0, 2.0, 1.5]
    """

    name = "Gaussian process"

    def __init__(
        self,
        kernel: str = "rbf",
        *,
        fit: bool = True,
        lengthscale_km: float | None = None,
        variance: float | None = None,
        noise: float | None = None,
        mean: float | None = None,
        steps: int = 100,
        fit_points: int = 500,
        max_context: int = 5000,
        observation_noise: bool = True,
        seed: int = 0,
        variables: str | Sequence[str] | None = None,
    ) -> None:
        if kernel not in _KERNELS:
            raise ConfigError(f"kernel must be one of {_KERNELS}; got {kernel!r}.")
        for label, value in (
            ("lengthscale_km", lengthscale_km),
            ("variance", variance),
            ("noise", noise),
        ):
            if value is not None and not value > 0:
                raise ConfigError(f"{label} must be positive; got {value!r}.")
        check_count(steps=steps, fit_points=fit_points, max_context=max_context)
        steps, fit_points, max_context = int(steps), int(fit_points), int(max_context)
        super().__init__(variables)
        self.kernel = kernel
        self.fit = fit
        self.fixed = {"lengthscale_km": lengthscale_km, "variance": variance, "noise": noise,
                      "mean": mean}  # fmt: skip
        self.steps = steps
        self.fit_points = fit_points
        self.max_context = max_context
        self.observation_noise = observation_noise
        self.seed = seed

    def hyperparameters(
        self, lat: np.ndarray, lon: np.ndarray, values: np.ndarray
    ) -> GPHyperparameters:
        """The hyperparameters used for these observations (fitted, fixed or default).

        Parameters
        ----------
        lat, lon, values : ndarray, shape ``[N]``
            Observations (degrees; finite values).

        Returns
        -------
        GPHyperparameters
        """
        lat, lon, values = (np.asarray(a, np.float64).ravel() for a in (lat, lon, values))
        if values.size == 0:
            raise EmptyDataError("no observation to fit the Gaussian process to.")
        if values.size > self.fit_points:
            keep = np.random.default_rng(self.seed).choice(values.size, self.fit_points, False)
            keep.sort()
            lat, lon, values = lat[keep], lon[keep], values[keep]
        r = _chord_km(lat, lon, lat, lon)
        centre, scale = float(values.mean()), float(values.std())
        scale = scale if scale > 0 else 1.0
        off_diagonal = r[np.triu_indices(r.shape[0], 1)]
        positive = off_diagonal[off_diagonal > 0]
        default_ell = float(np.median(positive)) if positive.size else 1000.0
        given = self.fixed
        init = {
            "log_lengthscale": np.log(given["lengthscale_km"] or default_ell),
            "log_variance": np.log((given["variance"] or scale**2) / scale**2),
            "log_noise": np.log((given["noise"] or 0.1 * scale) / scale),
            "mean": ((centre if given["mean"] is None else given["mean"]) - centre) / scale,
        }
        keys = {"lengthscale_km": "log_lengthscale", "variance": "log_variance",
                "noise": "log_noise", "mean": "mean"}  # fmt: skip
        free = tuple(sorted(keys[k] for k, v in given.items() if v is None))
        if self.fit and free and values.size > 1:
            init = self._optimise(init, r, (values - centre) / scale, free)
        fitted = {
            "lengthscale_km": np.exp(init["log_lengthscale"]),
            "variance": np.exp(init["log_variance"]) * scale**2,
            "noise": np.sqrt(np.exp(2.0 * init["log_noise"]) + _NOISE_FLOOR**2) * scale,
            "mean": init["mean"] * scale + centre,
        }
        return GPHyperparameters(
            **{k: float(fitted[k] if given[k] is None else given[k]) for k in fitted}
        )

    def _optimise(
        self, init: dict[str, float], r: np.ndarray, y: np.ndarray, free: tuple[str, ...]
    ) -> dict[str, float]:
        n = y.size
        size = padded_size(n, minimum=16, tile=64, three_quarters=False)  # few shapes
        r_pad = np.zeros((size, size))
        r_pad[:n, :n] = r
        y_pad = np.zeros(size)
        y_pad[:n] = y
        mask = (np.arange(size) < n).astype(np.float64)
        with jax.enable_x64(True):
            params, loss = _fit_hyperparameters(
                {k: jnp.asarray(v, jnp.float64) for k, v in init.items() if k in free},
                {k: jnp.asarray(v, jnp.float64) for k, v in init.items() if k not in free},
                jnp.asarray(r_pad),
                jnp.asarray(y_pad),
                jnp.asarray(mask),
                jnp.asarray(_NOISE_FLOOR**2 if "log_noise" in free else 0.0, jnp.float64),
                kind=self.kernel,
                steps=self.steps,
            )
            fitted = {k: float(v) for k, v in params.items()}
            finite = np.isfinite(float(loss)) and all(np.isfinite(list(fitted.values())))
        return {**init, **fitted} if finite else init

    def _predict_points(
        self, context: PointSet, targets: PointSet
    ) -> tuple[np.ndarray, np.ndarray]:
        n = len(context)
        if n > self.max_context:
            raise ConfigError(
                f"{n} observations exceed max_context={self.max_context} of the exact "
                "Gaussian process (O(N³) time, O(N²) memory). Subsample the context (e.g. "
                "data.isel(station=slice(None, None, 2))), raise max_context if you have the "
                "memory, or use InverseDistanceWeighting or a neural process."
            )
        y = context.f[:, 0]
        hp = self.hyperparameters(context.lat, context.lon, y)
        return self.posterior(hp, context.lat, context.lon, y, targets.lat, targets.lon)

    def posterior(
        self,
        hp: GPHyperparameters,
        lat: np.ndarray,
        lon: np.ndarray,
        values: np.ndarray,
        target_lat: np.ndarray,
        target_lon: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Posterior predictive mean and std at the targets for given hyperparameters.

        Float64 Cholesky of the covariance of the observations; targets in chunks.
        """
        r = _chord_km(lat, lon, lat, lon)
        cov = _kernel(r, hp.lengthscale_km, hp.variance, self.kernel)
        cov[np.diag_indices_from(cov)] += hp.noise**2 + 1e-10 * hp.variance  # + jitter
        chol = linalg.cholesky(cov, lower=True)
        alpha = linalg.cho_solve((chol, True), np.asarray(values, np.float64) - hp.mean)
        means, stds = [], []
        for start in range(0, len(target_lat), _TARGET_CHUNK):
            sl = slice(start, start + _TARGET_CHUNK)
            r_t = _chord_km(target_lat[sl], target_lon[sl], lat, lon)
            cross = _kernel(r_t, hp.lengthscale_km, hp.variance, self.kernel)
            v = linalg.solve_triangular(chol, cross.T, lower=True)
            var = np.maximum(hp.variance - np.sum(v * v, axis=0), 0.0)
            if self.observation_noise:
                var = var + hp.noise**2
            means.append(hp.mean + cross @ alpha)
            stds.append(np.sqrt(var))
        if not means:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(means), np.concatenate(stds)


# --------------------------------------------------------------------------- ordinary kriging


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


class OrdinaryKriging(_SpatialBaseline):
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
        for start in range(0, len(targets), _TARGET_CHUNK):
            sl = slice(start, start + _TARGET_CHUNK)
            z, ss = ok.execute("points", targets.lon[sl], targets.lat[sl])
            means.append(np.asarray(np.ma.getdata(z), np.float64))
            variances.append(np.asarray(np.ma.getdata(ss), np.float64))
        if not means:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(means), np.sqrt(np.maximum(np.concatenate(variances), 0.0))


# --------------------------------------------------------------------------- persistence


class Persistence:
    """Forecast by persistence: the last observation before the forecast is issued.

    The prediction for a place is the most recent observation, at or before the
    time the forecast is issued, of the nearest observed place (great-circle; the
    place itself when it has been observed).  Its std is the root-mean-square
    change of that place's series over the same lag, ``sqrt(mean (x(τ + L) −
    x(τ))²)`` over all pairs of observations ``L`` hours apart known when the
    forecast is issued, where ``L`` is the time from the persisted observation to
    the valid time.  Without such pairs at that place the changes of every place
    are pooled; without any, the std is ``√2`` times the std of the history (the
    long-lag limit for a stationary series).  Lag 0 (a valid time that is
    observed, without ``lead_time``) has std 0.

    Parameters
    ----------
    variables : str or list of str, optional
        Variables to predict; default every data variable (except elevation).

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> times = np.array(["2020-01-01T00", "2020-01-01T06", "2020-01-01T12"], "datetime64[ns]")
    >>> obs = xr.Dataset(
    ...     {"t": (("time", "station"), [[0.0], [1.0], [3.0]])},
    ...     coords={"time": times, "lat": ("station", [0.0]), "lon": ("station", [0.0])},
    ... )
    >>> pred = Persistence().predict(obs, time=times[-1], lead_time="6h")
    >>> pred.t_mean.values.tolist(), pred.t_std.values.round(3).tolist()
    ([3.0], [1.581])
    >>> str(pred.valid_time.values)
    '2020-01-01T18:00:00.000000000'
    """

    name = "persistence"

    def __init__(self, *, variables: str | Sequence[str] | None = None) -> None:
        self.variables = _as_tuple(variables)

    def predict(
        self,
        data: xr.Dataset | xr.DataArray,
        targets: xr.Dataset | xr.DataArray | dict[str, Any] | None = None,
        *,
        time: Any = None,
        lead_time: Any = None,
    ) -> xr.Dataset:
        """Persistence forecast at ``targets``, laid out as :func:`xnp.predict`'s.

        Parameters
        ----------
        data : Dataset or DataArray
            The observed history, with a time axis; never modified.
        targets : Dataset, DataArray or dict of coordinates, optional
            Where to predict; default the places of ``data``.
        time : optional
            With ``lead_time``: the initialisation (issue) time(s), default every
            time of ``data``.  Without: the valid time(s) to predict from the
            observations at or before each (may lie after the end of ``data``);
            default the targets' times, else every time of ``data``.  A scalar
            gives no time dimension, as in :func:`xnp.predict`.
        lead_time : optional
            Hours after ``time`` to forecast (a number, a timedelta, a string such
            as ``"6h"``, or a list); the result then has ``init_time``,
            ``lead_time`` and ``valid_time`` as a forecast model's prediction does.

        Returns
        -------
        Dataset
            ``{var}_mean`` and ``{var}_std``.
        """
        data = _dataset(data)
        variables = _variables(data, self.variables)
        layout = find_coords(data, variables[0])
        if layout.time is None or layout.time_dim is None:
            raise ConfigError(
                "Persistence needs data with a time dimension (the history to persist); "
                f"found time={layout.time!r} without a time axis."
            )
        expected = {layout.time_dim, *layout.point_dims}
        for v in variables:
            if set(map(str, data[v].dims)) != expected:
                raise DimensionError(
                    f"{v!r} has dims {data[v].dims}; Persistence needs exactly time and space "
                    f"{tuple(expected)}. Select along the other dims first."
                )
        where = template_of(targets, data)
        template = where.points
        if targets is None:
            template = template.isel({layout.time_dim: 0}, drop=True)
        history = _History(data, variables, layout)
        if lead_time is not None:
            spatial = template.drop_dims(
                [d for d in (layout.time_dim,) if d in template.dims]
            ).drop_vars([layout.time], errors="ignore")
            return where.arrange(self._forecast(history, spatial, time, lead_time))
        tmpl_time = find_coords(template).time
        times, scalar = _valid_times(data, template, layout, tmpl_time, time)
        results = []
        for t in times:
            tmpl = at_time(template, xr.Dataset(coords={layout.time: t}), layout, tmpl_time)
            results.append(self._frame(history, tmpl, t, t))
        return where.arrange(results[0] if scalar else xr.concat(results, dim=layout.time_dim))

    def _frame(
        self, history: _History, template: xr.Dataset, issued: Any, valid: Any
    ) -> xr.Dataset:
        targets = to_points(template, None)
        pairs = [history.persist(v, targets, issued, valid) for v in history.variables]
        mean = np.stack([p[0] for p in pairs], -1)
        std = np.stack([p[1] for p in pairs], -1)
        out = predictions_to_xarray(targets, mean, std, history.variables, attrs=history.attrs)
        return _label(out, self.name)

    def _forecast(
        self, history: _History, spatial: xr.Dataset, time: Any, lead_time: Any
    ) -> xr.Dataset:
        leads, scalar_lead = lead_hours(lead_time)
        if time is None:
            inits, scalar_init = history.times, False
        else:
            inits, scalar_init = _as_times(time, history.times)
        lead_index = pd.Index(pd.to_timedelta(leads, unit="h"), name="lead_time")
        results = []
        for t0 in inits:
            per_lead = [self._frame(history, spatial, t0, add_hours(t0, float(h))) for h in leads]
            results.append(xr.concat(per_lead, dim=lead_index).expand_dims(init_time=[t0]))
        return forecast_layout(results, leads, scalar_init=scalar_init, scalar_lead=scalar_lead)


def _as_times(time: Any, times: np.ndarray) -> tuple[np.ndarray, bool]:
    """``time`` as an array of the type of the data's ``times``, and whether it was a scalar.

    Strings are parsed as numpy datetimes, or in the data's cftime calendar.
    """
    values = np.asarray(time)
    if np.issubdtype(times.dtype, np.datetime64):
        return np.atleast_1d(values.astype(times.dtype)), values.ndim == 0
    calendar = getattr(times.flat[0], "calendar", None) if times.size else None
    if calendar and values.dtype.kind in "USO":
        parsed = []
        for v in values.ravel():
            if isinstance(v, str | np.str_):
                try:
                    v = xr.date_range(str(v), periods=1, calendar=calendar, use_cftime=True)[0]
                except (ValueError, TypeError) as err:
                    raise CoordinateError(
                        f"time {str(v)!r} is not a date of the data's {calendar!r} calendar "
                        f"({err}); give it as 'YYYY-MM-DDTHH' or as a cftime datetime."
                    ) from err
            parsed.append(v)
        out = np.empty(len(parsed), object)
        out[:] = parsed
        return out, values.ndim == 0
    return np.atleast_1d(values), values.ndim == 0


def _valid_times(
    data: xr.Dataset, template: xr.Dataset, layout: Any, tmpl_time: Any, time: Any
) -> tuple[np.ndarray, bool]:
    if time is not None:
        return _as_times(time, data[layout.time].values)
    if tmpl_time is not None:
        values = template[tmpl_time].values
        return np.atleast_1d(values), values.ndim == 0
    return data[layout.time].values, False


class _History:
    """The observed series of every place, as ``[time, place]`` arrays."""

    def __init__(self, data: xr.Dataset, variables: list[str], layout: Any) -> None:
        self.variables = variables
        self.times = data[layout.time].values
        self.hours = time_hours(self.times)
        lat, lon = latlon(data, layout)
        self.lat, self.lon = lat.ravel(), lon.ravel()
        dims = (layout.time_dim, *layout.point_dims)
        self.series = {
            v: np.asarray(data[v].transpose(*dims).values, np.float64).reshape(self.hours.size, -1)
            for v in variables
        }
        self.attrs = {v: dict(data[v].attrs) for v in variables}

    def persist(
        self, variable: str, targets: PointSet, issued: Any, valid: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Persisted value and its std at the targets."""
        x, axis = self.series[variable], self.hours
        issue_h = float(time_hours(np.asarray(issued)))
        valid_h = float(time_hours(np.asarray(valid)))
        observed = np.isfinite(x) & (axis <= issue_h)[:, None]
        last = np.where(observed, np.arange(axis.size)[:, None], -1).max(0)
        places = np.flatnonzero(last >= 0)
        if places.size == 0:
            raise EmptyDataError(
                f"no observation of {variable!r} at or before {issued}; persistence has "
                "nothing to persist."
            )
        xyz = unit_vectors(np.stack([self.lat[places], self.lon[places]], -1))
        _, nearest = cKDTree(xyz).query(unit_vectors(targets.s), k=1)
        source = places[np.reshape(nearest, (-1,))]
        value = x[last[source], source]
        lag = valid_h - axis[last[source]]
        std = np.empty(len(targets))
        for age in np.unique(lag):
            sel = lag == age
            std[sel] = _lag_rms(x, axis, float(age), issue_h)[source[sel]]
        return value, std


def _lag_rms(x: np.ndarray, axis: np.ndarray, lag: float, until: float) -> np.ndarray:
    """Per place RMS of ``x(τ + lag) − x(τ)`` over pairs up to ``until``, with fallbacks."""
    if lag == 0:
        return np.zeros(x.shape[1])
    later = match_hours(axis, axis + lag)
    ok = later >= 0
    ok[ok] = axis[later[ok]] <= until
    diff = x[later[ok]] - x[ok]
    finite = np.isfinite(diff)
    count = finite.sum(0)
    total = np.where(finite, diff * diff, 0.0).sum(0)
    if count.sum() > 0:
        pooled = total.sum() / count.sum()
        per_place = np.where(count > 0, total / np.maximum(count, 1), pooled)
        return np.sqrt(per_place)
    past = x[axis <= until]
    past = past[np.isfinite(past)]
    return np.full(x.shape[1], np.sqrt(2.0) * (past.std() if past.size else 0.0))

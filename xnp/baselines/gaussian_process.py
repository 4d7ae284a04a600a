"""Exact Gaussian-process regression on the sphere: :class:`GaussianProcess`.

Kernels of the chord distance, the marginal likelihood and its L-BFGS fit
(JAX + optax, float64), and the float64 Cholesky posterior (numpy + scipy).
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
from scipy import linalg
from scipy.spatial.distance import cdist

from xnp.arrays import padded_size
from xnp.baselines.base import TARGET_CHUNK, SpatialBaseline
from xnp.data.flatten import PointSet
from xnp.data.tasks import check_count
from xnp.errors import ConfigError, EmptyDataError
from xnp.geo.distance import EARTH_RADIUS_KM
from xnp.geo.sphere import unit_vectors

__all__ = ["GPHyperparameters", "GaussianProcess"]


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


class GaussianProcess(SpatialBaseline):
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
        for start in range(0, len(target_lat), TARGET_CHUNK):
            sl = slice(start, start + TARGET_CHUNK)
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

"""Synthetic Gaussian-process tasks, in the plane and on the sphere.

These are the meta-learning tasks of the NP papers (BSA-TNP §5.1: RBF kernel,
lengthscale ~ Beta(3, 7), 128–512 context points and 1024 targets on [-2, 2]²,
noise 0.1 on the context).  They are generated in JAX with static shapes so a
whole batch can be sampled inside ``jit``: the number of context points varies
per task through the mask.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp

from xnp.arrays import Points
from xnp.errors import ConfigError
from xnp.geo.distance import EARTH_RADIUS_KM, latlon_to_xyz
from xnp.nn.gp_bank import KINDS

__all__ = [
    "GPTasks",
    "SphereFieldTasks",
    "gp_oracle",
    "matern_kernel",
    "rbf_kernel",
    "sample_gp_batch",
    "sample_sphere_fields",
]


def rbf_kernel(a: jax.Array, b: jax.Array, lengthscale: jax.Array) -> jax.Array:
    """``exp(-|a - b|² / (2 ℓ²))`` between ``a`` ``[N, D]`` and ``b`` ``[M, D]``."""
    d2 = jnp.sum((a[:, None, :] - b[None, :, :]) ** 2, axis=-1)
    return jnp.exp(-0.5 * d2 / lengthscale**2)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GPTasks:
    """A distribution over GP regression tasks.

    Parameters
    ----------
    geometry : {"plane", "sphere"}
        ``"plane"``: locations uniform on ``domain`` in ``dims`` dimensions,
        Euclidean RBF kernel.  ``"sphere"``: latitude/longitude uniform on the
        sphere between ``lat_range`` (area-uniform), RBF kernel of the chord
        distance (positive definite on the sphere), lengthscales in km.
    dims : int
        Spatial dimensions for the plane.
    n_context : (int, int)
        Inclusive range of the number of context points per task.
    n_target : int
        Targets per task.
    lengthscale : (float, float)
        For the plane, ``(α, β)`` of a Beta distribution (paper: (3, 7)); for the
        sphere, a uniform range in km.
    noise : float
        Standard deviation of the noise added to context values.
    domain : (float, float)
        Bounds of each coordinate in the plane.
    lat_range : (float, float)
        Latitude band on the sphere.

    Examples
    --------
    >>> tasks = GPTasks(n_context=(8, 16), n_target=10)
    >>> sample = jax.jit(sample_gp_batch, static_argnames=("tasks", "batch_size"))
    >>> ctx, tgt, y = sample(jax.random.key(0), tasks, batch_size=2)  # compiled once per spec
    >>> ctx.s.shape, tgt.s.shape, y.shape
    ((2, 16, 2), (2, 10, 2), (2, 10, 1))
    """

    geometry: Literal["plane", "sphere"] = "plane"
    dims: int = 2
    n_context: tuple[int, int] = (128, 512)
    n_target: int = 1024
    lengthscale: tuple[float, float] = (3.0, 7.0)
    noise: float = 0.1
    domain: tuple[float, float] = (-2.0, 2.0)
    lat_range: tuple[float, float] = (-90.0, 90.0)

    def __post_init__(self) -> None:
        lo, hi = self.n_context
        if not 1 <= lo <= hi:
            raise ConfigError(
                f"n_context must be (lo, hi) with 1 ≤ lo ≤ hi; got {self.n_context}."
            )
        if self.n_target < 1:
            raise ConfigError(f"n_target must be positive; got {self.n_target}.")
        if self.geometry not in ("plane", "sphere"):
            raise ConfigError(f"geometry must be 'plane' or 'sphere'; got {self.geometry!r}.")
        if self.geometry == "sphere" and self.dims != 2:
            raise ConfigError("the sphere has dims=2 (latitude, longitude).")
        if self.noise < 0:
            raise ConfigError(f"noise must be ≥ 0; got {self.noise}.")


def _locations(key: jax.Array, tasks: GPTasks, n: int) -> tuple[jax.Array, jax.Array]:
    """``(s, coords for the kernel)`` of ``n`` random points of one task."""
    if tasks.geometry == "plane":
        s = jax.random.uniform(
            key, (n, tasks.dims), minval=tasks.domain[0], maxval=tasks.domain[1]
        )
        return s, s
    k_lat, k_lon = jax.random.split(key)
    sin_lo, sin_hi = jnp.sin(jnp.deg2rad(jnp.asarray(tasks.lat_range)))
    lat = jnp.rad2deg(jnp.arcsin(jax.random.uniform(k_lat, (n,), minval=sin_lo, maxval=sin_hi)))
    lon = jax.random.uniform(k_lon, (n,), minval=-180.0, maxval=180.0)
    s = jnp.stack([lat, lon], axis=-1)
    return s, latlon_to_xyz(lat, lon) * EARTH_RADIUS_KM  # chord distances in km


def _one_task(key: jax.Array, tasks: GPTasks):
    k_len, k_loc, k_f, k_noise, k_n = jax.random.split(key, 5)
    n_max = tasks.n_context[1]
    n = n_max + tasks.n_target
    if tasks.geometry == "plane":
        ell = jax.random.beta(k_len, *tasks.lengthscale)
    else:
        ell = jax.random.uniform(k_len, minval=tasks.lengthscale[0], maxval=tasks.lengthscale[1])
    s, coords = _locations(k_loc, tasks, n)
    cov = rbf_kernel(coords, coords, ell) + 1e-5 * jnp.eye(n)
    f = jnp.linalg.cholesky(cov) @ jax.random.normal(k_f, (n,))
    n_ctx = jax.random.randint(k_n, (), tasks.n_context[0], n_max + 1)
    y_ctx = f[:n_max] + tasks.noise * jax.random.normal(k_noise, (n_max,))
    mask = jnp.arange(n_max) < n_ctx
    return s[:n_max], y_ctx, mask, s[n_max:], f[n_max:], ell


def sample_gp_batch(
    key: jax.Array, tasks: GPTasks, *, batch_size: int = 8, return_lengthscale: bool = False
) -> tuple[Points, Points, jax.Array] | tuple[Points, Points, jax.Array, jax.Array]:
    """Sample a batch of GP tasks: ``(context, targets, target values)``.

    Context is padded to ``tasks.n_context[1]`` points with a mask; targets are
    noiseless function values.  With ``return_lengthscale``, the per-task
    lengthscales ``[B]`` come fourth (for the exact-GP oracle).  Jittable
    (``tasks``, ``batch_size`` and ``return_lengthscale`` static).
    """
    s_c, y_c, mask_c, s_t, y_t, ell = jax.vmap(lambda k: _one_task(k, tasks))(
        jax.random.split(key, batch_size)
    )
    context = Points.from_arrays(s=s_c, f=y_c[..., None], mask=mask_c)
    targets = Points.from_arrays(s=s_t)
    if return_lengthscale:
        return context, targets, y_t[..., None], ell
    return context, targets, y_t[..., None]


def gp_oracle(
    context: Points, targets: Points, lengthscale: jax.Array, noise: float
) -> tuple[jax.Array, jax.Array]:
    """Exact GP posterior mean and std ``[B, Nt, 1]`` of the noiseless targets (plane).

    The Bayes-optimal predictor for tasks from :class:`GPTasks` with
    ``geometry="plane"``: the NLL an NP can at best reach.  Masked context points
    are ignored exactly.
    """

    def one(sc, yc, mask, st, ell):
        m = mask.astype(sc.dtype)
        k_cc = rbf_kernel(sc, sc, ell) * m[:, None] * m[None, :]
        k_cc = k_cc + jnp.diag(jnp.where(mask, noise**2 + 1e-6, 1.0))
        k_tc = rbf_kernel(st, sc, ell) * m[None, :]
        chol = jax.scipy.linalg.cho_factor(k_cc, lower=True)
        alpha = jax.scipy.linalg.cho_solve(chol, yc * m)
        mean = k_tc @ alpha
        w = jax.scipy.linalg.solve_triangular(chol[0], k_tc.T, lower=True)
        var = jnp.maximum(1.0 - jnp.sum(w * w, axis=0), 1e-10)
        return mean[:, None], jnp.sqrt(var)[:, None]

    return jax.vmap(one)(context.s, context.f[..., 0], context.mask, targets.s, lengthscale)


_KERNELS = KINDS


def matern_kernel(a: jax.Array, b: jax.Array, lengthscale: jax.Array, nu: str) -> jax.Array:
    """Matérn (ν = 1/2, 3/2, 5/2) or RBF correlation between ``a`` ``[N, D]`` and ``b`` ``[M, D]``.

    ``nu`` is one of ``"matern12"``, ``"matern32"``, ``"matern52"``, ``"rbf"``.

    Examples
    --------
    >>> x = jnp.array([[0.0], [1.0]])
    >>> matern_kernel(x, x, 1.0, "matern12")[0, 1].round(4)
    Array(0.3679, dtype=float32)
    """
    d2 = jnp.sum((a[:, None, :] - b[None, :, :]) ** 2, axis=-1)
    if nu == "rbf":
        return jnp.exp(-0.5 * d2 / lengthscale**2)
    r = jnp.sqrt(jnp.maximum(d2, 1e-20)) / lengthscale
    if nu == "matern12":
        return jnp.exp(-r)
    if nu == "matern32":
        return (1.0 + jnp.sqrt(3.0) * r) * jnp.exp(-jnp.sqrt(3.0) * r)
    if nu == "matern52":
        return (1.0 + jnp.sqrt(5.0) * r + 5.0 / 3.0 * r**2) * jnp.exp(-jnp.sqrt(5.0) * r)
    raise ConfigError(f"unknown kernel {nu!r}; use one of {_KERNELS}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SphereFieldTasks:
    """Regional Gaussian-process fields on the sphere, for pretraining a zero-shot model.

    Each task draws a spherical cap at a random place (radius log-uniform in
    ``cap_km``), a kernel (Matérn 1/2, 3/2, 5/2 or RBF of the chord distance, all
    positive definite on the sphere), a lengthscale (log-uniform in
    ``lengthscale``, as a fraction of the cap radius), a noise standard
    deviation (log-uniform in ``noise``, relative to a unit-variance field) and a
    number of observations; context and targets are noisy observations of one
    field at points uniform in the cap.  Values are standardised by the
    context's own mean and standard deviation, as :func:`xnp.predict` does for a
    zero-shot model, so the model learns on fields of any units.

    Parameters
    ----------
    n_context : (int, int)
        Inclusive range of context points per task (padded to the maximum).
    n_target : int
        Targets per task.
    cap_km : (float, float)
        Range of the cap radius in km.
    lengthscale : (float, float)
        Range of the lengthscale as a fraction of the cap radius.
    noise : (float, float)
        Range of the noise standard deviation.
    kernels : tuple of str
        Kernels drawn uniformly.
    method : {"cholesky", "fourier"}
        ``"cholesky"`` draws exact GP samples (O(n³) per task); ``"fourier"``
        draws random Fourier features of the kernel's spectral density
        (``n_features`` of them, O(n·n_features)): approximate samples whose
        covariance converges to the kernel, about 10× cheaper at 512 points.
    n_features : int
        Random features for ``method="fourier"``.
    trend : float
        Standard deviation of a linear trend added to each field, in units of the
        unit-variance field per cap radius, along a random direction (0: none).
        Real fields have large-scale gradients a stationary GP lacks.
    step : float
        Standard deviation of a step added to each field across a random straight
        line through the cap (0: none), like a land/sea contrast.
    cluster : float
        Largest clustering strength of the context locations (0: uniform, as the
        targets always are).  Station networks are dense in some places and empty
        in others, where the best prediction far from the stations needs the mean
        of the field estimated with the clusters down-weighted (as kriging's
        generalised-least-squares mean does), not their plain average.  With
        ``cluster > 0`` each task draws a strength ``γ`` uniform in
        ``[0, cluster]`` and takes its context points from four times as many
        uniform candidates in the cap, sampled without replacement with weights
        ``exp(γ g(x))`` for a smooth random field ``g`` of unit variance
        (lengthscale 10–50 % of the cap): ``γ = 3`` makes some parts of the cap
        about 400 times denser than others.

    Examples
    --------
    >>> tasks = SphereFieldTasks(n_context=(8, 16), n_target=12)
    >>> sample = jax.jit(sample_sphere_fields, static_argnames=("tasks", "batch_size"))
    >>> ctx, tgt, y = sample(jax.random.key(0), tasks, batch_size=2)  # compiled once per spec
    >>> ctx.s.shape, tgt.s.shape, y.shape
    ((2, 16, 2), (2, 12, 2), (2, 12, 1))
    """

    n_context: tuple[int, int] = (16, 256)
    n_target: int = 256
    cap_km: tuple[float, float] = (200.0, 4000.0)
    lengthscale: tuple[float, float] = (0.05, 1.0)
    noise: tuple[float, float] = (0.01, 0.3)
    kernels: tuple[str, ...] = _KERNELS
    method: Literal["cholesky", "fourier"] = "cholesky"
    n_features: int = 2048
    trend: float = 0.0
    step: float = 0.0
    cluster: float = 0.0

    def __post_init__(self) -> None:
        if not (self.trend >= 0.0 and self.step >= 0.0 and self.cluster >= 0.0):
            raise ConfigError(
                "trend, step and cluster must be non-negative (and not NaN); got "
                f"{self.trend}, {self.step}, {self.cluster}."
            )
        if self.method not in ("cholesky", "fourier"):
            raise ConfigError(f"method must be 'cholesky' or 'fourier'; got {self.method!r}.")
        lo, hi = self.n_context
        if not 1 <= lo <= hi:
            raise ConfigError(
                f"n_context must be (lo, hi) with 1 ≤ lo ≤ hi; got {self.n_context}."
            )
        if self.n_target < 1:
            raise ConfigError(f"n_target must be positive; got {self.n_target}.")
        for name in ("cap_km", "lengthscale", "noise"):
            a, b = getattr(self, name)
            if not 0 < a <= b:
                raise ConfigError(f"{name} must be (lo, hi) with 0 < lo ≤ hi; got {(a, b)}.")
        if not self.kernels or any(k not in _KERNELS for k in self.kernels):
            raise ConfigError(
                f"kernels must be a non-empty subset of {_KERNELS}; got {self.kernels}."
            )


def _log_uniform(key: jax.Array, bounds: tuple[float, float]) -> jax.Array:
    lo, hi = jnp.log(jnp.asarray(bounds, jnp.float32))
    return jnp.exp(jax.random.uniform(key, (), minval=lo, maxval=hi))


def _cap_points(
    key: jax.Array, n: int, radius: jax.Array, centre: jax.Array | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``n`` points uniform (by area) in a cap of angular ``radius``.

    Returns (latitude, longitude) in degrees ``[n, 2]``, unit vectors ``[n, 3]``
    and the cap's centre ``[3]`` (random unless given).
    """
    k_c, k_r, k_a = jax.random.split(key, 3)
    if centre is None:
        centre = jax.random.normal(k_c, (3,))
        centre = centre / jnp.linalg.norm(centre)
    cos_t = 1.0 - jax.random.uniform(k_r, (n,)) * (1.0 - jnp.cos(radius))
    sin_t = jnp.sqrt(jnp.maximum(1.0 - cos_t**2, 0.0))
    phi = jax.random.uniform(k_a, (n,), maxval=2 * jnp.pi)
    helper = jnp.where(
        jnp.abs(centre[2]) < 0.9, jnp.array([0.0, 0.0, 1.0]), jnp.array([1.0, 0.0, 0.0])
    )
    u = jnp.cross(centre, helper)
    u = u / jnp.linalg.norm(u)
    v = jnp.cross(centre, u)
    ring = jnp.cos(phi)[:, None] * u[None, :] + jnp.sin(phi)[:, None] * v[None, :]
    xyz = cos_t[:, None] * centre[None, :] + sin_t[:, None] * ring
    lat = jnp.rad2deg(jnp.arcsin(jnp.clip(xyz[:, 2], -1.0, 1.0)))
    lon = jnp.rad2deg(jnp.arctan2(xyz[:, 1], xyz[:, 0]))
    return jnp.stack([lat, lon], axis=-1), xyz, centre


#: Candidates per context point, and random features of the intensity field, for
#: clustered context designs (``SphereFieldTasks.cluster``).
_CLUSTER_POOL, _CLUSTER_FEATURES = 4, 64


def _clustered_context(
    key: jax.Array, n: int, cap: jax.Array, centre: jax.Array, strength: float
) -> tuple[jax.Array, jax.Array]:
    """``n`` context points in the cap, denser where a smooth random field is high.

    Gumbel top-``n`` of ``γ g(x) + Gumbel`` over ``_CLUSTER_POOL · n`` uniform
    candidates is a weighted sample without replacement with weights
    ``exp(γ g(x))``; its first ``m`` points are such a sample of size ``m``, so
    the masked (padded) tail does not change the design of the real points.
    """
    k_pool, k_len, k_w, k_b, k_a, k_gamma, k_gumbel = jax.random.split(key, 7)
    s, xyz, _ = _cap_points(k_pool, _CLUSTER_POOL * n, cap, centre)
    ell = jax.random.uniform(k_len, (), minval=0.1, maxval=0.5) * cap
    omega = jax.random.normal(k_w, (_CLUSTER_FEATURES, 3)) / ell
    phase = jax.random.uniform(k_b, (_CLUSTER_FEATURES,), maxval=2 * jnp.pi)
    weights = jax.random.normal(k_a, (_CLUSTER_FEATURES,))
    g = jnp.cos(xyz @ omega.T + phase[None, :]) @ weights * jnp.sqrt(2.0 / _CLUSTER_FEATURES)
    gamma = jax.random.uniform(k_gamma, (), maxval=strength)
    _, idx = jax.lax.top_k(gamma * g + jax.random.gumbel(k_gumbel, g.shape), n)
    return s[idx], xyz[idx]


_NU = {"matern12": 0.5, "matern32": 1.5, "matern52": 2.5, "rbf": jnp.inf}


def _fourier_field(
    key: jax.Array, xyz: jax.Array, ell: jax.Array, which: jax.Array, tasks: SphereFieldTasks
) -> jax.Array:
    """A random-Fourier-feature sample of the GP with kernel ``tasks.kernels[which]``.

    Frequencies follow the kernel's spectral density in 3-D: Gaussian for the
    RBF, multivariate Student-t with 2ν degrees of freedom for Matérn-ν
    (``z / sqrt(g / 2ν)`` with ``g ~ χ²(2ν)``), scaled by ``1 / ell``.
    """
    k_z, k_g, k_b, k_w = jax.random.split(key, 4)
    m = tasks.n_features
    nu = jnp.asarray([_NU[k] for k in tasks.kernels], jnp.float32)[which]
    finite_nu = jnp.where(jnp.isinf(nu), 1.0, nu)
    g = jax.random.gamma(k_g, finite_nu, (m,)) / finite_nu  # χ²(2ν) / 2ν
    factor = jnp.where(jnp.isinf(nu), 1.0, jax.lax.rsqrt(jnp.maximum(g, 1e-12)))
    omega = jax.random.normal(k_z, (m, 3)) * (factor / ell)[:, None]
    phase = jax.random.uniform(k_b, (m,), maxval=2 * jnp.pi)
    features = jnp.cos(xyz @ omega.T + phase[None, :]) * jnp.sqrt(2.0 / m)
    return features @ jax.random.normal(k_w, (m,))


def _trend_and_step(
    key: jax.Array, xyz: jax.Array, cap: jax.Array, tasks: SphereFieldTasks
) -> jax.Array:
    """A linear trend and a step across a line, along random directions in the cap."""
    k_d1, k_d2, k_a, k_b, k_t = jax.random.split(key, 5)
    centre = jnp.mean(xyz, axis=0)
    centre = centre / jnp.linalg.norm(centre)

    def across(k: jax.Array) -> jax.Array:  # position along a random tangent direction, ±1
        d = jax.random.normal(k, (3,))
        d = d - jnp.dot(d, centre) * centre
        return xyz @ (d / jnp.linalg.norm(d)) / jnp.sin(cap)

    slope = tasks.trend * jax.random.normal(k_a, ())
    jump = tasks.step * jax.random.normal(k_b, ())
    where = jax.random.uniform(k_t, (), minval=-0.8, maxval=0.8)
    return slope * across(k_d1) + jump * (across(k_d2) > where)


def _sphere_task(key: jax.Array, tasks: SphereFieldTasks):
    k_cap, k_len, k_noise, k_kern, k_loc, k_f, k_eps, k_n = jax.random.split(key, 8)
    n_max = tasks.n_context[1]
    n = n_max + tasks.n_target
    cap = _log_uniform(k_cap, tasks.cap_km) / EARTH_RADIUS_KM
    ell = _log_uniform(k_len, tasks.lengthscale) * cap  # on the unit sphere
    noise = _log_uniform(k_noise, tasks.noise)
    s, xyz, centre = _cap_points(k_loc, n, cap)
    if tasks.cluster:  # its own keys: the stationary draws stay as they were
        s_c, xyz_c = _clustered_context(jax.random.fold_in(key, 2), n_max, cap, centre,
                                        tasks.cluster)  # fmt: skip
        s, xyz = s.at[:n_max].set(s_c), xyz.at[:n_max].set(xyz_c)
    which = jax.random.randint(k_kern, (), 0, len(tasks.kernels))
    if tasks.method == "fourier":
        f = _fourier_field(k_f, xyz, ell, which, tasks)
    else:
        cov = jnp.select(
            [which == i for i in range(len(tasks.kernels))],
            [matern_kernel(xyz, xyz, ell, k) for k in tasks.kernels],
        )
        f = jnp.linalg.cholesky(cov + 1e-4 * jnp.eye(n)) @ jax.random.normal(k_f, (n,))
    if tasks.trend or tasks.step:  # its own keys: the stationary draws stay as they were
        f = f + _trend_and_step(jax.random.fold_in(key, 1), xyz, cap, tasks)
    y = f + noise * jax.random.normal(k_eps, (n,))
    n_ctx = jax.random.randint(k_n, (), tasks.n_context[0], n_max + 1)
    mask = jnp.arange(n_max) < n_ctx
    w = mask.astype(y.dtype)
    mean = jnp.sum(y[:n_max] * w) / n_ctx
    std = jnp.sqrt(jnp.sum(((y[:n_max] - mean) * w) ** 2) / n_ctx)
    scale = jnp.maximum(std, 1e-3)
    z = (y - mean) / scale
    params = {"kernel": which, "lengthscale": ell, "noise": noise, "mean": mean, "scale": scale,
              "cap": cap, "f_target": (f[n_max:] - mean) / scale}  # fmt: skip
    return s[:n_max], z[:n_max], mask, s[n_max:], z[n_max:], params


def sample_sphere_fields(
    key: jax.Array, tasks: SphereFieldTasks, *, batch_size: int = 8, return_params: bool = False
) -> tuple[Points, Points, jax.Array] | tuple[Points, Points, jax.Array, dict]:
    """Sample a batch of :class:`SphereFieldTasks`: ``(context, targets, target values)``.

    Target values are noisy observations, standardised like the context.  With
    ``return_params``, a dict of per-task arrays comes fourth: ``kernel`` (index
    into ``tasks.kernels``), ``lengthscale`` and ``cap`` (radians), ``noise`` (of
    the unit-variance field), the standardisation ``mean`` and ``scale``, and
    ``f_target`` (the standardised noiseless field at the targets), for an
    exact-GP oracle.  Jittable (``tasks``, ``batch_size`` and ``return_params``
    static); the context is padded to ``tasks.n_context[1]`` with a mask.
    """
    s_c, y_c, mask_c, s_t, y_t, params = jax.vmap(lambda k: _sphere_task(k, tasks))(
        jax.random.split(key, batch_size)
    )
    context = Points.from_arrays(s=s_c, f=y_c[..., None], mask=mask_c)
    out = (context, Points.from_arrays(s=s_t), y_t[..., None])
    return (*out, params) if return_params else out

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

from xnp.errors import ConfigError
from xnp.geo.distance import EARTH_RADIUS_KM, latlon_to_xyz
from xnp.points import Points

__all__ = ["GPTasks", "gp_oracle", "rbf_kernel", "sample_gp_batch"]


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
    >>> ctx, tgt, y = sample_gp_batch(jax.random.key(0), tasks, batch_size=2)
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

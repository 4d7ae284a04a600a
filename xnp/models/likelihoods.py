"""Gaussian predictive head and the losses and scores computed from it."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = ["gaussian_crps", "gaussian_from_raw", "gaussian_nll", "masked_mean"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def gaussian_from_raw(raw: jax.Array, *, min_std: float) -> tuple[jax.Array, jax.Array]:
    """Split head outputs ``[..., 2·Dy]`` into mean and standard deviation ``[..., Dy]``.

    ``std = min_std + (1 - min_std) · softplus(raw_std)``, the bounded form of the
    TNP-KR paper, so the standard deviation never falls below ``min_std``.

    Examples
    --------
    >>> mean, std = gaussian_from_raw(jnp.zeros((3, 2)), min_std=0.1)
    >>> round(float(std[0, 0]), 4)  # 0.1 + 0.9 * log 2
    0.7238
    """
    mean, raw_std = jnp.split(raw, 2, axis=-1)
    std = min_std + (1.0 - min_std) * jax.nn.softplus(raw_std)
    return mean, std


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``values`` ``[B, N, ...]`` over the points where ``mask`` ``[B, N]`` is True.

    Returns 0 when no point is valid (instead of NaN).
    """
    m = mask.reshape(mask.shape + (1,) * (values.ndim - mask.ndim)).astype(values.dtype)
    m = jnp.broadcast_to(m, values.shape)
    return jnp.sum(values * m) / jnp.maximum(jnp.sum(m), 1.0)


def gaussian_nll(
    mean: jax.Array, std: jax.Array, y: jax.Array, mask: jax.Array | None = None
) -> jax.Array:
    """Mean Gaussian negative log-likelihood per valid target point and channel.

    This is the scale every NP paper reports (nats per point).

    Examples
    --------
    >>> float(gaussian_nll(jnp.zeros((1, 2, 1)), jnp.ones((1, 2, 1)), jnp.zeros((1, 2, 1))))
    0.9189385...
    """
    z = (y - mean) / std
    nll = 0.5 * z * z + jnp.log(std) + _HALF_LOG_2PI
    if mask is None:
        return jnp.mean(nll)
    return masked_mean(nll, mask)


def gaussian_crps(
    mean: jax.Array, std: jax.Array, y: jax.Array, mask: jax.Array | None = None
) -> jax.Array:
    """Mean continuous ranked probability score of Gaussian predictions (closed form).

    ``CRPS(N(μ, σ²), y) = σ [z (2Φ(z) − 1) + 2φ(z) − 1/√π]`` with ``z = (y − μ)/σ``
    (Gneiting and Raftery 2007), per valid target point and channel, in the units
    of ``y``.  A proper score, like the NLL, but it grows linearly with the error
    rather than quadratically, so a few badly predicted points weigh less.

    Examples
    --------
    >>> round(
    ...     float(gaussian_crps(jnp.zeros((1, 1, 1)), jnp.ones((1, 1, 1)), jnp.zeros((1, 1, 1)))),
    ...     6,
    ... )  # (√2 − 1)/√π
    0.233695
    """
    z = (y - mean) / std
    cdf = 0.5 * (1.0 + jax.lax.erf(z * _INV_SQRT_2))
    pdf = _INV_SQRT_2PI * jnp.exp(-0.5 * z * z)
    crps = std * (z * (2.0 * cdf - 1.0) + 2.0 * pdf - _INV_SQRT_PI)
    if mask is None:
        return jnp.mean(crps)
    return masked_mean(crps, mask)

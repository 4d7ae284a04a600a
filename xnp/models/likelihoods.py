"""Gaussian predictive head and the losses and scores computed from it."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = ["gaussian_from_raw", "gaussian_nll", "masked_mean"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


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

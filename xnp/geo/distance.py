"""Distances on the sphere, in the plane and in time.

All spherical functions take latitude and longitude in degrees and are written so
that they stay accurate in float32 for tiny separations (no ``1 - cos``
cancellation) and for antipodal points (no ``arccos``/``arcsin`` of a value near
one): the central angle is ``atan2(|a × b|, a · b)`` of the unit vectors, which is
well conditioned everywhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "EARTH_RADIUS_KM",
    "central_angle_xyz",
    "euclidean_distance",
    "great_circle_distance",
    "latlon_to_xyz",
    "pairwise_central_angle",
    "squared_euclidean_distance",
    "temporal_distance",
    "wrap_longitude",
]

#: Mean Earth radius (IUGG), in kilometres.
EARTH_RADIUS_KM = 6371.0088

ArrayLike = jax.Array | np.ndarray | float

_TINY = 1e-30  # floor under square roots: a 1e-15 rad (nanometre) offset, finite gradients


def wrap_longitude(lon: ArrayLike, *, centre: float = 0.0) -> jax.Array:
    """Wrap longitudes in degrees into ``[centre - 180, centre + 180)``.

    Examples
    --------
    >>> wrap_longitude(jnp.array([190.0, -190.0, 360.0]))
    Array([-170.,  170.,    0.], dtype=float32)
    """
    lon = jnp.asarray(lon)
    return (lon - centre + 180.0) % 360.0 - 180.0 + centre


def latlon_to_xyz(lat: ArrayLike, lon: ArrayLike) -> jax.Array:
    """Unit-sphere Cartesian coordinates of latitude/longitude in degrees.

    Returns an array with a trailing axis of size 3 (x, y, z); z points to the
    North Pole and x to (0°N, 0°E).

    Examples
    --------
    >>> latlon_to_xyz(90.0, 0.0).round(6)
    Array([0., 0., 1.], dtype=float32)
    """
    phi = jnp.deg2rad(jnp.asarray(lat))
    lam = jnp.deg2rad(jnp.asarray(lon))
    cos_phi = jnp.cos(phi)
    return jnp.stack([cos_phi * jnp.cos(lam), cos_phi * jnp.sin(lam), jnp.sin(phi)], axis=-1)


def central_angle_xyz(a: jax.Array, b: jax.Array) -> jax.Array:
    """Central angle in radians between unit vectors ``a`` and ``b`` (last axis 3).

    Uses ``atan2(|a × b|, a · b)``, accurate to float precision for every
    separation from zero to antipodal.  Broadcasts over leading axes.
    """
    ax, ay, az = a[..., 0], a[..., 1], a[..., 2]
    bx, by, bz = b[..., 0], b[..., 1], b[..., 2]
    cx = ay * bz - az * by
    cy = az * bx - ax * bz
    cz = ax * by - ay * bx
    cross = jnp.sqrt(cx * cx + cy * cy + cz * cz)
    dot = ax * bx + ay * by + az * bz
    return jnp.arctan2(cross, dot)


def _arcsin_unit(x: jax.Array, one_minus_x_half: jax.Array) -> jax.Array:
    """``arcsin(x)`` for ``x`` in [0, 1], given ``(1 - x) / 2`` computed without cancellation.

    A float32-accurate (≈1 ulp) odd polynomial on [0, 1/2] and the half-angle
    identity ``arcsin(x) = π/2 - 2 arcsin(√((1 - x)/2))`` above; the coefficients
    are Cephes' ``asinf`` minimax fit.  Only multiply-adds, a square root and
    selects: it vectorises, unlike a libm call, which matters when it runs once per
    pair of points in an attention tile.
    """
    big = x > 0.5
    z = jnp.where(big, one_minus_x_half, x * x)
    # the floor keeps the square root's gradient finite at z = 0 (value error 1e-15)
    r = jnp.where(big, jnp.sqrt(jnp.maximum(z, _TINY)), x)
    poly = 4.2163199048e-2 * z + 2.4181311049e-2
    poly = poly * z + 4.5470025998e-2
    poly = poly * z + 7.4953002686e-2
    poly = poly * z + 1.6666752422e-1
    p = poly * z * r + r
    return jnp.where(big, 0.5 * jnp.pi - 2.0 * p, p)


def pairwise_central_angle(a: jax.Array, b: jax.Array) -> jax.Array:
    """Central angles ``[B, q, k]`` between unit vectors ``a`` ``[B, q, 3]``, ``b`` ``[B, k, 3]``.

    ``θ = 2 arcsin(c / 2)`` from the chord ``c = |a - b|``, with ``|a + b|`` giving
    ``(1 - c/2)/2`` without cancellation near antipodes: accurate for every
    separation, and several times faster per pair than ``atan2``-based forms
    because everything is multiply-adds on ``[B, q, k]`` arrays.

    Examples
    --------
    >>> a = latlon_to_xyz(jnp.array([[0.0]]), jnp.array([[0.0]]))
    >>> b = latlon_to_xyz(jnp.array([[0.0, 0.0]]), jnp.array([[90.0, 180.0]]))
    >>> pairwise_central_angle(a, b) / jnp.pi
    Array([[[0.5, 1. ]]], dtype=float32)
    """
    diff = [a[..., i][:, :, None] - b[..., i][:, None, :] for i in range(3)]
    summ = [a[..., i][:, :, None] + b[..., i][:, None, :] for i in range(3)]
    c2 = diff[0] * diff[0] + diff[1] * diff[1] + diff[2] * diff[2]
    s2 = summ[0] * summ[0] + summ[1] * summ[1] + summ[2] * summ[2]  # = 4 - c²
    c = jnp.sqrt(jnp.maximum(c2, _TINY))  # the floor keeps the gradient finite at c = 0
    # (1 - c/2)/2 = (4 - c²) / (4 (2 + c))
    return 2.0 * _arcsin_unit(jnp.minimum(0.5 * c, 1.0), s2 / (4.0 * (2.0 + c)))


def great_circle_distance(
    lat1: ArrayLike,
    lon1: ArrayLike,
    lat2: ArrayLike,
    lon2: ArrayLike,
    *,
    radius: float = EARTH_RADIUS_KM,
) -> jax.Array:
    """Great-circle distance between points given in degrees, in units of ``radius``.

    With the default radius the result is in kilometres.  Inputs broadcast
    against each other.  The formula works on coordinate differences, so it keeps
    float32 inputs' own resolution for nearby points, and on an ``atan2``, so it is
    accurate up to antipodal points.  Longitudes need not be wrapped: ``x`` and
    ``x + 360`` give the same distance.

    Examples
    --------
    >>> round(float(great_circle_distance(0.0, 0.0, 0.0, 180.0)), 1)  # π R
    20015.1
    >>> int(great_circle_distance(51.5074, -0.1278, 48.8566, 2.3522))  # London–Paris, km
    343
    """
    phi1, phi2 = jnp.deg2rad(jnp.asarray(lat1)), jnp.deg2rad(jnp.asarray(lat2))
    # differences first, in degrees: exact for nearby points (no cancellation later)
    dphi = jnp.deg2rad(jnp.asarray(lat2) - jnp.asarray(lat1))
    dlam = jnp.deg2rad(jnp.asarray(lon2) - jnp.asarray(lon1))
    cos1, cos2 = jnp.cos(phi1), jnp.cos(phi2)
    half = jnp.sin(0.5 * dlam)
    h = 2.0 * half * half  # 1 - cos Δλ, without cancellation
    # Vincenty's atan2 form, with cos φ1 sin φ2 - sin φ1 cos φ2 cos Δλ and
    # sin φ1 sin φ2 + cos φ1 cos φ2 cos Δλ rewritten around Δφ so that both stay
    # accurate for tiny separations; atan2 keeps antipodes accurate.
    north = jnp.sin(dphi) + jnp.sin(phi1) * cos2 * h
    east = cos2 * jnp.sin(dlam)
    across = jnp.cos(dphi) - cos1 * cos2 * h
    return radius * jnp.arctan2(jnp.sqrt(east * east + north * north), across)


def squared_euclidean_distance(a: jax.Array, b: jax.Array) -> jax.Array:
    """Squared Euclidean distance along the last axis, broadcasting leading axes."""
    diff = a - b
    return jnp.sum(diff * diff, axis=-1)


def euclidean_distance(a: jax.Array, b: jax.Array) -> jax.Array:
    """Euclidean distance along the last axis (planar or projected coordinates).

    Examples
    --------
    >>> float(euclidean_distance(jnp.array([0.0, 0.0]), jnp.array([3.0, 4.0])))
    5.0
    """
    return jnp.sqrt(squared_euclidean_distance(a, b))


def temporal_distance(t1: ArrayLike, t2: ArrayLike) -> jax.Array:
    """Absolute time difference ``|t1 - t2|`` (hours in, hours out).

    Examples
    --------
    >>> float(temporal_distance(6.0, -18.0))
    24.0
    """
    return jnp.abs(jnp.asarray(t1) - jnp.asarray(t2))

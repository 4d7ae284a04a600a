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
    "pairwise_sq_central_angle",
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


# arcsin(√u) / √u = 1 + u·P(u) on u ∈ [0, 1/2]: least-squares fit on Chebyshev nodes
# (float64), relative error of arcsin below 1e-8 in float32 Horner evaluation
_ASIN_RATIO = (
    0.16666627, 0.07502463, 0.04412134, 0.0356585,
    -0.00657315, 0.10670699, -0.13540055, 0.12378763,
)  # fmt: skip


def _half_angle_terms(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``near, u, g`` for unit vectors ``a`` ``[B, q, 3]`` and ``b`` ``[B, k, 3]``.

    With the chord ``c = |a - b|`` and ``s = |a + b|`` (``c² + s² = 4``), the
    central angle is ``θ = 2 arcsin(c/2)`` and also ``π - 2 arcsin(s/2)``.  The
    shorter of the two chords keeps the arcsine's argument ``√u`` at most
    ``1/√2`` (``u = min(c², s²)/4``), where one polynomial is float32-accurate,
    and both chords come from coordinate differences and sums, without the
    cancellation of ``1 - a·b`` for nearby (or antipodal) points.  ``near`` is
    ``θ ≤ 90°``; ``g = arcsin(√u)/√u``.
    """
    diff = [a[..., i][:, :, None] - b[..., i][:, None, :] for i in range(3)]
    summ = [a[..., i][:, :, None] + b[..., i][:, None, :] for i in range(3)]
    c2 = diff[0] * diff[0] + diff[1] * diff[1] + diff[2] * diff[2]
    s2 = summ[0] * summ[0] + summ[1] * summ[1] + summ[2] * summ[2]
    near = c2 <= s2
    u = 0.25 * jnp.where(near, c2, s2)
    poly = jnp.asarray(_ASIN_RATIO[-1], u.dtype)
    for coef in _ASIN_RATIO[-2::-1]:
        poly = poly * u + coef
    return near, u, 1.0 + u * poly


def pairwise_central_angle(a: jax.Array, b: jax.Array) -> jax.Array:
    """Central angles ``[B, q, k]`` between unit vectors ``a`` ``[B, q, 3]``, ``b`` ``[B, k, 3]``.

    ``θ = 2 arcsin(c / 2)`` from the chord ``c = |a - b|``, or ``π - 2 arcsin(s/2)``
    from ``s = |a + b|`` beyond 90°: accurate for every separation (coordinate
    differences, no ``1 - a·b`` cancellation), with one square root and a
    polynomial per pair, several times faster than ``atan2``-based forms because
    everything is multiply-adds on ``[B, q, k]`` arrays.

    Examples
    --------
    >>> a = latlon_to_xyz(jnp.array([[0.0]]), jnp.array([[0.0]]))
    >>> b = latlon_to_xyz(jnp.array([[0.0, 0.0]]), jnp.array([[90.0, 180.0]]))
    >>> pairwise_central_angle(a, b) / jnp.pi
    Array([[[0.5, 1. ]]], dtype=float32)
    """
    near, u, g = _half_angle_terms(a, b)
    # the floor keeps the square root's gradient finite at u = 0 (value error 1e-15)
    half = jnp.sqrt(jnp.maximum(u, _TINY)) * g
    return jnp.where(near, 2.0 * half, jnp.pi - 2.0 * half)


def pairwise_sq_central_angle(a: jax.Array, b: jax.Array) -> jax.Array:
    """Squared central angles ``θ²`` ``[B, q, k]`` (see :func:`pairwise_central_angle`).

    What distance-based attention biases need: up to 90° it is ``4 u g²`` with no
    square root at all (smooth at zero separation), beyond it ``(π - 2√u g)²``;
    one square root per pair instead of the two and a division of
    ``pairwise_central_angle(a, b) ** 2`` computed the obvious way.

    Examples
    --------
    >>> a = latlon_to_xyz(jnp.array([[0.0]]), jnp.array([[0.0]]))
    >>> b = latlon_to_xyz(jnp.array([[0.0, 0.0]]), jnp.array([[90.0, 180.0]]))
    >>> pairwise_sq_central_angle(a, b) / jnp.pi**2
    Array([[[0.25, 1.  ]]], dtype=float32)
    """
    near, u, g = _half_angle_terms(a, b)
    far = jnp.pi - 2.0 * jnp.sqrt(jnp.maximum(u, _TINY)) * g
    return jnp.where(near, 4.0 * u * g * g, far * far)


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

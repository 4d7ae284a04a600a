"""Attention biases from distances: RBF networks in space and time.

The bias of head ``h`` between query point ``i`` and key point ``j`` is::

    B_ij^(h) = Σ_f a_hf · exp(-b_hf · (d_s(i, j) / L_s)²)          (space)
             + Σ_f a'_hf · exp(-b'_hf · (|t_i - t_j| / L_t)²)       (time)

(BSA-TNP, Eq. 4), with learnable ``a`` and ``b`` per head and per layer; ``b`` is
kept positive through a softplus.  ``d_s`` is the great-circle distance (km) for
latitude/longitude, or the Euclidean distance for planar coordinates.  Each
distance is divided by a length scale ``L`` (e.g. 1000 km, 24 h) before the basis
functions, so the initial values are well conditioned whatever the data's units.
On the sphere the squared central angle comes from the chord through a vectorised,
float32-accurate arcsine (:func:`xnp.geo.pairwise_sq_central_angle`).

Distances are evaluated once per attention tile and shared by every head and basis
function.  Point coordinates are converted once per forward pass
(:meth:`SpaceTimeBias.features`), so a tile only does a few multiply-adds per pair
(plus one square root and a short polynomial on the sphere) before the exponentials.
On the CPU the RBF network and its gradient run in native kernels
(:mod:`xnp.nn.native`), which evaluate each exponential once; elsewhere, in JAX.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.custom_derivatives import SymbolicZero

from xnp.errors import ConfigError
from xnp.geo.distance import EARTH_RADIUS_KM, latlon_to_xyz, pairwise_sq_central_angle
from xnp.nn import native

__all__ = ["RBFBias", "RBFSpec", "SpaceTimeBias", "pairwise_sq_distance", "rescaled_rates"]

SpatialMetric = Literal["great_circle", "euclidean", "none"]


def _inverse_softplus(y: np.ndarray) -> np.ndarray:
    return y + np.log(-np.expm1(-y))


def rescaled_rates(b_raw: jax.Array, factor: float) -> jax.Array:
    """Raw rates of an :class:`RBFBias` that reads every distance as ``1/factor`` as long.

    The basis functions are ``exp(-b (d / L)²)``, so multiplying the length ``L`` by
    ``factor`` is dividing each rate ``b = softplus(b_raw)`` by ``factor²``: the
    same bias, with no change to the compiled model.  Computed in float64 and
    returned in the dtype of ``b_raw``.

    Examples
    --------
    >>> raw = jnp.asarray(_inverse_softplus(np.array([0.5, 4.0])), jnp.float32)
    >>> np.round(np.asarray(jax.nn.softplus(rescaled_rates(raw, 2.0))), 4)
    array([0.125, 1.   ], dtype=float32)
    """
    b = np.logaddexp(0.0, np.asarray(b_raw, np.float64))  # softplus, without overflow
    return jnp.asarray(_inverse_softplus(b / float(factor) ** 2), b_raw.dtype)


class RBFBias(nnx.Module):
    """RBF network ``Σ_f a_hf exp(-b_hf z)`` of a squared scaled distance ``z``.

    Parameters
    ----------
    n_heads : int
        Number of attention heads; each has its own weights.
    n_basis : int
        Number of basis functions ``F`` per head.
    b_range : tuple of float
        The initial rates ``b`` are log-spaced over this range (in units of the
        scaled distance), staggered across heads, so the basis functions start
        distinct and cover short to long ranges.  (Initialising every ``b`` to the
        same value, as the reference code does, leaves the basis functions
        identical forever: they receive identical gradients.)
    rngs : nnx.Rngs
        Unused (the initialisation is deterministic); accepted for uniformity.

    Examples
    --------
    >>> bias = RBFBias(n_heads=2, n_basis=3, rngs=nnx.Rngs(0))
    >>> bias(jnp.zeros((1, 4, 5))).shape
    (1, 2, 4, 5)
    """

    def __init__(
        self,
        n_heads: int,
        n_basis: int,
        *,
        b_range: tuple[float, float] = (0.25, 16.0),
        rngs: nnx.Rngs | None = None,
    ):
        del rngs
        if n_heads < 1 or n_basis < 1:
            raise ConfigError(f"RBFBias needs n_heads, n_basis ≥ 1; got {n_heads}, {n_basis}.")
        lo, hi = np.log(b_range[0]), np.log(b_range[1])
        grid = np.linspace(lo, hi, n_basis * n_heads).reshape(n_basis, n_heads).T
        self.a = nnx.Param(jnp.ones((n_heads, n_basis), jnp.float32))
        self.b_raw = nnx.Param(jnp.asarray(_inverse_softplus(np.exp(grid)), jnp.float32))

    @property
    def b(self) -> jax.Array:
        """The positive rates ``b`` (softplus of the raw parameter)."""
        return jax.nn.softplus(self.b_raw[...])

    def weights(self) -> tuple[jax.Array, jax.Array]:
        """``(a, b)`` as plain arrays ``[H, F]``, for use in a pure bias function."""
        return self.a[...], self.b

    @staticmethod
    def apply(a: jax.Array, b: jax.Array, z: jax.Array) -> jax.Array:
        """``[B, q, k]`` squared distances → ``[B, H, q, k]`` bias, for weights ``a, b``.

        Differentiable in ``a``, ``b`` and ``z``; the backward pass recomputes the
        exponentials instead of storing ``H·F`` residual tiles (see :func:`_rbf`).
        """
        return _rbf(a, b, z)

    def __call__(self, z: jax.Array) -> jax.Array:
        """Bias ``[B, H, q, k]`` for squared scaled distances ``z`` of shape ``[B, q, k]``."""
        return self.apply(*self.weights(), z)


@jax.custom_vjp
def _rbf(a: jax.Array, b: jax.Array, z: jax.Array) -> jax.Array:
    # on the CPU a native kernel (one pass, a faster exponential); elsewhere JAX
    return native.rbf_bias(a, b, z)


def _rbf_fwd(a, b, z):
    # Residuals are the weights and the [B, q, k] distances only: storing the H·F
    # exponential tiles autodiff would keep costs far more memory traffic than
    # recomputing them in the backward pass.  Whether z needs a cotangent is
    # kept as pytree structure (() or None), not as an array.
    need_dz = () if z.perturbed else None
    a, b, z = a.value, b.value, z.value
    return _rbf(a, b, z), (a, b, z, need_dz)


def _rbf_bwd(res, g):
    a, b, z, need_dz = res
    want_dz = need_dz is not None
    if isinstance(g, SymbolicZero):
        return jnp.zeros_like(a), jnp.zeros_like(b), jnp.zeros_like(z) if want_dz else None
    # one pass over the tile on the CPU (native kernel), the same sums in JAX elsewhere
    return native.rbf_grad(a, b, z, g, want_dz=want_dz)


_rbf.defvjp(_rbf_fwd, _rbf_bwd, symbolic_zeros=True)


def pairwise_sq_distance(
    metric: SpatialMetric, a: jax.Array, b: jax.Array, *, scale: float = 1.0
) -> jax.Array:
    """Squared scaled distances ``[B, q, k]`` between prepared features.

    ``a`` ``[B, q, C]`` and ``b`` ``[B, k, C]`` are outputs of
    :meth:`SpaceTimeBias.features`: unit vectors on the sphere (the central angle
    is multiplied by ``scale``, e.g. ``R / L``), or coordinates already divided
    by ``L`` in the plane or in time (``scale`` is ignored).
    """
    if metric == "great_circle":

        def fn(a: jax.Array, b: jax.Array) -> jax.Array:
            return pairwise_sq_central_angle(a, b) * jnp.asarray(scale * scale, a.dtype)

        return _once_per_pair(fn, a, b)

    def fn(a: jax.Array, b: jax.Array) -> jax.Array:
        # unrolled over the (few) coordinates: a reduction over a short minor axis
        # becomes a slow library reduction of its own on CPU
        out = 0.0
        for c in range(a.shape[-1]):
            diff = a[..., c][:, :, None] - b[..., c][:, None, :]
            out = out + diff * diff
        return out

    return _once_per_pair(fn, a, b)


def _once_per_pair(fn: Callable, a: jax.Array, b: jax.Array) -> jax.Array:
    """``fn(a, b)`` ``[B, q, k]``, evaluated so that it is computed once per pair.

    Left to itself, XLA fuses a cheap distance into each of the ``H·F``
    exponentials that read it and so recomputes it ``H·F`` times (per head and
    basis function) from the strided coordinates.  Computing the two halves of the
    query rows in a (two-step) loop makes the result a buffer of its own that the
    exponentials read instead: a quarter less time for great-circle biased attention
    on a CPU (forward; 12 % forward and backward).
    """
    if a.shape[0] > 1:  # one batch element per step: stacks without a transpose
        return jax.lax.map(lambda ab: fn(ab[0][None], ab[1][None])[0], (a, b))
    q = a.shape[1]
    if q < 2 or q % 2:
        return fn(a, b)
    halves = jnp.moveaxis(a.reshape(a.shape[0], 2, q // 2, *a.shape[2:]), 1, 0)
    z = jax.lax.map(lambda h: fn(h, b), halves)  # [2, B, q/2, k]
    return jnp.moveaxis(z, 0, 1).reshape(a.shape[0], q, b.shape[1])


@dataclasses.dataclass(frozen=True)
class RBFSpec:
    """What a :class:`SpaceTimeBias` computes, apart from its weights (hashable, static).

    ``metric`` is the spatial metric, ``gc_scale`` the factor from the central angle
    to the scaled distance (``R / L_s``; used on the sphere), ``temporal`` whether a
    time term follows.  :meth:`bias` evaluates the bias for explicit weights:
    ``(a, b)`` of the spatial RBF network (unless ``metric == "none"``), then
    ``(a, b)`` of the temporal one (if ``temporal``).
    """

    metric: SpatialMetric
    gc_scale: float
    temporal: bool

    def bias(self, qf: dict, kf: dict, *weights: jax.Array) -> jax.Array:
        """Bias ``[B, H, q, k]`` between features ``qf`` and ``kf`` for ``weights``."""
        out, w = 0.0, list(weights)
        if self.metric != "none":
            z = pairwise_sq_distance(self.metric, qf["s"], kf["s"], scale=self.gc_scale)
            out = out + RBFBias.apply(w.pop(0), w.pop(0), z)
        if self.temporal:
            z = pairwise_sq_distance("euclidean", qf["t"], kf["t"])
            out = out + RBFBias.apply(w.pop(0), w.pop(0), z)
        return out


class SpaceTimeBias(nnx.Module):
    """Sum of a spatial and a temporal RBF bias for one attention layer.

    Parameters
    ----------
    n_heads : int
        Attention heads.
    spatial : {"great_circle", "euclidean", "none"}
        Spatial metric.  ``"great_circle"`` reads ``s`` as (latitude, longitude)
        in degrees and measures kilometres; ``"euclidean"`` reads ``s`` as planar
        coordinates.
    spatial_scale : float
        Length ``L_s`` that distances are divided by (km, or coordinate units).
    n_basis_space : int
        Spatial basis functions per head (paper: 5).
    temporal : bool
        Whether to add the temporal bias on ``|Δt|``.
    temporal_scale : float
        Length ``L_t`` in hours.
    n_basis_time : int
        Temporal basis functions per head (paper: 3).

    Examples
    --------
    >>> bias = SpaceTimeBias(2, spatial="great_circle", temporal=True, rngs=nnx.Rngs(0))
    >>> s = jnp.array([[[51.5, -0.1], [48.9, 2.4], [40.7, -74.0]]])
    >>> feats = bias.features(s, jnp.zeros((1, 3, 1)))
    >>> bias(feats, feats).shape
    (1, 2, 3, 3)
    """

    def __init__(
        self,
        n_heads: int,
        *,
        spatial: SpatialMetric = "great_circle",
        spatial_scale: float = 1000.0,
        n_basis_space: int = 5,
        temporal: bool = False,
        temporal_scale: float = 24.0,
        n_basis_time: int = 3,
        rngs: nnx.Rngs | None = None,
    ):
        if spatial not in ("great_circle", "euclidean", "none"):
            raise ConfigError(
                f"spatial metric must be 'great_circle', 'euclidean' or 'none'; got {spatial!r}."
            )
        if spatial_scale <= 0 or temporal_scale <= 0:
            raise ConfigError("spatial_scale and temporal_scale must be positive.")
        self.spatial = spatial
        self.temporal = temporal
        self.spatial_scale = float(spatial_scale)
        self.temporal_scale = float(temporal_scale)
        self.space = RBFBias(n_heads, n_basis_space, rngs=rngs) if spatial != "none" else None
        self.time = RBFBias(n_heads, n_basis_time, rngs=rngs) if temporal else None

    @property
    def active(self) -> bool:
        """False when the layer has no bias at all."""
        return self.space is not None or self.time is not None

    def features(self, s: jax.Array, t: jax.Array) -> dict[str, jax.Array]:
        """Per-point features ``{"s": [B, N, C], "t": [B, N, 1]}`` for the bias tiles."""
        feats = {}
        if self.spatial == "great_circle":
            feats["s"] = latlon_to_xyz(s[..., 0], s[..., 1])
        elif self.spatial == "euclidean":
            feats["s"] = s / jnp.asarray(self.spatial_scale, s.dtype)
        if self.temporal:
            feats["t"] = t / jnp.asarray(self.temporal_scale, t.dtype)
        return feats

    def spec(self) -> RBFSpec:
        """The static description of this bias (metric, scales, which parts exist)."""
        return RBFSpec(
            metric=self.spatial,
            gc_scale=EARTH_RADIUS_KM / self.spatial_scale,  # central angle → d / L_s
            temporal=self.temporal,
        )

    def bind(self) -> Callable[[dict, dict], jax.Array]:
        """A pure ``bias_fn(q_feats, k_feats) -> [B, H, q, k]`` closing over the weights.

        This is the form :func:`xnp.nn.attention.biased_scan_attention` takes.  It
        carries ``native_rbf = (spec, weights)``, with which that function computes
        the whole biased attention in one native kernel on the CPU.
        """
        weights = tuple(
            x for rbf in (self.space, self.time) if rbf is not None for x in rbf.weights()
        )
        spec = self.spec()

        def bias_fn(qf: dict, kf: dict) -> jax.Array:
            return spec.bias(qf, kf, *weights)

        bias_fn.native_rbf = (spec, weights)
        return bias_fn

    def bounds(self) -> tuple[jax.Array, jax.Array]:
        """Lower and upper bounds ``[H]`` of the bias over all pairs of points.

        Each basis function lies in (0, 1], so head ``h`` is bounded by the sums
        of the negative and of the positive weights ``a_hf``.  Biased Scan
        Attention uses them to avoid a separate pass over the biased scores.
        """
        lo, hi = 0.0, 0.0
        for rbf in (self.space, self.time):
            if rbf is not None:
                a = rbf.a[...]
                lo = lo + jnp.sum(jnp.minimum(a, 0.0), axis=-1)
                hi = hi + jnp.sum(jnp.maximum(a, 0.0), axis=-1)
        return lo, hi

    def __call__(self, q_feats: dict, k_feats: dict) -> jax.Array:
        """Dense bias ``[B, H, q, k]`` between all query and key points."""
        return self.bind()(q_feats, k_feats)

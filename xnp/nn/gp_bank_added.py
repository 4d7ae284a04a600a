"""A GP bank's context grown by one point per batch entry, by a block update of its inverse.

Sensor placement tries thousands of candidate sites, each added to the same context.
Conditioning the bank (:mod:`xnp.nn.gp_bank`) on each grown context refactors every
member's ``N × N`` covariance and costs ``O(K N²)`` per target and candidate; but
one added point changes the inverse by a block of rank one.  With ``A = K⁻¹`` the
base context's inverse (one member), ``k`` the new point's correlations with the
context and ``g`` the member's nugget,

* ``u = A k`` and ``s = 1 + g − kᵀu`` (the variance of a new observation at the
  point, given the context; at least ``g``);
* the grown inverse is ``[[A + u uᵀ / s, −u / s], [−uᵀ / s, 1 / s]]`` (the block
  inverse through the Schur complement ``s``), so with ``δ = y_new − kᵀα``
  (``α = A y``) the grown ``α`` is ``[α − u δ / s, δ / s]`` and its diagonal
  ``[diag A + u² / s, 1 / s]``, which give the leave-one-out features;
* at a target with correlations ``q`` to the context and ``r`` to the new point,
  with ``w = r − qᵀu``: mean ``qᵀα + w δ / s`` and variance reduction
  ``qᵀA q + w² / s``.

The base context's terms at the targets (``qᵀα``, ``qᵀA q``) are computed once for
the whole batch when every entry has the same targets (as placement's region), so
a candidate costs ``O(K N (N + M))`` instead of ``O(K N² M)``.

The members' lengthscales are the base context's (a fraction of *its* spread, as
:func:`~xnp.nn.gp_bank.condition_bank` sets them) and are held fixed: adding a point
to a context of ``N`` moves the spread by about ``1 / N`` of itself, and the exact
grown context's bank would refactor every matrix.  With that lengthscale given to
:func:`~xnp.nn.gp_bank.condition_bank` (its ``lengthscale=``), conditioning on the
grown context is the slow reference that these formulas reproduce.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from xnp.errors import ShapeError
from xnp.nn.gp_bank import (
    MIN_VAR,
    GPBankState,
    correlations_to,
    covariance,
    member_correlations,
    nuggets,
    pairwise_distance,
)

__all__ = ["GPBankAdded", "add_point", "predict_added"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GPBankAdded:
    """One base context grown by one point per batch entry (what targets need).

    Attributes
    ----------
    base : GPBankState
        The bank conditioned on the base context (batch 1).
    x_new : array ``[B, C]``
        The added point of each batch entry.
    u : array ``[B, K, N]``
        ``A k`` per member: the base inverse times the new point's correlations.
    s : array ``[B, K]``
        The Schur complements ``1 + g − kᵀ A k``.
    delta : array ``[B, K]``
        ``y_new − kᵀ α``: the new value less the base context's mean there.
    """

    base: GPBankState
    x_new: jax.Array
    u: jax.Array
    s: jax.Array
    delta: jax.Array


def add_point(
    base: GPBankState,
    x_new: jax.Array,
    y_new: jax.Array,
    members: tuple[tuple[str, float, float], ...],
) -> tuple[GPBankAdded, jax.Array]:
    """Grow the one context of ``base`` by the point ``x_new[b]`` in each batch entry.

    Parameters
    ----------
    base : GPBankState
        :func:`~xnp.nn.gp_bank.condition_bank` of one context (batch 1, ``N`` points).
    x_new : array ``[B, C]``
        One new point per batch entry (bias features, as the context's).
    y_new : array ``[B]`` or ``[B, K]``
        Its value (standardised; ``[B, K]``: each member's own, as ``base.y``).
    members : tuple of (kind, fraction, nugget)
        The bank's members, as ``base`` was conditioned with.

    Returns
    -------
    state : GPBankAdded
    features : array ``[B, N + 1, 2 K]``
        The leave-one-out features of the grown contexts, the new point last (zero at
        the base's padding): :func:`~xnp.nn.gp_bank.condition_bank`'s, with the base's
        lengthscales.

    Examples
    --------
    >>> from xnp.nn.gp_bank import condition_bank
    >>> x = jnp.asarray([[[0.0, 0.0, 1.0], [0.0, 0.1, 0.995]]])
    >>> members = (("matern52", 1.0, 0.01),)
    >>> base, _ = condition_bank(x, jnp.asarray([[0.5, 0.4]]), jnp.ones((1, 2), bool), members)
    >>> state, feats = add_point(base, jnp.asarray([[0.1, 0.0, 0.995]] * 3), jnp.zeros(3), members)
    >>> feats.shape
    (3, 3, 2)
    """
    if base.x.shape[0] != 1:
        raise ShapeError(f"add_point grows one base context; got a batch of {base.x.shape[0]}.")
    x_new = jax.lax.stop_gradient(x_new.astype(jnp.float32))
    y_new = jax.lax.stop_gradient(y_new.astype(jnp.float32))
    y_new = y_new[:, None] if y_new.ndim == 1 else y_new  # [B, K] or [B, 1]
    nugget = nuggets(members)
    a, alpha = base.inverse[0], base.alpha[0]  # [K, N, N], [K, N]
    k = correlations_to(base, x_new[:, None], members)[:, :, 0]  # [B, K, N]
    # kᵀ A k is close to 1 + g where a point is well predicted, and the float32 error of
    # the explicit inverse (its condition number times the rounding) would swamp the
    # small difference s: one step of iterative refinement against the covariance
    # makes u = A k accurate (u ← u + A (k − K u)), and s is taken as kᵀ u
    cov = covariance(base.x, base.mask, base.lengthscale, members)[0]
    u = jnp.einsum("kij,bkj->bki", a, k)
    u = u + jnp.einsum("kij,bkj->bki", a, k - jnp.einsum("kij,bkj->bki", cov, u))
    s = jnp.maximum(1.0 + nugget[None] - jnp.sum(k * u, axis=-1), nugget[None])
    delta = y_new - jnp.einsum("bkn,kn->bk", k, alpha)
    alpha_old = alpha[None] - u * (delta / s)[..., None]
    diag_old = jnp.diagonal(a, axis1=-2, axis2=-1)[None] + u * u / s[..., None]
    loo_old = base.y - alpha_old / diag_old  # [B, K, N]
    loo_new = y_new - delta  # [B, K]: the base's mean at the point
    means = jnp.concatenate([loo_old, loo_new[..., None]], axis=-1)
    diags = jnp.concatenate([diag_old, (1.0 / s)[..., None]], axis=-1)
    logstd = -0.5 * jnp.log(jnp.maximum(diags, MIN_VAR))
    mask = jnp.concatenate(
        [jnp.broadcast_to(base.mask, (x_new.shape[0], base.mask.shape[1])),
         jnp.ones((x_new.shape[0], 1), bool)], axis=1,
    )  # fmt: skip
    feats = jnp.concatenate([means, logstd], axis=1)  # [B, 2K, N + 1]
    feats = jnp.where(mask[:, None, :], feats, 0.0).transpose(0, 2, 1)
    return GPBankAdded(base=base, x_new=x_new, u=u, s=s, delta=delta), feats


def predict_added(
    state: GPBankAdded, x: jax.Array, members: tuple[tuple[str, float, float], ...]
) -> jax.Array:
    """Every member's mean and log predictive std ``[B, M, 2 K]`` at targets ``x`` ``[B, M, C]``.

    :func:`~xnp.nn.gp_bank.predict_bank` of the grown contexts.  When every batch
    entry has the same targets, the base context's terms are computed once.

    Examples
    --------
    >>> from xnp.nn.gp_bank import condition_bank
    >>> x = jnp.asarray([[[0.0, 0.0, 1.0], [0.0, 0.1, 0.995]]])
    >>> members = (("matern12", 0.5, 0.01),)
    >>> base, _ = condition_bank(x, jnp.asarray([[1.0, -1.0]]), jnp.ones((1, 2), bool), members)
    >>> state, _ = add_point(base, jnp.asarray([[0.1, 0.0, 0.995]]), jnp.asarray([2.0]), members)
    >>> round(float(predict_added(state, jnp.asarray([[[0.1, 0.0, 0.995]]]), members)[0, 0, 0]), 2)
    1.98
    """
    base = state.base
    x = jax.lax.stop_gradient(x.astype(jnp.float32))
    a, alpha = base.inverse[0], base.alpha[0]
    batch = state.u.shape[0]

    def shared():
        q = correlations_to(base, x[:1], members)[0]  # [K, M, N]
        mean = jnp.einsum("kmn,kn->km", q, alpha)
        reduction = jnp.einsum("kmn,knj,kmj->km", q, a, q)
        tile = lambda v: jnp.broadcast_to(v[None], (batch, *v.shape))  # noqa: E731
        return tile(mean), tile(reduction), jnp.einsum("kmn,bkn->bkm", q, state.u)

    def each():
        q = correlations_to(base, jnp.broadcast_to(x, (batch, *x.shape[1:])), members)
        mean = jnp.einsum("bkmn,kn->bkm", q, alpha)
        reduction = jnp.einsum("bkmn,knj,bkmj->bkm", q, a, q)
        return mean, reduction, jnp.einsum("bkmn,bkn->bkm", q, state.u)

    same = jnp.all(x == x[:1])
    mean, reduction, qu = jax.lax.cond(same, shared, each)
    to_new = pairwise_distance(x, state.x_new[:, None])  # [B, M, 1]
    r = member_correlations(to_new, base.lengthscale, members)[..., 0]  # [B, K, M]
    w = r - qu
    s = state.s[..., None]
    mean = mean + w * state.delta[..., None] / s
    var = jnp.maximum(1.0 + nuggets(members)[None, :, None] - reduction - w * w / s, MIN_VAR)
    return jnp.concatenate([mean, 0.5 * jnp.log(var)], axis=1).transpose(0, 2, 1)

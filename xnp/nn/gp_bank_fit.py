"""Fitted GP members: a kernel whose lengthscale, mean and amplitude are fitted to each context.

The members of a GP bank (:mod:`xnp.nn.gp_bank`) have fixed lengthscales (fractions
of the context's spread), zero mean and unit variance on the standardised values.
A smooth field's posterior is sensitive to all three: with the right kernel but a
lengthscale a factor 1.5 off, or the field's mean and variance not those of the
context's sample, an RBF GP is far from the Bayes-optimal prediction.  A *fitted*
member does what a geostatistician does before kriging, by empirical Bayes on a grid:
for each candidate lengthscale ``ℓ = fraction × spread`` (``fractions``, a fixed grid)
of its kernel and nugget ``g``, with ``C`` the context's correlation matrix plus
``g I`` and ``L`` its Cholesky factor,

* the generalised least-squares mean ``m = 1ᵀC⁻¹y / 1ᵀC⁻¹1`` and the residual
  quadratic form ``q = (y − m)ᵀ C⁻¹ (y − m)``;
* the amplitude ``σ² = (q + ν) / (n − 1 + ν)``, the posterior mode under a weak
  conjugate prior of ``ν = 1`` observation at the standardised variance 1 (so a
  context of one point, whose ``q`` is 0, keeps unit variance);
* the restricted log likelihood ``−½ (n − 1) log σ² − ½ q / σ² − ½ log|C| −
  ½ log 1ᵀC⁻¹1`` (Harville 1974, up to a constant), which picks the lengthscale.

The chosen member is then an ordinary bank member conditioned on ``(y − m) / σ``
with that lengthscale (:func:`bank_inputs`: in the same
:func:`~xnp.nn.gp_bank.condition_bank` call as the bank's members), its predictions
mapped back (mean ``m + σ μ``, log std ``log σ + log s``: :func:`split_features`);
the GLS mean's own variance is left out, so that the block update of
:mod:`xnp.nn.gp_bank_added` grows it exactly (:func:`added_values`, the fit held at
the base context's).  Every token also reads the
member's restricted log likelihood per observation, the evidence for its kernel, so
the network can weigh the fitted members by it.

The search reads at most :data:`SEARCH_POINTS` of the context's points (evenly spread
over its order) and costs one Cholesky factor per candidate (``O(P S³ / 3)`` per
member for ``P`` fractions and ``S`` points), no inverse; the chosen member is
conditioned on every point, in the same call as the bank's members.  No gradient flows
through any of it.  :func:`exact_fit` is the float64 numpy reference.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from xnp.nn.gp_bank import (
    covariance,
    exact_correlation,
    exact_features,
    exact_spread,
    spread,
)

__all__ = [
    "PRIOR_OBS",
    "SEARCH_POINTS",
    "GPFit",
    "added_values",
    "bank_inputs",
    "exact_fit",
    "fit_context",
    "fit_members",
    "split_features",
]

#: Pseudo-observations of the amplitude's prior (at the standardised variance 1).
PRIOR_OBS = 1.0

#: The most context points the search reads (evenly spread over the context's order);
#: the chosen members are conditioned on every point.
SEARCH_POINTS = 64


def _subset(x: jax.Array, y: jax.Array, mask: jax.Array, size: int):
    """At most ``size`` real points of each context, evenly spaced in its order.

    With ``n`` real points, the points of rank ``⌊j n / size⌋`` for ``j < size``
    (every point when ``n ≤ size``), so a context stored row by row (a grid) keeps
    points from all its rows.
    """
    if mask.shape[1] <= size:
        return x, y, mask
    n = jnp.sum(mask, axis=1)
    j = jnp.arange(size)
    want = jnp.floor(j[None] * jnp.maximum(n[:, None], size) / size).astype(jnp.int32)
    rank = jnp.cumsum(mask, axis=1)  # rank + 1 of each real point
    pos = jax.vmap(jnp.searchsorted)(rank, want + 1)
    pos = jnp.minimum(pos, mask.shape[1] - 1)
    take = jax.vmap(lambda a, i: a[i])
    keep = want < n[:, None]
    return take(x, pos), jnp.where(keep, take(y, pos), 0.0), keep


def fit_members(fitted: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float, float], ...]:
    """The fitted members as bank members ``(kind, 1.0, nugget)`` (the fraction unused).

    Examples
    --------
    >>> fit_members((("rbf", 0.01),))
    (('rbf', 1.0, 0.01),)
    """
    return tuple((kind, 1.0, nugget) for kind, nugget in fitted)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GPFit:
    """The fitted members' fit to one batch of contexts.

    Attributes
    ----------
    lengthscale : array ``[B, F]``
        Each member's chosen lengthscale (feature units).
    shift, scale : arrays ``[B, F]``
        Each member's fitted mean ``m`` and amplitude ``σ``.
    evidence : array ``[B, F]``
        Each member's restricted log likelihood per observation.
    """

    lengthscale: jax.Array
    shift: jax.Array
    scale: jax.Array
    evidence: jax.Array


def fit_context(
    x: jax.Array,
    y: jax.Array,
    mask: jax.Array,
    fitted: tuple[tuple[str, float], ...],
    fractions: tuple[float, ...],
) -> GPFit:
    """Each fitted member's best candidate for each context (the search of the module doc).

    All ``F × P`` candidates are factored in one batched call.

    Parameters
    ----------
    x : array ``[B, N, C]``
        Context coordinates (the bias features).
    y : array ``[B, N]``
        Context values, standardised.
    mask : bool array ``[B, N]``
        Real points.
    fitted : tuple of (kind, nugget)
        Each fitted member's kernel and noise variance (relative to its amplitude).
    fractions : tuple of float
        The candidate lengthscales, as fractions of the context's rms spread.

    Examples
    --------
    >>> x = jnp.asarray([[[0.0, 0.0, 1.0], [0.0, 0.1, 0.995], [0.1, 0.0, 0.995]]])
    >>> fit = fit_context(
    ...     x,
    ...     jnp.asarray([[0.5, 0.4, -1.0]]),
    ...     jnp.ones((1, 3), bool),
    ...     (("rbf", 0.01),),
    ...     (0.5, 1.0, 2.0),
    ... )
    >>> fit.scale.shape
    (1, 1)
    """
    x = jax.lax.stop_gradient(x.astype(jnp.float32))
    y = jax.lax.stop_gradient(jnp.where(mask, y.astype(jnp.float32), 0.0))
    members = tuple((kind, float(f), nugget) for kind, nugget in fitted for f in fractions)
    n_fit, n_frac = len(fitted), len(fractions)
    frac = jnp.tile(jnp.asarray(fractions, jnp.float32), n_fit)
    lengthscale = spread(x, mask)[:, None] * frac[None]  # [B, F P], the whole context's
    x, y, mask = _subset(x, y, mask, SEARCH_POINTS)
    chol = jnp.linalg.cholesky(covariance(x, mask, lengthscale, members))  # [B, F P, N, N]
    w = mask.astype(jnp.float32)
    rhs = jnp.broadcast_to(jnp.stack([w, y], -1)[:, None], (*chol.shape[:-1], 2))
    z = jax.scipy.linalg.cho_solve((chol, True), rhs)  # C⁻¹ [1, y]: [B, F P, N, 2]
    s11 = jnp.sum(rhs[..., 0] * z[..., 0], -1)
    s1y = jnp.sum(rhs[..., 1] * z[..., 0], -1)
    syy = jnp.sum(rhs[..., 1] * z[..., 1], -1)
    mean = s1y / s11
    q = jnp.maximum(syy - s1y * mean, 0.0)
    n = jnp.sum(w, -1)[:, None]
    var = (q + PRIOR_OBS) / (n - 1.0 + PRIOR_OBS)
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), -1)
    crit = -0.5 * (n - 1.0) * jnp.log(var) - 0.5 * q / var - 0.5 * logdet - 0.5 * jnp.log(s11)
    per = lambda a: a.reshape(a.shape[0], n_fit, n_frac)  # noqa: E731
    best = jnp.argmax(per(crit), axis=-1)[..., None]
    pick = lambda a: jnp.take_along_axis(per(a), best, axis=-1)[..., 0]  # noqa: E731
    return GPFit(pick(lengthscale), pick(mean), jnp.sqrt(pick(var)),
                 pick(crit) / jnp.maximum(n, 1.0))  # fmt: skip


def bank_inputs(
    x: jax.Array,
    y: jax.Array,
    mask: jax.Array,
    bank: tuple[tuple[str, float, float], ...],
    fitted: tuple[tuple[str, float], ...],
    fit: GPFit,
) -> tuple[tuple, jax.Array, jax.Array]:
    """Members, lengthscales ``[B, K + F]`` and values ``[B, K + F, N]`` of one bank of both.

    The bank's members and the fitted ones are conditioned in one
    :func:`~xnp.nn.gp_bank.condition_bank` call (one factorisation per member):
    the bank's members on ``y`` at their fractions of the spread, the fitted ones
    on ``(y − m) / σ`` at their chosen lengthscales.

    Examples
    --------
    >>> x = jnp.asarray([[[0.0, 0.0, 1.0], [0.0, 0.1, 0.995], [0.1, 0.0, 0.995]]])
    >>> y, mask = jnp.asarray([[0.5, 0.4, -1.0]]), jnp.ones((1, 3), bool)
    >>> fitted = (("rbf", 0.01),)
    >>> fit = fit_context(x, y, mask, fitted, (0.5, 1.0, 2.0))
    >>> members, ell, values = bank_inputs(x, y, mask, (("matern12", 0.3, 0.05),), fitted, fit)
    >>> [m[0] for m in members], ell.shape, values.shape
    (['matern12', 'rbf'], (1, 2), (1, 2, 3))
    """
    frac = jnp.asarray([f for _, f, _ in bank], jnp.float32)
    own = spread(x.astype(jnp.float32), mask)[:, None] * frac[None]
    lengthscale = jnp.concatenate([own, fit.lengthscale], axis=1)
    y = jnp.where(mask, y.astype(jnp.float32), 0.0)
    scaled = (y[:, None] - fit.shift[..., None]) / fit.scale[..., None]
    values = jnp.concatenate([jnp.broadcast_to(y[:, None], (y.shape[0], len(bank), y.shape[1])),
                              scaled], axis=1)  # fmt: skip
    return bank + fit_members(fitted), lengthscale, values


def added_values(y_new: jax.Array, n_bank: int, fit: GPFit) -> jax.Array:
    """Each member's value ``[B, K + F]`` of the added points ``y_new`` ``[B]``.

    Examples
    --------
    >>> one = jnp.ones((1, 1))
    >>> added_values(jnp.asarray([3.0]), 1, GPFit(one, 2.0 * one, 0.5 * one, one)).tolist()
    [[3.0, 2.0]]
    """
    y_new = y_new.astype(jnp.float32)
    own = jnp.broadcast_to(y_new[:, None], (y_new.shape[0], n_bank))
    return jnp.concatenate([own, (y_new[:, None] - fit.shift) / fit.scale], axis=1)


def split_features(
    feats: jax.Array, n_bank: int, fit: GPFit, mask: jax.Array | None = None
) -> jax.Array:
    """The features ``[B, N, 2 (K + F)]`` of one bank of both → ``[B, N, 2 K + 3 F]``.

    The bank's means and log stds as they are, then the fitted members' mapped back
    to the values' units (mean ``m + σ μ``, log std ``log σ + log s``) and their
    evidence; zero where ``mask`` (context points) is False.

    Examples
    --------
    >>> one = jnp.ones((1, 1))
    >>> feats = jnp.asarray([[[0.1, 0.5, -1.0, 0.0]]])  # K = F = 1: means, then log stds
    >>> out = split_features(feats, 1, GPFit(one, 2.0 * one, one, -0.3 * one))
    >>> [round(v, 2) for v in out[0, 0].tolist()]
    [0.1, -1.0, 2.5, 0.0, -0.3]
    """
    k, f = n_bank, fit.shift.shape[-1]
    mean, logstd = feats[..., k : k + f], feats[..., 2 * k + f :]
    batch = max(feats.shape[0], fit.shift.shape[0])
    ev = jnp.broadcast_to(fit.evidence[:, None], (batch, feats.shape[1], f))
    fitted = jnp.concatenate([fit.shift[:, None] + fit.scale[:, None] * mean,
                              jnp.log(fit.scale)[:, None] + logstd, ev], axis=-1)  # fmt: skip
    bank = jnp.broadcast_to(
        jnp.concatenate([feats[..., :k], feats[..., k + f : 2 * k + f]], axis=-1),
        (batch, feats.shape[1], 2 * k),
    )
    if mask is not None:
        fitted = jnp.where(mask[..., None], fitted, 0.0)
    return jnp.concatenate([bank, fitted], axis=-1)


def exact_fit(
    xc: np.ndarray, yc: np.ndarray, xt: np.ndarray, kind: str, nugget: float, fractions
) -> dict[str, float | np.ndarray]:
    """The reference (float64 numpy, one context, no padding) of one fitted member.

    The search reads every point (give a context of at most :data:`SEARCH_POINTS`,
    where :func:`fit_context` does too).  Each candidate is fitted from the explicit
    inverse of its covariance (``log|C|`` by ``slogdet``) rather than a Cholesky
    factor, and the chosen one conditioned by :func:`~xnp.nn.gp_bank.exact_features`.
    """
    xc, yc = np.asarray(xc, np.float64), np.asarray(yc, np.float64)
    rms = exact_spread(xc)
    n = len(yc)
    best = None
    for frac in fractions:
        corr = exact_correlation(xc, xc, kind, rms * frac) + nugget * np.eye(n)
        ci = np.linalg.inv(corr)
        one = np.ones(n)
        mean = float(one @ ci @ yc / (one @ ci @ one))
        r = yc - mean
        q = float(r @ ci @ r)
        var = (q + PRIOR_OBS) / (n - 1 + PRIOR_OBS)
        crit = (-0.5 * (n - 1) * math.log(var) - 0.5 * q / var
                - 0.5 * np.linalg.slogdet(corr)[1] - 0.5 * math.log(one @ ci @ one))  # fmt: skip
        if best is None or crit > best["evidence"] * n:
            best = {"fraction": frac, "shift": mean, "scale": math.sqrt(var), "evidence": crit / n}
    ctx, tgt = exact_features(xc, (yc - best["shift"]) / best["scale"], xt,
                              ((kind, best["fraction"], nugget),))  # fmt: skip
    for name, feats in (("context", ctx), ("target", tgt)):
        best[name] = np.stack([best["shift"] + best["scale"] * feats[:, 0],
                               math.log(best["scale"]) + feats[:, 1]], -1)  # fmt: skip
    return best

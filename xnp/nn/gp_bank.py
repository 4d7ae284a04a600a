"""A bank of exact Gaussian processes whose predictions a neural process reads as inputs.

Each member of the bank is a GP with a fixed correlation function (Matérn 1/2, 3/2,
5/2 or RBF) of the Euclidean distance between the points' bias features (the chord
for the great-circle bias), a lengthscale that is a fixed fraction of the context's
own rms spread (so that, like the attention biases after the working-size rescaling,
the features do not depend on the size of the region), unit prior variance and its
own nugget (noise variance), all on the values as the model sees them
(standardised).  Conditioned on the context, each member gives

* at every **target** its posterior mean and the log of its predictive standard
  deviation (of a new observation: the nugget included);
* at every **context point** the same from the *other* context points, the
  leave-one-out prediction, in closed form from the inverse of the context's
  covariance matrix ``A = K⁻¹`` (Rasmussen & Williams 2006, eq. 5.12):
  ``μ_i = y_i − [A y]_i / A_ii`` and ``σ²_i = 1 / A_ii``.

So both kinds of token carry "what this GP predicts here from the other
observations", and the network can compare, at the context, each member's
predictions with the values (which member fits this field) and use, at the targets,
the predictions of those that fit.  The features are constants to the network
(no gradient flows through them).

Padding (``mask`` False) is removed exactly: its rows and columns of the covariance
are those of the identity and its value is zero, so it changes no real point's
feature.  The cost is one ``N × N`` inverse per member and context (``O(K N³)``) and
``O(K N²)`` per target, which suits the few hundred to few thousand observations of
a station network; :func:`exact_features` is the float64 numpy reference.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from xnp.errors import ConfigError

__all__ = [
    "KINDS",
    "MIN_SPREAD",
    "MIN_VAR",
    "GPBankState",
    "condition_bank",
    "correlation",
    "correlations_to",
    "covariance",
    "exact_correlation",
    "exact_features",
    "exact_spread",
    "member_correlations",
    "nuggets",
    "pairwise_distance",
    "predict_bank",
    "spread",
]

#: The correlation functions a member can have (rough to smooth).
KINDS = ("matern12", "matern32", "matern52", "rbf")

#: The smallest spread (in feature units) a context's lengthscales are scaled by: a
#: single observation has none.
MIN_SPREAD = 1e-3

#: Floor of a member's predictive variance before its log is taken.
MIN_VAR = 1e-6


def correlation(r: jax.Array, kind: str) -> jax.Array:
    """The correlation at scaled distance ``r = d / ℓ ≥ 0`` of kernel ``kind``.

    Examples
    --------
    >>> float(correlation(jnp.asarray(1.0), "matern12"))  # exp(-1)
    0.36787...
    >>> float(correlation(jnp.asarray(0.0), "rbf"))
    1.0
    """
    if kind == "rbf":
        return jnp.exp(-0.5 * r * r)
    if kind == "matern12":
        return jnp.exp(-r)
    if kind == "matern32":
        a = math.sqrt(3.0) * r
        return (1.0 + a) * jnp.exp(-a)
    if kind == "matern52":
        a = math.sqrt(5.0) * r
        return (1.0 + a + a * a / 3.0) * jnp.exp(-a)
    raise ConfigError(f"unknown kernel {kind!r}; use one of {KINDS}.")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GPBankState:
    """A bank conditioned on one batch of contexts (everything the targets need).

    Attributes
    ----------
    x : array ``[B, N, C]``
        The context points' coordinates (bias features).
    inverse : array ``[B, K, N, N]``
        Each member's inverse covariance of the context (padding: identity).
    alpha : array ``[B, K, N]``
        ``inverse @ y`` per member (zero at padding).
    lengthscale : array ``[B, K]``
        Each member's lengthscale for each context, in feature units.
    mask : bool array ``[B, N]``
        Which context points are real.
    y : array ``[B, K, N]``
        The context values each member is conditioned on (zero at padding): the
        same for every member of a bank, shifted and scaled per member for the
        fitted members of :mod:`xnp.nn.gp_bank_fit`.
    """

    x: jax.Array
    inverse: jax.Array
    alpha: jax.Array
    lengthscale: jax.Array
    mask: jax.Array
    y: jax.Array


def spread(x: jax.Array, mask: jax.Array) -> jax.Array:
    """The rms distance ``[B]`` of each context's real points from their centroid.

    At least :data:`MIN_SPREAD`; the members' lengthscales are fractions of it.

    Examples
    --------
    >>> x = jnp.asarray([[[0.0, 0.0], [2.0, 0.0], [9.0, 9.0]]])
    >>> spread(x, jnp.asarray([[True, True, False]])).tolist()
    [1.0]
    """
    w = mask.astype(x.dtype)[..., None]
    n = jnp.maximum(w.sum(axis=1), 1.0)
    centre = (x * w).sum(axis=1, keepdims=True) / n[:, None]
    var = (((x - centre) ** 2).sum(-1, keepdims=True) * w).sum(axis=1) / n
    return jnp.maximum(jnp.sqrt(var[:, 0]), MIN_SPREAD)


def pairwise_distance(a: jax.Array, b: jax.Array) -> jax.Array:
    """Euclidean distances ``[B, Na, Nb]`` (zero gradient-safe at zero)."""
    d2 = jnp.sum((a[:, :, None, :] - b[:, None, :, :]) ** 2, axis=-1)
    return jnp.sqrt(jnp.maximum(d2, 0.0))


def member_correlations(d: jax.Array, lengthscale: jax.Array, members) -> jax.Array:
    """``[B, K, Na, Nb]``: each member's correlation at distances ``d`` ``[B, Na, Nb]``."""
    return jnp.stack(
        [
            correlation(d / lengthscale[:, k, None, None], kind)
            for k, (kind, _, _) in enumerate(members)
        ],
        axis=1,
    )


def nuggets(members) -> jax.Array:
    """Each member's noise variance ``[K]`` (float32)."""
    return jnp.asarray([g for _, _, g in members], jnp.float32)


def correlations_to(state: GPBankState, x: jax.Array, members) -> jax.Array:
    """Each member's correlations ``[B, K, M, N]`` of ``x`` with the context (padding: 0)."""
    corr = member_correlations(pairwise_distance(x, state.x), state.lengthscale, members)
    return jnp.where(state.mask[:, None, None, :], corr, 0.0)


def covariance(x: jax.Array, mask: jax.Array, lengthscale: jax.Array, members) -> jax.Array:
    """Each member's covariance ``[B, K, N, N]`` of the contexts (padding: identity rows)."""
    n = x.shape[1]
    nugget = nuggets(members)[None, :, None, None]
    pair = (mask[:, :, None] & mask[:, None, :])[:, None]
    eye = jnp.eye(n, dtype=jnp.float32)[None, None]
    corr = member_correlations(pairwise_distance(x, x), lengthscale, members)
    return jnp.where(pair, corr, 0.0) + eye * jnp.where(mask[:, None, :, None], nugget, 1.0)


def condition_bank(
    x: jax.Array,
    y: jax.Array,
    mask: jax.Array,
    members: tuple[tuple[str, float, float], ...],
    lengthscale: jax.Array | None = None,
) -> tuple[GPBankState, jax.Array]:
    """Condition every member on the contexts; return the state and the context features.

    Parameters
    ----------
    x : array ``[B, N, C]``
        Context coordinates (the bias features: unit vectors on the sphere).
    y : array ``[B, N]`` or ``[B, K, N]``
        Context values, standardised (``[B, K, N]``: each member's own values).
    mask : bool array ``[B, N]``
        Real points.
    members : tuple of (kind, fraction, nugget)
        Each member's kernel (one of :data:`KINDS`), lengthscale as a fraction of
        the context's rms spread, and noise variance (the field's prior variance
        is 1).
    lengthscale : array ``[B, K]``, optional
        The members' lengthscales instead of the fractions of the spread (what
        :func:`xnp.nn.gp_bank_added.add_point` holds fixed; its reference).

    Returns
    -------
    state : GPBankState
    features : array ``[B, N, 2 K]``
        The leave-one-out mean and log standard deviation of every member at every
        context point (zero at padding).

    Examples
    --------
    >>> x = jnp.asarray([[[0.0, 0.0, 1.0], [0.0, 0.1, 0.995], [0.1, 0.0, 0.995]]])
    >>> y = jnp.asarray([[0.5, 0.4, -1.0]])
    >>> state, feats = condition_bank(x, y, jnp.ones((1, 3), bool), (("matern52", 1.0, 0.01),))
    >>> feats.shape
    (1, 3, 2)
    """
    x = jax.lax.stop_gradient(x.astype(jnp.float32))
    n, k = x.shape[1], len(members)
    y = jnp.broadcast_to(y[:, None] if y.ndim == 2 else y, (x.shape[0], k, n))
    y = jax.lax.stop_gradient(jnp.where(mask[:, None], y.astype(jnp.float32), 0.0))
    frac = jnp.asarray([f for _, f, _ in members], jnp.float32)
    if lengthscale is None:
        lengthscale = spread(x, mask)[:, None] * frac[None, :]
    cov = covariance(x, mask, lengthscale, members)
    eye = jnp.eye(n, dtype=jnp.float32)[None, None]
    chol = jnp.linalg.cholesky(cov)
    inverse = jax.scipy.linalg.cho_solve((chol, True), jnp.broadcast_to(eye, cov.shape))
    alpha = jnp.einsum("bkij,bkj->bki", inverse, y)
    diag = jnp.diagonal(inverse, axis1=-2, axis2=-1)
    loo_mean = y - alpha / diag
    loo_logstd = -0.5 * jnp.log(jnp.maximum(diag, MIN_VAR))
    feats = jnp.concatenate([loo_mean, loo_logstd], axis=1)  # [B, 2K, N]
    feats = jnp.where(mask[:, None, :], feats, 0.0).transpose(0, 2, 1)
    state = GPBankState(x=x, inverse=inverse, alpha=alpha, lengthscale=lengthscale, mask=mask, y=y)
    return state, feats


def predict_bank(
    state: GPBankState, x: jax.Array, members: tuple[tuple[str, float, float], ...]
) -> jax.Array:
    """Every member's posterior mean and log predictive std ``[B, M, 2 K]`` at targets ``x``.

    Examples
    --------
    >>> x = jnp.asarray([[[0.0, 0.0, 1.0], [0.0, 0.1, 0.995]]])
    >>> members = (("matern12", 0.5, 0.01), ("rbf", 2.0, 0.01))
    >>> state, _ = condition_bank(x, jnp.asarray([[1.0, -1.0]]), jnp.ones((1, 2), bool), members)
    >>> [round(float(v), 2) for v in predict_bank(state, x[:, :1], members)[0, 0, :2]]
    [0.99, 0.98]
    """
    x = jax.lax.stop_gradient(x.astype(jnp.float32))
    corr = correlations_to(state, x, members)  # [B, K, M, N]
    mean = jnp.einsum("bkmn,bkn->bkm", corr, state.alpha)
    reduction = jnp.einsum("bkmn,bknj,bkmj->bkm", corr, state.inverse, corr)
    nugget = nuggets(members)[None, :, None]
    var = jnp.maximum(1.0 + nugget - reduction, MIN_VAR)
    return jnp.concatenate([mean, 0.5 * jnp.log(var)], axis=1).transpose(0, 2, 1)


def exact_spread(x: np.ndarray) -> float:
    """:func:`spread` of one context without padding, in float64 numpy (the references').

    Examples
    --------
    >>> exact_spread(np.array([[0.0, 0.0], [2.0, 0.0]]))
    1.0
    """
    x = np.asarray(x, np.float64)
    return max(float(np.sqrt(np.mean(np.sum((x - x.mean(0)) ** 2, axis=1)))), MIN_SPREAD)


def exact_correlation(a: np.ndarray, b: np.ndarray, kind: str, ell: float) -> np.ndarray:
    """:func:`correlation` of every pair of ``a`` ``[Na, C]`` and ``b`` ``[Nb, C]``, float64 numpy.

    Examples
    --------
    >>> round(float(exact_correlation(np.zeros((1, 2)), np.ones((1, 2)), "rbf", 2.0)[0, 0]), 4)
    0.7788
    """
    r = np.sqrt(np.maximum(np.sum((a[:, None] - b[None]) ** 2, axis=-1), 0.0)) / ell
    if kind == "rbf":
        return np.exp(-0.5 * r * r)
    c = {"matern12": 1.0, "matern32": math.sqrt(3.0), "matern52": math.sqrt(5.0)}[kind]
    a_r = c * r
    poly = {"matern12": 1.0, "matern32": 1.0 + a_r, "matern52": 1.0 + a_r + a_r**2 / 3}[kind]
    return poly * np.exp(-a_r)


def exact_features(
    xc: np.ndarray,
    yc: np.ndarray,
    xt: np.ndarray,
    members: tuple[tuple[str, float, float], ...],
) -> tuple[np.ndarray, np.ndarray]:
    """The reference (float64 numpy, one context, no padding): context and target features.

    The leave-one-out features are computed by refitting each member without each
    point in turn, not from the inverse, so they check the closed form as well.
    """
    xc, yc, xt = (np.asarray(a, np.float64) for a in (xc, yc, xt))
    rms = exact_spread(xc)

    def gp(xa, ya, xb, kind, ell, nugget):
        k = exact_correlation(xa, xa, kind, ell) + nugget * np.eye(len(xa))
        kb = exact_correlation(xb, xa, kind, ell)
        mean = kb @ np.linalg.solve(k, ya)
        var = 1.0 + nugget - np.einsum("mn,nm->m", kb, np.linalg.solve(k, kb.T))
        return mean, 0.5 * np.log(np.maximum(var, MIN_VAR))

    ctx, tgt = [], []
    for kind, frac, nugget in members:
        ell = rms * frac
        tgt.append(gp(xc, yc, xt, kind, ell, nugget))
        loo = [gp(np.delete(xc, i, 0), np.delete(yc, i), xc[i : i + 1], kind, ell, nugget)
               for i in range(len(xc))]  # fmt: skip
        ctx.append((np.array([m[0] for m, _ in loo]), np.array([s[0] for _, s in loo])))
    stack = lambda parts: np.stack([p[0] for p in parts] + [p[1] for p in parts], -1)  # noqa: E731
    return stack(ctx), stack(tgt)

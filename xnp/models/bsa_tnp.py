"""BSA-TNP: the Biased Scan Attention transformer neural process.

Architecture (Jenson et al., BSA-TNP; TNP-KR):

* **Embedding.**  ``concat(embed(obs flag), x, [s], [t], f)`` → MLP (256-128-64)
  → LayerNorm; ``f`` is zero for targets.  ``s`` and ``t`` are embedded only when
  the config asks; otherwise they reach the model only through the attention
  biases, which makes it invariant to rotations of the sphere (great-circle bias)
  or translations of the plane (Euclidean bias) and to shifts of time.
* **KRBlocks** (pre-norm, weights shared between the two token kinds)::

      h_c = LN1(e_c);  h_t = LN1(e_t)
      e_c ← e_c + MHA(h_c → h_c, bias(c, c));  e_t ← e_t + MHA(h_t → h_c, bias(t, c))
      e   ← e + FFN(LN2(e))

  Targets attend only to context, so targets are conditionally independent
  given the context and can be predicted in any chunks.
* **Head.**  Final LayerNorm → MLP (256-64-2·Dy) → mean and bounded std.

The split API mirrors this: :meth:`BSATNP.condition` runs the context side once
and keeps each block's context keys and values (:class:`ContextState`);
:meth:`BSATNP.predict` runs any number of target chunks against that state.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from xnp.arrays import Points
from xnp.errors import ConfigError, ShapeError
from xnp.geo.distance import latlon_to_xyz
from xnp.models.config import BSATNPConfig
from xnp.models.likelihoods import gaussian_from_raw, gaussian_nll
from xnp.nn.bias import SpaceTimeBias
from xnp.nn.gp_bank import GPBankState, condition_bank, predict_bank
from xnp.nn.gp_bank_added import GPBankAdded, add_point, predict_added
from xnp.nn.gp_bank_fit import (
    GPFit,
    added_values,
    bank_inputs,
    fit_context,
    fit_members,
    split_features,
)
from xnp.nn.layers import MLP, MultiHeadAttention, count_params

__all__ = ["BSATNP", "ContextState", "KRBlock", "with_bank_members", "with_zero_inputs"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ContextState:
    """The conditioned context: everything targets need, computed once.

    Attributes
    ----------
    kv : list of (keys, values)
        Per block, the projected context keys and values ``[B, Nc, H, D]``.
    feats : dict
        Bias features of the context points (``"s"``, ``"t"``).
    mask : bool array ``[B, Nc]``
        Which context points are real.
    gp : GPBankState, GPBankAdded or None
        The conditioned GP bank (``BSATNPConfig.gp_bank``), or None without one.
    fit : GPFit or None
        The fit of the fitted GP members (``BSATNPConfig.gp_fit``), or None; the
        members themselves are the last of ``gp``'s.
    """

    kv: list[tuple[jax.Array, jax.Array]]
    feats: dict[str, jax.Array]
    mask: jax.Array
    gp: GPBankState | GPBankAdded | None = None
    fit: GPFit | None = None


class KRBlock(nnx.Module):
    """One Kernel Regression Block with its own attention bias."""

    def __init__(self, cfg: BSATNPConfig, *, rngs: nnx.Rngs):
        d, dtype = cfg.dim_token, jnp.dtype(cfg.dtype)
        self.norm1 = nnx.LayerNorm(d, dtype=dtype, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, dtype=dtype, rngs=rngs)
        self.attn = MultiHeadAttention(
            d, cfg.dim_attn, cfg.n_heads, d, kind=cfg.attention, q_chunk=cfg.q_chunk,
            k_chunk=cfg.k_chunk, dtype=dtype, rngs=rngs, prior=cfg.prior_key,
        )  # fmt: skip
        self.bias = SpaceTimeBias(
            cfg.n_heads, spatial=cfg.spatial_bias, spatial_scale=cfg.spatial_scale,
            n_basis_space=cfg.n_basis_space, temporal=cfg.temporal_bias,
            temporal_scale=cfg.temporal_scale, n_basis_time=cfg.n_basis_time, rngs=rngs,
        )  # fmt: skip
        self.ffn = MLP([d, cfg.ffn_hidden, d], dtype=dtype, rngs=rngs)

    def context_kv(self, e: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Keys and values of this block for context tokens ``e`` (the block input)."""
        return self.attn.project_kv(self.norm1(e))

    def __call__(
        self,
        e: jax.Array,
        kv: tuple[jax.Array, jax.Array],
        q_feats: dict[str, jax.Array],
        k_feats: dict[str, jax.Array],
        k_mask: jax.Array,
    ) -> jax.Array:
        """Update tokens ``e`` by attending to the context keys/values ``kv``."""
        bias_fn, bounds = (
            (self.bias.bind(), self.bias.bounds()) if self.bias.active else (None, None)
        )
        e = e + self.attn(
            self.norm1(e), kv, bias_fn=bias_fn, q_feats=q_feats, k_feats=k_feats, k_mask=k_mask,
            bias_bounds=bounds,
        )  # fmt: skip
        return e + self.ffn(self.norm2(e))


class BSATNP(nnx.Module):
    """The BSA-TNP model (Flax NNX).

    Parameters
    ----------
    config : BSATNPConfig
        Architecture; see :class:`xnp.models.config.BSATNPConfig`.
    rngs : nnx.Rngs
        Random state for parameter initialisation.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from xnp.arrays import Points
    >>> model = BSATNP(BSATNPConfig.tiny(), rngs=nnx.Rngs(0))
    >>> ctx = Points.from_arrays(s=jnp.zeros((1, 5, 2)), f=jnp.ones((1, 5, 1)))
    >>> tgt = Points.from_arrays(s=jnp.ones((1, 3, 2)))
    >>> mean, std = nnx.jit(lambda m, c, t: m(c, t))(model, ctx, tgt)
    >>> mean.shape, bool((std > 0).all())
    ((1, 3, 1), True)
    """

    def __init__(self, config: BSATNPConfig, *, rngs: nnx.Rngs):
        cfg = self.config = config
        dtype = jnp.dtype(cfg.dtype)
        d_in = point_inputs(cfg)
        self.obs_embed = nnx.Embed(2, cfg.dim_obs_embed, rngs=rngs)
        self.embed = MLP([d_in, *cfg.embed_hidden, cfg.dim_token], dtype=dtype, rngs=rngs)
        self.embed_norm = nnx.LayerNorm(cfg.dim_token, dtype=dtype, rngs=rngs)
        self.blocks = nnx.List([KRBlock(cfg, rngs=rngs) for _ in range(cfg.n_blocks)])
        self.final_norm = nnx.LayerNorm(cfg.dim_token, dtype=dtype, rngs=rngs)
        self.head = MLP([cfg.dim_token, *cfg.head_hidden, 2 * cfg.dim_y], dtype=dtype, rngs=rngs)

    # -- helpers -----------------------------------------------------------------------
    def _embed(self, p: Points, *, observed: bool, bank: jax.Array | None = None) -> jax.Array:
        cfg = self.config
        b, n = p.mask.shape
        flag = self.obs_embed(jnp.full((b, n), int(observed), jnp.int32))
        # the GP bank's features follow the covariates, so that covariate channels
        # added by a fine-tune (zero rows after the flag) leave them in place
        parts = [flag, p.x] if bank is None else [flag, p.x, bank]
        # embedded coordinates get the scales of the biases, so that the MLP sees
        # values of order one whatever the data's units (metres, hours)
        if cfg.embed_s:
            parts.append(
                latlon_to_xyz(p.s[..., 0], p.s[..., 1])
                if cfg.spatial_bias == "great_circle"
                else p.s / jnp.asarray(cfg.spatial_scale, p.s.dtype)
            )
        if cfg.embed_t:
            parts.append(p.t / jnp.asarray(cfg.temporal_scale, p.t.dtype))
        parts.append(p.f if observed else jnp.zeros_like(p.f))
        dtype = jnp.dtype(cfg.dtype)
        tokens = jnp.concatenate([a.astype(dtype) for a in parts], axis=-1)
        return self.embed_norm(self.embed(tokens))

    def _feats(self, p: Points) -> dict[str, jax.Array]:
        return self.blocks[0].bias.features(p.s, p.t)

    # -- public API --------------------------------------------------------------------
    def condition(self, context: Points) -> ContextState:
        """Run the context side once: per-block keys/values of the context tokens.

        The last block's context update is skipped: targets attend to each block's
        *input* context tokens, so its output would never be used.
        """
        context.validate_for(self.config, "context")
        context = context.zero_masked()  # padding never reaches the outputs, even NaN
        feats = self._feats(context)
        gp, fit, bank = self._condition_bank(feats["s"], context.f[..., 0], context.mask)
        return self._encode(context, feats, gp, fit, bank)

    def condition_added(self, base: Points, added: Points) -> ContextState:
        """``condition`` of the context ``base`` plus one point of ``added`` per batch entry.

        ``base`` is one context ``[1, N]`` and ``added`` ``[B, 1]`` real points (as
        :func:`xnp.placement.place_sensors` tries candidates); the state is that of
        the ``B`` contexts ``base ∪ added[b]``, the new point last.  The network
        sees each as :meth:`condition` would.  A GP bank is conditioned on ``base``
        once and grown by a block update of its inverses
        (:func:`xnp.nn.gp_bank_added.add_point`), its lengthscales held at
        ``base``'s: the features differ from :meth:`condition`'s only by the share
        of its spread one point moves a context (about ``1 / N``).
        """
        for points, role in ((base, "context"), (added, "context")):
            points.validate_for(self.config, role)
        if base.batch_size != 1 or added.size != 1:
            raise ShapeError(
                f"condition_added grows one context ([1, N]; got batch {base.batch_size}) "
                f"by one point per batch entry ([B, 1]; got {added.size} points)."
            )
        base, added = base.zero_masked(), added.zero_masked()
        b = added.batch_size

        def union_of(k: str) -> jax.Array:
            a = getattr(base, k)
            return jnp.concatenate([jnp.broadcast_to(a, (b, *a.shape[1:])), getattr(added, k)], 1)

        union = Points(**{k: union_of(k) for k in ("s", "t", "x", "f", "mask")})
        cfg = self.config
        if not cfg.gp_inputs:
            return self.condition(union)
        feats = self._feats(union)
        n = base.size
        xb, xn, yb, yn = feats["s"][:1, :n], feats["s"][:, n], base.f[..., 0], added.f[:, 0, 0]
        gp, fit, _ = self._condition_bank(xb, yb, base.mask)
        members = self._members()
        if fit is None:
            gp, bank = add_point(gp, xn, yn, members)
        else:
            gp, bank = add_point(gp, xn, added_values(yn, len(cfg.gp_bank), fit), members)
            mask = jnp.concatenate([jnp.broadcast_to(base.mask, (xn.shape[0], n)),
                                    jnp.ones((xn.shape[0], 1), bool)], axis=1)  # fmt: skip
            bank = split_features(bank, len(cfg.gp_bank), fit, mask)
        return self._encode(union, feats, gp, fit, bank)

    def _members(self) -> tuple:
        """The GP bank's members, then the fitted members (as bank members)."""
        return self.config.gp_bank + fit_members(self.config.gp_fit)

    def _condition_bank(self, x: jax.Array, y: jax.Array, mask: jax.Array):
        """The bank of both kinds of member: its state, the fit and the context features.

        One :func:`~xnp.nn.gp_bank.condition_bank` call for the bank's members and
        the fitted ones (after their search), so that no two large LAPACK calls of
        the program run side by side (XLA's CPU runtime has stalled on that).
        """
        cfg = self.config
        if not cfg.gp_inputs:
            return None, None, None
        if not cfg.gp_fit:
            gp, bank = condition_bank(x, y, mask, cfg.gp_bank)
            return gp, None, bank
        fit = fit_context(x, y, mask, cfg.gp_fit, cfg.gp_fit_fractions)
        members, lengthscale, values = bank_inputs(x, y, mask, cfg.gp_bank, cfg.gp_fit, fit)
        gp, bank = condition_bank(x, values, mask, members, lengthscale)
        return gp, fit, split_features(bank, len(cfg.gp_bank), fit, mask)

    def _encode(self, context: Points, feats, gp, fit, bank) -> ContextState:
        """The context side of the blocks, from the bias and bank features."""
        e = self._embed(context, observed=True, bank=bank)
        kv = []
        for i, block in enumerate(self.blocks):
            kv.append(block.context_kv(e))
            if i + 1 < len(self.blocks):
                e = block(e, kv[-1], feats, feats, context.mask)
        return ContextState(kv=kv, feats=feats, mask=context.mask, gp=gp, fit=fit)

    def predict(self, state: ContextState, targets: Points) -> tuple[jax.Array, jax.Array]:
        """Predictive mean and standard deviation ``[B, Nt, Dy]`` at the targets.

        Targets are independent given the context, so any split of ``targets``
        into chunks gives the same values.  Target ``f`` values are ignored.
        """
        targets.validate_for(self.config, "target")
        if len(state.kv) != len(self.blocks):
            raise ShapeError(
                f"the context state has {len(state.kv)} blocks; this model has "
                f"{len(self.blocks)}. Condition with the same model you predict with."
            )
        cfg = self.config
        feats = self._feats(targets)
        bank = None
        if cfg.gp_inputs:
            grown = isinstance(state.gp, GPBankAdded)
            bank = (predict_added if grown else predict_bank)(
                state.gp, feats["s"], self._members()
            )
            if cfg.gp_fit:
                bank = split_features(bank, len(cfg.gp_bank), state.fit)
        e = self._embed(targets, observed=False, bank=bank)
        for block, kv in zip(self.blocks, state.kv, strict=True):
            e = block(e, kv, feats, state.feats, state.mask)
        raw = self.head(self.final_norm(e)).astype(jnp.float32)
        return gaussian_from_raw(raw, min_std=self.config.min_std)

    def __call__(self, context: Points, targets: Points) -> tuple[jax.Array, jax.Array]:
        """``predict(condition(context), targets)``."""
        return self.predict(self.condition(context), targets)

    def loss(self, context: Points, targets: Points, y: jax.Array) -> jax.Array:
        """Mean Gaussian NLL of ``y`` ``[B, Nt, Dy]`` over the valid targets."""
        mean, std = self(context, targets)
        return gaussian_nll(mean, std, y, targets.mask)


def point_inputs(cfg: BSATNPConfig) -> int:
    """Width of the point encoder's input.

    In order: the flag embedding, the covariates, the GP bank's means and log stds,
    the fitted members' means, log stds and evidence, the embedded coordinates, the
    time, the value.

    Examples
    --------
    >>> cfg = BSATNPConfig.tiny()
    >>> point_inputs(cfg) == cfg.dim_obs_embed + cfg.dim_y
    True
    """
    d_s = (3 if cfg.spatial_bias == "great_circle" else cfg.dim_s) if cfg.embed_s else 0
    d_in = cfg.dim_obs_embed + cfg.dim_x + 2 * len(cfg.gp_bank) + 3 * len(cfg.gp_fit)
    return d_in + d_s + int(cfg.embed_t) + cfg.dim_y


def with_zero_inputs(params: Any, offset: int, count: int) -> Any:
    """A BSA-TNP's parameters with ``count`` new zero input channels at ``offset``.

    The point encoder's first layer gets ``count`` zero rows at ``offset`` of its
    inputs (``[flag embedding, covariates, GP bank features, ..., value]``), so the
    widened model predicts exactly as before until training moves them: the way a
    fine-tune adds covariates (after the flag) and a pretrained model gains a GP
    bank (after the covariates).

    Examples
    --------
    >>> model = BSATNP(BSATNPConfig.tiny(), rngs=nnx.Rngs(0))
    >>> _, params = nnx.split(model)
    >>> rows = lambda p: p["embed"]["layers"][0]["kernel"].shape[0]
    >>> rows(with_zero_inputs(params, 2, 3)) - rows(params)
    3
    """

    def widen(path: tuple, leaf: Any) -> Any:
        names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
        if names[:3] == ["embed", "layers", "0"] and "kernel" in names:
            value = np.asarray(leaf)
            zeros = np.zeros((count, value.shape[1]), value.dtype)
            return jnp.asarray(np.concatenate([value[:offset], zeros, value[offset:]]))
        return leaf

    return jax.tree_util.tree_map_with_path(widen, params)


def with_bank_members(params: Any, bank: tuple, config: BSATNPConfig) -> Any:
    """Parameters of a BSA-TNP with GP bank ``bank``, widened to ``config``'s larger bank.

    The bank's features enter the point encoder as ``[means (K), log stds (K)]``
    after the flag embedding and the covariates, so members appended to ``bank``
    get zero input rows after its means and after its log stds: the widened model
    predicts exactly as the one with ``bank`` until training moves them.  With
    ``bank=()`` a model without a bank gains one.

    Raises
    ------
    ConfigError
        If ``bank`` is not the start of ``config.gp_bank``.

    Examples
    --------
    >>> small = BSATNPConfig.tiny(gp_bank=(("rbf", 0.5, 0.01),))
    >>> large = small.replace(gp_bank=small.gp_bank + (("matern12", 0.2, 0.01),))
    >>> _, params = nnx.split(BSATNP(small, rngs=nnx.Rngs(0)))
    >>> rows = lambda p: p["embed"]["layers"][0]["kernel"].shape[0]
    >>> rows(with_bank_members(params, small.gp_bank, large)) - rows(params)
    2
    """
    old, new = len(bank), len(config.gp_bank)
    if tuple(map(tuple, bank)) != tuple(config.gp_bank[:old]):
        raise ConfigError(
            f"the GP bank {list(bank)} is not the start of the configuration's "
            f"{list(config.gp_bank)}: members can only be appended to a bank."
        )
    if old == new:
        return params
    offset = config.dim_obs_embed + config.dim_x
    params = with_zero_inputs(params, offset + old, new - old)  # after the old means
    return with_zero_inputs(params, offset + new + old, new - old)  # after the old log stds


def with_fit_members(params: Any, config: BSATNPConfig) -> Any:
    """Parameters of a BSA-TNP without fitted GP members, widened to ``config.gp_fit``.

    The fitted members' features (mean, log std and evidence of each) enter the
    point encoder after the bank's, so they get zero input rows there: the widened
    model predicts as the one without them until training moves them.

    Raises
    ------
    ConfigError
        If ``params`` are not those of ``config`` without its fitted members.

    Examples
    --------
    >>> plain = BSATNPConfig.tiny(gp_bank=(("rbf", 0.5, 0.01),))
    >>> fitted = plain.replace(gp_fit=(("matern32", 0.01),))
    >>> _, params = nnx.split(BSATNP(plain, rngs=nnx.Rngs(0)))
    >>> rows = lambda p: p["embed"]["layers"][0]["kernel"].shape[0]
    >>> rows(with_fit_members(params, fitted)) - rows(params)
    3
    """
    offset = config.dim_obs_embed + config.dim_x + 2 * len(config.gp_bank)
    rows, want = params["embed"]["layers"][0]["kernel"].shape[0], point_inputs(config)
    if rows != want - 3 * len(config.gp_fit):
        raise ConfigError(
            f"these parameters take {rows} point inputs, not the "
            f"{want - 3 * len(config.gp_fit)} of "
            "this configuration without fitted members: widen the model they belong to "
            "(its gp_bank and covariates as in the configuration, no gp_fit)."
        )
    return with_zero_inputs(params, offset, 3 * len(config.gp_fit))


def describe(model: BSATNP) -> dict[str, Any]:
    """A short summary of a model (parameter count and the config)."""
    return {"parameters": count_params(model), **model.config.to_dict()}

"""Swin-TNP: the gridded pseudo-token transformer neural process (Ashman et al. 2025).

Pipeline (paper §4, with the reference code's layout, see the design notes §3.14)::

    z_c = MLP([flag, x, pos(s), t, f])         z_t = MLP([flag, x, pos(s), t, 0])
    U   = PT-GE(U0, z_c)                       each node attends to its own points
    for l in 1..L:
        U   = SwinLayer_l(U)                   window MHSA, then shifted-window MHSA
        z_t = NNCA_l(z_t, U[3 × 3 nodes around each target])
    mean, std = head(LN(z_t))

* **Point tokens.**  One MLP for context and targets, over the observed/target
  flag, the fixed effects ``x``, absolute position features (Fourier features of
  the planar coordinates or of the unit vector on the sphere; none in the
  translation-equivariant variant), optionally ``t``, and the value ``f`` (zero
  for targets).
* **Pseudo-token grid encoder (PT-GE, k = 1).**  Each node's key set is the points
  whose nearest node it is plus its own initial token (per node, learned; one
  shared token in the equivariant variant), so an empty cell returns an update of
  its own latent.  Bucketing is index arithmetic (:func:`xnp.nn.windows.cell_index`)
  and the per-node softmax is a *segment* softmax: every point's logit against its
  node's query, a segment maximum and segment sums over node ids.  This is exact,
  O(N + M) in time and memory, needs no per-node capacity (so nothing can overflow
  however clustered the data are) and has static shapes.  Padded points fall in no
  segment and contribute exactly zero.
* **Processor.**  Swin layers: one pre-norm attention block (shared weights, as in
  the reference code) applied to the windows and then to the shifted windows,
  with a learned relative-position bias per head inside windows.  Longitude wraps
  on a global grid; other axes are padded to window multiples and the padding is
  masked (:mod:`xnp.nn.windows`).
* **Decoder (NN-CA).**  After each Swin layer, each target token cross-attends to
  its ``(2r+1)²`` nearest nodes (k = 9), with a bias from an MLP of the offsets
  (cells along each axis, and the great-circle distance on the sphere).  Each
  layer has its own weights.  Targets never see each other: any chunking of the
  targets gives the same answer.

The split API: :meth:`SwinTNP.condition` runs the encoder and processor once and
keeps each layer's projected node keys and values (:class:`GridState`);
:meth:`SwinTNP.predict` decodes any chunk of targets against it.

**Time.**  Time is a point feature (``embed_t``), not a grid axis: context frames
of a forecast task fall in the same spatial cells, and each node's attention pools
its points from all frames, told apart by their time feature.  Forecast targets lie
*after* the context frames, where a time axis of the grid would have no node to
decode from, and the grid, the Swin cost and the decoder stay 2-D whatever the
number of frames.  (The paper's alternative, a ``t × lat × lon`` grid with
``4 × 4 × 4`` windows and 27-node decoding, suits interpolation inside a fixed
window of frames.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from xnp.arrays import Points
from xnp.errors import ShapeError
from xnp.geo.distance import latlon_to_xyz
from xnp.models.likelihoods import gaussian_from_raw, gaussian_nll
from xnp.models.swin_config import SwinTNPConfig
from xnp.nn.layers import MLP, dense
from xnp.nn.windows import (
    cell_index,
    crop_grid,
    flat_index,
    local_attention,
    neighbour_cells,
    node_position,
    pad_grid,
    relative_offsets,
    relative_position_index,
    shift_grid,
    window_merge,
    window_pair_mask,
    window_partition,
)

__all__ = ["GridState", "SwinTNP", "SwinTNPConfig"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GridState:
    """The conditioned context: the processed grid, as each decoder layer reads it.

    Attributes
    ----------
    kv : list of (keys, values)
        Per layer, the projected node keys and values ``[B, M, H, D]`` (``M``
        nodes, row-major).
    origin : array ``[B, 2]``
        Lower edge of each task's grid.
    """

    kv: list[tuple[jax.Array, jax.Array]]
    origin: jax.Array


class Attention(nnx.Module):
    """Query, key, value and output projections of multi-head attention."""

    def __init__(self, d: int, d_attn: int, n_heads: int, *, rngs: nnx.Rngs, dtype: Any):
        self.n_heads = n_heads
        self.q = dense(d, d_attn, rngs=rngs, dtype=dtype)
        self.k = dense(d, d_attn, rngs=rngs, dtype=dtype)
        self.v = dense(d, d_attn, rngs=rngs, dtype=dtype)
        self.out = dense(d_attn, d, rngs=rngs, dtype=dtype)

    def _heads(self, x: jax.Array) -> jax.Array:
        return x.reshape(*x.shape[:-1], self.n_heads, x.shape[-1] // self.n_heads)

    def queries(self, x: jax.Array) -> jax.Array:
        """``[..., d]`` → ``[..., H, D]``."""
        return self._heads(self.q(x))

    def keys_values(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``[..., d]`` → keys and values ``[..., H, D]``."""
        return self._heads(self.k(x)), self._heads(self.v(x))

    def output(self, o: jax.Array) -> jax.Array:
        """``[..., H, D]`` → ``[..., d]``."""
        return self.out(o.reshape(*o.shape[:-2], -1))


def _n_offsets(cfg: SwinTNPConfig) -> int:
    return 3 if cfg.geometry == "sphere" else 2


class GridEncoder(nnx.Module):
    """Pseudo-token grid encoder: each node attends to its points and its initial token."""

    def __init__(self, cfg: SwinTNPConfig, *, rngs: nnx.Rngs):
        d, dtype = cfg.dim_token, jnp.dtype(cfg.dtype)
        self.cfg = cfg
        n_init = 1 if cfg.translation_equivariant else cfg.grid_shape[0] * cfg.grid_shape[1]
        self.init_tokens = nnx.Param(jax.random.normal(rngs.params(), (n_init, d), jnp.float32))
        self.norm1 = nnx.LayerNorm(d, dtype=dtype, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, dtype=dtype, rngs=rngs)
        self.attn = Attention(d, cfg.dim_attn, cfg.n_heads, rngs=rngs, dtype=dtype)
        self.bias = MLP([_n_offsets(cfg), *cfg.bias_hidden, cfg.n_heads], dtype=dtype, rngs=rngs)
        self.ffn = MLP([d, cfg.ffn_hidden, d], dtype=dtype, rngs=rngs)

    def __call__(
        self, z: jax.Array, s: jax.Array, mask: jax.Array, origin: jax.Array
    ) -> jax.Array:
        """Grid ``[B, n0, n1, d]`` from point tokens ``z`` ``[B, N, d]`` at ``s`` ``[B, N, 2]``."""
        cfg = self.cfg
        (n0, n1), (b, n) = cfg.grid_shape, mask.shape
        m, h = n0 * n1, cfg.n_heads
        u0 = jnp.broadcast_to(self.init_tokens[...][None], (b, m, cfg.dim_token))
        hu, hz = self.norm1(u0), self.norm1(z)
        q = self.attn.queries(hu)  # [B, M, H, D]
        k_self, v_self = self.attn.keys_values(hu)
        k_pt, v_pt = self.attn.keys_values(hz)  # [B, N, H, D]
        idx = cell_index(s, origin[:, None], cfg.spacing, cfg.grid_shape, cfg.wrap,
                         periodic_lon=cfg.geometry == "sphere")  # fmt: skip
        node = flat_index(idx, cfg.grid_shape)  # [B, N]
        offsets = relative_offsets(
            s, node_position(idx, origin[:, None], cfg.spacing), cfg.spacing, cfg.geometry
        )
        scale = q.shape[-1] ** -0.5
        q_pt = jax.vmap(lambda a, i: a[i])(q, node)  # [B, N, H, D]
        logit_pt = jnp.sum(q_pt * k_pt, -1, dtype=jnp.float32) * scale + self.bias(offsets)
        zero = jnp.zeros((1, 1, offsets.shape[-1]), offsets.dtype)
        logit_self = jnp.sum(q * k_self, -1, dtype=jnp.float32) * scale + self.bias(zero)

        # segment softmax over {points of node m} ∪ {node m's own token}
        seg = jnp.where(mask, node + m * jnp.arange(b)[:, None], b * m).reshape(-1)
        flat_logit = jnp.where(mask[..., None], logit_pt, -jnp.inf).reshape(b * n, h)
        top = jax.ops.segment_max(flat_logit, seg, num_segments=b * m).reshape(b, m, h)
        top = jax.lax.stop_gradient(jnp.maximum(top, logit_self))  # only for stability
        top_pt = jnp.take(top.reshape(b * m, h), jnp.minimum(seg, b * m - 1), axis=0)
        w_pt = jnp.exp(flat_logit - top_pt)  # [B·N, H]; exactly 0 for padding
        w_self = jnp.exp(logit_self - top)  # [B, M, H]
        dv = v_pt.shape[-1]
        num = jax.ops.segment_sum(
            w_pt[..., None] * v_pt.reshape(b * n, h, dv).astype(jnp.float32), seg, b * m
        ).reshape(b, m, h, dv)
        den = jax.ops.segment_sum(w_pt, seg, b * m).reshape(b, m, h) + w_self
        num = num + w_self[..., None] * v_self.astype(jnp.float32)
        out = (num / den[..., None]).astype(v_pt.dtype)
        u = u0 + self.attn.output(out)
        u = u + self.ffn(self.norm2(u))
        return u.reshape(b, n0, n1, cfg.dim_token)


class SwinLayer(nnx.Module):
    """Window attention, then shifted-window attention, with one set of weights."""

    def __init__(self, cfg: SwinTNPConfig, *, rngs: nnx.Rngs):
        d, dtype = cfg.dim_token, jnp.dtype(cfg.dtype)
        self.cfg = cfg
        (w0, w1), h = cfg.window, cfg.n_heads
        self.norm1 = nnx.LayerNorm(d, dtype=dtype, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, dtype=dtype, rngs=rngs)
        self.attn = Attention(d, cfg.dim_attn, h, rngs=rngs, dtype=dtype)
        self.rel_bias = nnx.Param(jnp.zeros(((2 * w0 - 1) * (2 * w1 - 1), h), jnp.float32))
        self.ffn = MLP([d, cfg.ffn_hidden, d], dtype=dtype, rngs=rngs)

    def _block(self, u: jax.Array, shift: tuple[int, int]) -> jax.Array:
        cfg = self.cfg
        win, wrap = cfg.window, cfg.wrap
        b, n0, n1, _ = u.shape
        hu = self.norm1(u)
        q = self.attn.queries(hu)
        k, v = self.attn.keys_values(hu)  # [B, n0, n1, H, D]
        pair = window_pair_mask((n0, n1), win, shift, wrap=wrap)  # [W, S, S], static
        n_win, size = pair.shape[:2]

        def windows(x: jax.Array) -> jax.Array:
            x = window_partition(shift_grid(pad_grid(x, win, wrap=wrap), shift), win)
            return x.reshape(b, n_win, size, *x.shape[2:])

        table = self.rel_bias[...][relative_position_index(win)]  # [S, S, H]
        bias = jnp.transpose(table, (2, 0, 1))[None, None]  # [1, 1, H, S, S]
        out = local_attention(
            windows(q), windows(k), windows(v), bias=bias, mask=jnp.asarray(pair)[None, :, None]
        )
        out = self.attn.output(out.reshape(b * n_win, size, *out.shape[3:]))
        grid = window_merge(out, pad_grid(u, win, wrap=wrap).shape[1:3], win)
        u = u + crop_grid(shift_grid(grid, shift, inverse=True), (n0, n1))
        return u + self.ffn(self.norm2(u))

    def __call__(self, u: jax.Array) -> jax.Array:
        """Update the grid ``[B, n0, n1, d]``."""
        u = self._block(u, (0, 0))
        if any(self.cfg.shift):
            u = self._block(u, self.cfg.shift)
        return u


class DecoderLayer(nnx.Module):
    """Nearest-neighbour cross-attention from target tokens to the grid."""

    def __init__(self, cfg: SwinTNPConfig, *, rngs: nnx.Rngs):
        d, dtype = cfg.dim_token, jnp.dtype(cfg.dtype)
        self.norm1 = nnx.LayerNorm(d, dtype=dtype, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, dtype=dtype, rngs=rngs)
        self.attn = Attention(d, cfg.dim_attn, cfg.n_heads, rngs=rngs, dtype=dtype)
        self.bias = MLP([_n_offsets(cfg), *cfg.bias_hidden, cfg.n_heads], dtype=dtype, rngs=rngs)
        self.ffn = MLP([d, cfg.ffn_hidden, d], dtype=dtype, rngs=rngs)

    def grid_kv(self, u: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Keys and values ``[B, M, H, D]`` of the grid ``u`` ``[B, n0, n1, d]``."""
        k, v = self.attn.keys_values(self.norm1(u))
        b = u.shape[0]
        return k.reshape(b, -1, *k.shape[3:]), v.reshape(b, -1, *v.shape[3:])

    def __call__(
        self,
        z: jax.Array,
        kv: tuple[jax.Array, jax.Array],
        nodes: jax.Array,
        valid: jax.Array,
        offsets: jax.Array,
    ) -> jax.Array:
        """Update target tokens ``z`` ``[B, Nt, d]`` from their nodes ``[B, Nt, K]``."""
        gather = jax.vmap(lambda a, i: a[i])
        k, v = gather(kv[0], nodes), gather(kv[1], nodes)  # [B, Nt, K, H, D]
        q = self.attn.queries(self.norm1(z))[:, :, None]  # [B, Nt, 1, H, D]
        bias = jnp.swapaxes(self.bias(offsets), -1, -2)[:, :, :, None, :]  # [B, Nt, H, 1, K]
        out = local_attention(q, k, v, bias=bias, mask=valid[:, :, None, None, :])
        z = z + self.attn.output(out[:, :, 0])
        return z + self.ffn(self.norm2(z))


class SwinTNP(nnx.Module):
    """The Swin-TNP model (Flax NNX).

    Parameters
    ----------
    config : SwinTNPConfig
        Architecture and grid; see :class:`xnp.models.swin_config.SwinTNPConfig`.
    rngs : nnx.Rngs
        Random state for parameter initialisation.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from xnp.arrays import Points
    >>> model = SwinTNP(SwinTNPConfig.tiny(), rngs=nnx.Rngs(0))
    >>> ctx = Points.from_arrays(s=jnp.zeros((1, 5, 2)), f=jnp.ones((1, 5, 1)))
    >>> tgt = Points.from_arrays(s=jnp.ones((1, 3, 2)))
    >>> mean, std = nnx.jit(lambda m, c, t: m(c, t))(model, ctx, tgt)
    >>> mean.shape, bool((std > 0).all())
    ((1, 3, 1), True)
    """

    def __init__(self, config: SwinTNPConfig, *, rngs: nnx.Rngs):
        cfg = self.config = config
        dtype = jnp.dtype(cfg.dtype)
        d_in = cfg.dim_obs_embed + cfg.dim_x + self._n_pos_features() + int(cfg.embed_t)
        self.obs_embed = nnx.Embed(2, cfg.dim_obs_embed, rngs=rngs)
        self.embed = MLP(
            [d_in + cfg.dim_y, *cfg.embed_hidden, cfg.dim_token], dtype=dtype, rngs=rngs
        )
        self.encoder = GridEncoder(cfg, rngs=rngs)
        self.layers = nnx.List([SwinLayer(cfg, rngs=rngs) for _ in range(cfg.n_layers)])
        self.decoders = nnx.List([DecoderLayer(cfg, rngs=rngs) for _ in range(cfg.n_layers)])
        self.final_norm = nnx.LayerNorm(cfg.dim_token, dtype=dtype, rngs=rngs)
        self.head = MLP([cfg.dim_token, *cfg.head_hidden, 2 * cfg.dim_y], dtype=dtype, rngs=rngs)

    # -- helpers -----------------------------------------------------------------------
    def _n_pos_features(self) -> int:
        cfg = self.config
        if cfg.translation_equivariant:
            return 0
        c = 3 if cfg.geometry == "sphere" else 2
        return c * (1 + 2 * cfg.n_fourier)

    def _position_features(self, s: jax.Array) -> jax.Array:
        """Absolute position features: coordinates (or unit vector) and Fourier features."""
        cfg = self.config
        if cfg.geometry == "sphere":
            u = latlon_to_xyz(s[..., 0], s[..., 1])
            lo, hi = np.deg2rad(min(cfg.spacing)), 4.0
        else:
            u = s
            lo, hi = min(cfg.spacing), 2.0 * max(h - lo for lo, h in cfg.extent)
        if not cfg.n_fourier:
            return u
        freq = 2.0 * np.pi / np.geomspace(lo, hi, cfg.n_fourier)
        phase = (u[..., None] * jnp.asarray(freq, u.dtype)[None, None, None]).reshape(
            *u.shape[:-1], -1
        )
        return jnp.concatenate([u, jnp.sin(phase), jnp.cos(phase)], axis=-1)

    def _tokens(self, p: Points, *, observed: bool) -> jax.Array:
        cfg = self.config
        b, n = p.mask.shape
        parts = [self.obs_embed(jnp.full((b, n), int(observed), jnp.int32)), p.x]
        if not cfg.translation_equivariant:
            parts.append(self._position_features(p.s))
        if cfg.embed_t:
            parts.append(p.t / jnp.asarray(cfg.temporal_scale, p.t.dtype))
        parts.append(p.f if observed else jnp.zeros_like(p.f))
        dtype = jnp.dtype(cfg.dtype)
        return self.embed(jnp.concatenate([a.astype(dtype) for a in parts], axis=-1))

    def _origin(self, context: Points) -> jax.Array:
        """Lower edge ``[B, 2]`` of each task's grid."""
        cfg = self.config
        b = context.mask.shape[0]
        lo = jnp.asarray([e[0] for e in cfg.extent], context.s.dtype)
        fixed = jnp.broadcast_to(lo[None], (b, 2))
        if cfg.grid_anchor == "fixed":
            return fixed
        span = jnp.asarray([e[1] - e[0] for e in cfg.extent], context.s.dtype)[None]
        m = context.mask[..., None]
        smin = jnp.min(jnp.where(m, context.s, jnp.inf), axis=1)
        smax = jnp.max(jnp.where(m, context.s, -jnp.inf), axis=1)
        centred = 0.5 * (smin + smax) - 0.5 * span
        return jnp.where(jnp.any(context.mask, axis=1)[:, None], centred, fixed)

    # -- public API --------------------------------------------------------------------
    def condition(self, context: Points) -> GridState:
        """Encode the context onto the grid and run the processor, once."""
        context.validate_for(self.config, "context")
        origin = self._origin(context)
        u = self.encoder(self._tokens(context, observed=True), context.s, context.mask, origin)
        kv = []
        for layer, decoder in zip(self.layers, self.decoders, strict=True):
            u = layer(u)
            kv.append(decoder.grid_kv(u))
        return GridState(kv=kv, origin=origin)

    def predict(self, state: GridState, targets: Points) -> tuple[jax.Array, jax.Array]:
        """Predictive mean and standard deviation ``[B, Nt, Dy]`` at the targets.

        Targets are independent given the grid, so any split of ``targets`` into
        chunks gives the same values.  Target ``f`` values are ignored.
        """
        cfg = self.config
        targets.validate_for(self.config, "target")
        if len(state.kv) != len(self.decoders):
            raise ShapeError(
                f"the grid state has {len(state.kv)} layers; this model has "
                f"{len(self.decoders)}. Condition with the same model you predict with."
            )
        origin = state.origin[:, None, None]  # [B, 1, 1, 2]
        idx, valid = neighbour_cells(
            targets.s, state.origin[:, None], cfg.spacing, cfg.grid_shape, cfg.wrap,
            radius=cfg.decoder_radius, periodic_lon=cfg.geometry == "sphere",
        )  # fmt: skip
        offsets = relative_offsets(
            targets.s[:, :, None], node_position(idx, origin, cfg.spacing), cfg.spacing,
            cfg.geometry,
        )  # fmt: skip
        nodes = flat_index(idx, cfg.grid_shape)
        z = self._tokens(targets, observed=False)
        for decoder, kv in zip(self.decoders, state.kv, strict=True):
            z = decoder(z, kv, nodes, valid, offsets)
        raw = self.head(self.final_norm(z)).astype(jnp.float32)
        return gaussian_from_raw(raw, min_std=cfg.min_std)

    def __call__(self, context: Points, targets: Points) -> tuple[jax.Array, jax.Array]:
        """``predict(condition(context), targets)``."""
        return self.predict(self.condition(context), targets)

    def loss(self, context: Points, targets: Points, y: jax.Array) -> jax.Array:
        """Mean Gaussian NLL of ``y`` ``[B, Nt, Dy]`` over the valid targets."""
        mean, std = self(context, targets)
        return gaussian_nll(mean, std, y, targets.mask)

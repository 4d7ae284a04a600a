"""Fused biased attention for GPUs: Pallas kernels (Triton on NVIDIA), forward pass.

The GPU counterpart of :func:`xnp.nn.native.rbf_attention`: biased attention
``softmax(q kᵀ / √D + B) v`` with the RBF bias ``B`` of
:class:`xnp.nn.bias.SpaceTimeBias` (:class:`~xnp.nn.bias.RBFSpec` and its
weights) computed *inside* the kernel from the points' features.  One program
handles a block of ``block_q`` queries of one batch element for a group of heads;
it walks over the keys in tiles of ``block_k``, computes each tile's squared
distances (great-circle or Euclidean, and in time) once for all the heads of its
group, then per head the scores, the bias ``Σ_f a_hf exp(-b_hf z)`` and the online
softmax (running maximum and sum, rescaled output; FlashAttention-2).  It writes
the output and the log-sum-exp of each query's biased scores; no ``[Nq, Nk]``
score, bias or distance matrix is stored.  The backward pass is
:mod:`xnp.nn.pallas_attention_bwd`.

:func:`xnp.nn.attention.biased_scan_attention` runs these kernels on NVIDIA GPUs
(the ``cuda`` branch of its :func:`xnp.nn.dispatch.by_platform` dispatch) for RBF
biases and float32 or bfloat16 inputs; the CPU runs the native C++ kernels and
other platforms the tiled JAX loops, which stay the reference.  ``XNP_PALLAS=0``
turns the kernels off (the tiled JAX path then runs on GPUs too); ``auto``, the
default, or ``1`` leaves them on.

Inputs are padded here, not in the kernel: the points to multiples of the blocks
(padded keys are masked, padded queries dropped) and the head dimensions to a
power of two of at least 16 (zeros, which change no dot product), as Triton needs.
Scores and softmax statistics are float32; with bfloat16 inputs the dot products
run on bfloat16 operands with float32 accumulation, with float32 inputs in full
float32 precision (no TF32), so that results agree with the CPU's to float32
rounding.  ``interpret=True`` runs a kernel in Pallas's interpreter, on any
platform (this is how the tests check it on a CPU).

Examples
--------
>>> import jax
>>> from xnp.nn.bias import SpaceTimeBias
>>> bias = SpaceTimeBias(2, spatial="euclidean", spatial_scale=1.0)
>>> q = k = v = jax.random.normal(jax.random.key(0), (1, 20, 2, 8))
>>> s = jax.random.uniform(jax.random.key(1), (1, 20, 2))
>>> feats = bias.features(s, None)
>>> spec, weights = bias.bind().native_rbf
>>> mask = jnp.ones((1, 20), bool)
>>> out, lse = rbf_attention(q, k, v, mask, feats, feats, spec, weights, interpret=True)
>>> out.shape, lse.shape
((1, 20, 2, 8), (1, 2, 20))
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from xnp.errors import ConfigError
from xnp.nn.bias import RBFSpec
from xnp.nn.native import switch

__all__ = ["enabled", "rbf_attention"]

#: Largest ``heads × padded head dimension`` one program handles (register budget).
_HEAD_BUDGET = 128

#: ``arcsin(√u)/√u = 1 + u·P(u)``: the coefficients of ``P`` that
#: :func:`xnp.geo.pairwise_sq_central_angle` uses (as ``rbf.cc`` does;
#: ``tests/test_pallas.py`` checks that they are the same)
ASIN_RATIO = (
    0.16666627, 0.07502463, 0.04412134, 0.0356585,
    -0.00657315, 0.10670699, -0.13540055, 0.12378763,
)  # fmt: skip


def enabled() -> bool:
    """Whether ``XNP_PALLAS`` lets Biased Scan Attention use these kernels on NVIDIA GPUs.

    ``auto`` (the default) and ``1`` do, ``0`` does not; any other value raises
    :class:`~xnp.errors.ConfigError`.  (Whether a GPU is present is the caller's
    question: the kernels never run on the CPU outside the interpreter.)
    """
    return switch("XNP_PALLAS") != "0"


@dataclasses.dataclass(frozen=True)
class Static:
    """Everything a kernel is specialised on: shapes, blocks, which bias terms exist."""

    spec: RBFSpec
    heads: int  # heads per program
    block_q: int
    block_k: int
    n_space: int  # basis functions of the spatial RBF network (0: none)
    n_time: int  # ... of the temporal one
    n_coords: int  # coordinates of a point's spatial features
    scale: float  # 1/√D of the unpadded head dimension
    precision: Any  # of the dot products

    @property
    def n_feats(self) -> int:
        """Feature inputs of a kernel: (query, key) for space, then for time."""
        return 2 * (self.n_space > 0) + 2 * (self.n_time > 0)


@dataclasses.dataclass(frozen=True)
class Padded:
    """The operands of the kernels, padded and laid out for them (see :func:`prepare`)."""

    q: jax.Array  # [B, Nqp, H, Dp]
    k: jax.Array  # [B, Nkp, H, Dp]
    v: jax.Array  # [B, Nkp, H, Dvp]
    mask: jax.Array  # int32 [B, Nkp], 0 for masked and padded keys
    feats: tuple[jax.Array, ...]  # space [B, C, Nqp], [B, C, Nkp]; time [B, Nqp], [B, Nkp]
    weights: jax.Array  # float32 [H, 2 (Fs + Ft)]: a_s, -b_s, a_t, -b_t
    static: Static


def _next_pow2(n: int, least: int) -> int:
    return max(least, 1 << max(0, n - 1).bit_length())


def _block(n: int, block: int) -> int:
    if block < 16 or block & (block - 1):
        raise ConfigError(f"Pallas block sizes must be powers of two ≥ 16; got {block}.")
    return min(block, _next_pow2(n, 16))


def _heads_per_program(h: int, width: int, heads: int | None) -> int:
    if heads is not None:
        if heads <= 0 or h % heads:
            raise ConfigError(f"heads_per_block must divide the {h} heads; got {heads}.")
        return heads
    return max(n for n in range(1, h + 1) if h % n == 0 and (n == 1 or n * width <= _HEAD_BUDGET))


def _pad(x: jax.Array, axis: int, n: int) -> jax.Array:
    extra = n - x.shape[axis]
    if not extra:
        return x
    pads = [(0, 0)] * x.ndim
    pads[axis] = (0, extra)
    return jnp.pad(x, pads)


def prepare(q, k, v, mask, q_feats, k_feats, spec, weights, *, block_q, block_k, heads):
    """Pad and lay out the operands for the kernels: a :class:`Padded`.

    The points are padded to multiples of the (possibly shrunk) blocks, the head
    dimensions to a power of two ≥ 16, the features transposed to ``[B, C, N]``
    and the weights gathered into one ``[H, 2 (Fs + Ft)]`` float32 array.
    """
    _, nq, h, d = q.shape
    nk, dv = k.shape[1], v.shape[-1]
    bq, bk = _block(nq, block_q), _block(nk, block_k)
    nqp, nkp = -(-nq // bq) * bq, -(-nk // bk) * bk
    dp, dvp = _next_pow2(d, 16), _next_pow2(dv, 16)
    w = [jnp.asarray(x, jnp.float32) for x in weights]
    space = (w.pop(0), w.pop(0)) if spec.metric != "none" else None
    time = (w.pop(0), w.pop(0)) if spec.temporal else None
    cols, feats = [], []
    if space is not None:
        cols += [space[0], -space[1]]
        for tree, n in ((q_feats, nqp), (k_feats, nkp)):
            feats.append(_pad(jnp.swapaxes(tree["s"].astype(jnp.float32), 1, 2), 2, n))
    if time is not None:
        cols += [time[0], -time[1]]
        for tree, n in ((q_feats, nqp), (k_feats, nkp)):
            feats.append(_pad(tree["t"][..., 0].astype(jnp.float32), 1, n))
    weights_hw = jnp.concatenate(cols, axis=1) if cols else jnp.zeros((h, 1), jnp.float32)
    dtype = q.dtype
    static = Static(
        spec=spec,
        heads=_heads_per_program(h, max(dp, dvp), heads),
        block_q=bq,
        block_k=bk,
        n_space=0 if space is None else space[0].shape[1],
        n_time=0 if time is None else time[0].shape[1],
        n_coords=0 if space is None else q_feats["s"].shape[-1],
        scale=d**-0.5,
        precision=jax.lax.Precision.HIGHEST if dtype == jnp.float32 else None,
    )
    return Padded(
        q=_pad(_pad(q, 1, nqp), 3, dp),
        k=_pad(_pad(k.astype(dtype), 1, nkp), 3, dp),
        v=_pad(_pad(v.astype(dtype), 1, nkp), 3, dvp),
        mask=_pad(jnp.asarray(mask, bool).astype(jnp.int32), 1, nkp),
        feats=tuple(feats),
        weights=weights_hw,
        static=static,
    )


# ---------------------------------------------------------------------------
# Pieces shared by the forward and backward kernels (traced inside a kernel)


def dot(a: jax.Array, b: jax.Array, st: Static, axes: tuple[int, int]) -> jax.Array:
    """Float32 product of 2-D ``a`` and ``b`` contracting their ``axes``.

    ``(1, 1)`` is ``a bᵀ``, ``(0, 0)`` is ``aᵀ b`` and ``(1, 0)`` is ``a b``.
    """
    dims = (((axes[0],), (axes[1],)), ((), ()))
    return jax.lax.dot_general(
        a, b, dims, precision=st.precision, preferred_element_type=jnp.float32
    )


def load_feats(refs: tuple, st: Static, side: int, rows: Any) -> list[jax.Array]:
    """One side's features (0: queries, 1: keys) for the points ``rows`` of a block.

    Returns the spatial coordinates (one ``[n]`` vector each), then the time ``[n]``.
    """
    out, i = [], 0
    if st.n_space:
        out += [refs[i + side][c, rows] for c in range(st.n_coords)]
        i += 2
    if st.n_time:
        out.append(refs[i + side][rows])
    return out


def distances(st: Static, fq: list, fk: list) -> tuple[Any, Any]:
    """Squared scaled distances ``[bq, bk]`` of a tile: ``(space, time)``, None if absent.

    The computation of :func:`xnp.nn.bias.pairwise_sq_distance` (great circle:
    :func:`xnp.geo.pairwise_sq_central_angle`, scaled), one pair at a time.
    """
    zs = zt = None
    if st.n_space:
        c = st.n_coords
        if st.spec.metric == "great_circle":
            diff = [fq[i][:, None] - fk[i][None, :] for i in range(3)]
            summ = [fq[i][:, None] + fk[i][None, :] for i in range(3)]
            c2 = diff[0] * diff[0] + diff[1] * diff[1] + diff[2] * diff[2]
            s2 = summ[0] * summ[0] + summ[1] * summ[1] + summ[2] * summ[2]
            near = c2 <= s2
            u = 0.25 * jnp.where(near, c2, s2)
            poly = jnp.full_like(u, ASIN_RATIO[-1])
            for coef in ASIN_RATIO[-2::-1]:
                poly = poly * u + coef
            g = 1.0 + u * poly
            far = math.pi - 2.0 * jnp.sqrt(jnp.maximum(u, 1e-30)) * g
            zs = jnp.where(near, 4.0 * u * g * g, far * far) * (st.spec.gc_scale**2)
        else:
            zs = 0.0
            for i in range(c):
                diff = fq[i][:, None] - fk[i][None, :]
                zs = zs + diff * diff
    if st.n_time:
        diff = fq[-1][:, None] - fk[-1][None, :]
        zt = diff * diff
    return zs, zt


def term_columns(st: Static) -> list[tuple[int, int, int]]:
    """Per basis function: the weights' columns of ``a`` and ``-b``, and its distance.

    The distance is 0 (spatial) or 1 (temporal); the columns are ``a_s``, ``-b_s``,
    ``a_t``, ``-b_t`` (:func:`prepare`).
    """
    cols = [(f, st.n_space + f, 0) for f in range(st.n_space)]
    first = 2 * st.n_space
    return cols + [(first + f, first + st.n_time + f, 1) for f in range(st.n_time)]


def rbf_terms(st: Static, w_ref: Any, h: int) -> list[tuple[Any, Any, int]]:
    """Head ``h``'s basis functions: scalars ``(a, -b)`` and which distance they read."""
    return [(w_ref[h, ca], w_ref[h, cb], which) for ca, cb, which in term_columns(st)]


def biased_scores(st, q_h, k_h, z, terms, keep) -> jax.Array:
    """Masked biased scores ``[bq, bk]`` (float32) of one head: ``q kᵀ/√D + bias``."""
    s = dot(q_h, k_h, st, (1, 1)) * st.scale
    for a, nb, which in terms:
        s = s + a * jnp.exp(nb * z[which])
    return jnp.where(keep[None, :], s, -jnp.inf)


# ---------------------------------------------------------------------------
# The forward kernel


def _forward_kernel(*refs, st: Static, n_k_blocks: int):
    q_ref, k_ref, v_ref, mask_ref = refs[:4]
    feat_refs = refs[4 : 4 + st.n_feats]
    w_ref, out_ref, lse_ref = refs[4 + st.n_feats :]
    bq, bk = st.block_q, st.block_k
    fq = load_feats(feat_refs, st, 0, slice(None))
    terms = [rbf_terms(st, w_ref, h) for h in range(st.heads)]
    dv = v_ref.shape[-1]

    def body(j, carry):
        rows = pl.ds(pl.multiple_of(j * bk, bk), bk)
        keep = mask_ref[rows] > 0
        z = distances(st, fq, load_feats(feat_refs, st, 1, rows))
        new = []
        for h in range(st.heads):
            m, den, acc = carry[h]
            s = biased_scores(st, q_ref[:, h, :], k_ref[rows, h, :], z, terms[h], keep)
            m_new = jnp.maximum(m, jnp.max(s, axis=1))
            m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # rows with no key yet
            p = jnp.exp(s - m_safe[:, None])
            corr = jnp.exp(m - m_safe)
            den = corr * den + jnp.sum(p, axis=1)
            v_h = v_ref[rows, h, :]
            acc = corr[:, None] * acc + dot(p.astype(v_h.dtype), v_h, st, (1, 0))
            new.append((m_new, den, acc))
        return tuple(new)

    init = tuple(
        (
            jnp.full((bq,), -jnp.inf, jnp.float32),
            jnp.zeros((bq,), jnp.float32),
            jnp.zeros((bq, dv), jnp.float32),
        )
        for _ in range(st.heads)
    )
    stats = jax.lax.fori_loop(0, n_k_blocks, body, init)
    for h, (m, den, acc) in enumerate(stats):
        valid = den > 0
        safe = jnp.where(valid, den, 1.0)
        out_ref[:, h, :] = jnp.where(valid[:, None], acc / safe[:, None], 0.0).astype(
            out_ref.dtype
        )
        lse_ref[h, :] = jnp.where(valid, m + jnp.log(safe), jnp.inf)


def feature_specs(st: Static, over: str, n_q: int, n_k: int) -> list[pl.BlockSpec]:
    """BlockSpecs of the feature operands on a grid ``(blocks, B, head groups)``.

    ``over`` is the side the grid's blocks run over, ``"q"`` or ``"k"``: that
    side's features come as the program's block, the other side's whole (``n_q``,
    ``n_k`` padded points).  Spatial features are ``[B, C, N]``, times ``[B, N]``.
    """
    lead = []
    if st.n_space:
        lead.append((st.n_coords,))
    if st.n_time:
        lead.append(())
    specs = []
    for dims in lead:
        zeros = (0,) * len(dims)
        for side, n, size in (("q", n_q, st.block_q), ("k", n_k, st.block_k)):
            if side == over:
                spec = pl.BlockSpec((None, *dims, size), lambda i, b, g, z=zeros: (b, *z, i))
            else:
                spec = pl.BlockSpec((None, *dims, n), lambda i, b, g, z=zeros: (b, *z, 0))
            specs.append(spec)
    return specs


def weight_spec(x: Padded) -> pl.BlockSpec:
    """BlockSpec of the weights ``[H, 2 (Fs + Ft)]``: the rows of the program's heads."""
    return pl.BlockSpec((x.static.heads, x.weights.shape[1]), lambda i, b, g: (g, 0))


def compiler_params(num_warps: int, num_stages: int) -> plgpu.CompilerParams:
    """Triton's launch parameters (ignored by the interpreter)."""
    return plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages)


def rbf_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array,
    q_feats: Any,
    k_feats: Any,
    spec: RBFSpec,
    weights: Any,
    *,
    block_q: int = 64,
    block_k: int = 64,
    heads_per_block: int | None = None,
    num_warps: int = 4,
    num_stages: int = 2,
    interpret: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Biased attention with an RBF bias in one Pallas kernel: ``(out, lse)``.

    Computes what :func:`xnp.nn.native.rbf_attention` computes on the CPU.

    Parameters
    ----------
    q, k, v : array, shapes ``[B, Nq, H, D]``, ``[B, Nk, H, D]``, ``[B, Nk, H, Dv]``
        Queries, keys and values: float32 or bfloat16 (``k`` and ``v`` are cast
        to the dtype of ``q``).
    mask : bool array, shape ``[B, Nk]``
        True for real keys.
    q_feats, k_feats : dict
        Per-point features of :meth:`xnp.nn.bias.SpaceTimeBias.features`
        (``"s"`` ``[B, N, C]``, ``"t"`` ``[B, N, 1]``), as ``spec`` needs them.
    spec : RBFSpec
        The bias: metric, scale, whether a temporal term follows.
    weights : sequence of arrays ``[H, F]``
        ``(a, b)`` of the spatial RBF network, then of the temporal one
        (:meth:`xnp.nn.bias.RBFSpec.bias`).
    block_q, block_k : int
        Queries per program and keys per tile: powers of two ≥ 16, shrunk for
        short inputs.
    heads_per_block : int, optional
        Heads per program (a divisor of ``H``), which share one distance tile.
        By default as many as keep ``heads × head dimension`` within 128.
    num_warps, num_stages : int
        Triton's launch parameters.
    interpret : bool
        Run in Pallas's interpreter (any platform; slow) instead of compiling
        with Triton for an NVIDIA GPU.

    Returns
    -------
    out : array, shape ``[B, Nq, H, Dv]``
        In the dtype of ``v``; zero for a query with no valid key.
    lse : float32 array, shape ``[B, H, Nq]``
        Log-sum-exp of each query's biased scores (+inf with no valid key).
    """
    b, nq, h, _ = q.shape
    x = prepare(
        q, k, v, mask, q_feats, k_feats, spec, weights,
        block_q=block_q, block_k=block_k, heads=heads_per_block,
    )  # fmt: skip
    st = x.static
    nqp, nkp = x.q.shape[1], x.k.shape[1]
    hg = st.heads
    operands = (x.q, x.k, x.v, x.mask, *x.feats, x.weights)
    dp, dvp = x.q.shape[-1], x.v.shape[-1]
    in_specs = [
        pl.BlockSpec((None, st.block_q, hg, dp), lambda i, b, g: (b, i, g, 0)),
        pl.BlockSpec((None, nkp, hg, dp), lambda i, b, g: (b, 0, g, 0)),
        pl.BlockSpec((None, nkp, hg, dvp), lambda i, b, g: (b, 0, g, 0)),
        pl.BlockSpec((None, nkp), lambda i, b, g: (b, 0)),
        *feature_specs(st, "q", nqp, nkp),
        weight_spec(x),
    ]
    out_shape = (
        jax.ShapeDtypeStruct((b, nqp, h, dvp), v.dtype),
        jax.ShapeDtypeStruct((b, h, nqp), jnp.float32),
    )
    out_specs = (
        pl.BlockSpec((None, st.block_q, hg, dvp), lambda i, b, g: (b, i, g, 0)),
        pl.BlockSpec((None, hg, st.block_q), lambda i, b, g: (b, g, i)),
    )
    kernel = functools.partial(_forward_kernel, st=st, n_k_blocks=nkp // st.block_k)
    out, lse = pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=(nqp // st.block_q, b, h // hg),
        in_specs=in_specs,
        out_specs=out_specs,
        compiler_params=compiler_params(num_warps, num_stages),
        interpret=interpret,
        name="xnp_rbf_attention",
    )(*operands)
    return out[:, :nq, :, : v.shape[-1]], lse[:, :, :nq]

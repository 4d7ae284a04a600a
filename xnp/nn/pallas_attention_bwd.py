"""Fused biased attention for GPUs: the backward pass, in two Pallas kernels.

The GPU counterpart of :func:`xnp.nn.native.rbf_attention_bwd`, in the
FlashAttention-2 form: from the forward's output statistics (the log-sum-exp
``lse`` of each query's biased scores) and ``delta = Σ_d dO · O``, each score
tile is recomputed, with its distances and RBF bias (:mod:`xnp.nn.pallas_attention`),
and nothing of size ``[Nq, Nk]`` is stored.  With ``P = exp(S - lse)`` and
``dS = P ∘ (dO Vᵀ - delta)``:

* the first kernel runs one program per block of keys (and batch element and
  group of heads), loops over the query blocks and accumulates
  ``dV = Pᵀ dO`` and ``dK = dSᵀ Q / √D``;
* the second runs one program per block of queries, loops over the key blocks
  and accumulates ``dQ = dS K / √D`` and, per head and basis function, the sums
  ``Σ dS e`` and ``Σ dS e z`` (``e = exp(-b z)``) that give the cotangents of the
  RBF weights: ``da = Σ dS e``, ``db = -a Σ dS e z``.  Each query block writes
  its row sums; they are added up outside the kernel, so the result does not
  depend on the order the programs run in (no atomics).

Scores are computed twice (once per kernel), as FlashAttention-2 does without
atomic additions, and the exponentials ``e`` once more in the second kernel for
the weights' sums (which keeps one tile of them live at a time instead of all).
The point features get no cotangent: as on the CPU, the tiled JAX backward
(:mod:`xnp.nn.attention_bwd`) runs when they need one.

Examples
--------
>>> import jax
>>> from xnp.nn.bias import SpaceTimeBias
>>> from xnp.nn.pallas_attention import rbf_attention
>>> bias = SpaceTimeBias(2, spatial="euclidean", spatial_scale=1.0)
>>> q = k = v = jax.random.normal(jax.random.key(0), (1, 20, 2, 8))
>>> feats = bias.features(jax.random.uniform(jax.random.key(1), (1, 20, 2)), None)
>>> spec, weights = bias.bind().native_rbf
>>> mask = jnp.ones((1, 20), bool)
>>> args = (q, k, v, mask, feats, feats, spec, weights)
>>> out, lse = rbf_attention(*args, interpret=True)
>>> d_out = jnp.ones_like(out)
>>> delta = jnp.einsum("bqhd,bqhd->bhq", d_out, out)
>>> dq, dk, dv, (da, db) = rbf_attention_bwd(*args, d_out, lse, delta, interpret=True)
>>> dq.shape, da.shape
((1, 20, 2, 8), (2, 5))
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from xnp.nn.bias import RBFSpec
from xnp.nn.pallas_attention import (
    Static,
    biased_scores,
    compiler_params,
    distances,
    dot,
    feature_specs,
    load_feats,
    prepare,
    rbf_terms,
    term_columns,
    weight_spec,
)

__all__ = ["rbf_attention_bwd"]


def _split(refs: tuple, st: Static) -> tuple:
    """``(q, k, v, mask, feats, weights, d_out, lse, delta, outputs)`` of a kernel's refs."""
    n = 4 + st.n_feats
    return (*refs[:4], refs[4:n], *refs[n : n + 4], refs[n + 4 :])


def _dkdv_kernel(*refs, st: Static, n_q_blocks: int):
    """One block of keys: ``dK`` and ``dV``, looping over the query blocks."""
    q_ref, k_ref, v_ref, mask_ref, feat_refs, w_ref, do_ref, lse_ref, delta_ref, outs = _split(
        refs, st
    )
    dk_ref, dv_ref = outs
    bq = st.block_q
    keep = mask_ref[...] > 0
    fk = load_feats(feat_refs, st, 1, slice(None))
    terms = [rbf_terms(st, w_ref, h) for h in range(st.heads)]

    def body(i, carry):
        rows = pl.ds(pl.multiple_of(i * bq, bq), bq)
        z = distances(st, load_feats(feat_refs, st, 0, rows), fk)
        new = []
        for h in range(st.heads):
            dk, dv = carry[h]
            q_h, do_h = q_ref[rows, h, :], do_ref[rows, h, :]
            s = biased_scores(st, q_h, k_ref[:, h, :], z, terms[h], keep)
            p = jnp.exp(s - lse_ref[h, rows][:, None])  # 0 for masked keys, empty rows
            dv = dv + dot(p.astype(do_h.dtype), do_h, st, (0, 0))
            dp = dot(do_h, v_ref[:, h, :], st, (1, 1))
            ds = p * (dp - delta_ref[h, rows][:, None])
            dk = dk + dot(ds.astype(q_h.dtype), q_h, st, (0, 0))
            new.append((dk, dv))
        return tuple(new)

    init = tuple(
        (
            jnp.zeros((st.block_k, dk_ref.shape[-1]), jnp.float32),
            jnp.zeros((st.block_k, dv_ref.shape[-1]), jnp.float32),
        )
        for _ in range(st.heads)
    )
    grads = jax.lax.fori_loop(0, n_q_blocks, body, init)
    for h, (dk, dv) in enumerate(grads):
        dk_ref[:, h, :] = dk * st.scale
        dv_ref[:, h, :] = dv


def _dq_kernel(*refs, st: Static, n_k_blocks: int):
    """One block of queries: ``dQ`` and the weights' row sums, looping over the key blocks."""
    q_ref, k_ref, v_ref, mask_ref, feat_refs, w_ref, do_ref, lse_ref, delta_ref, outs = _split(
        refs, st
    )
    dq_ref = outs[0]
    bk = st.block_k
    fq = load_feats(feat_refs, st, 0, slice(None))
    terms = [rbf_terms(st, w_ref, h) for h in range(st.heads)]
    n_terms = st.n_space + st.n_time

    def body(j, carry):
        rows = pl.ds(pl.multiple_of(j * bk, bk), bk)
        keep = mask_ref[rows] > 0
        z = distances(st, fq, load_feats(feat_refs, st, 1, rows))
        new = []
        for h in range(st.heads):
            dq, g_e, g_ez = carry[h]
            k_h = k_ref[rows, h, :]
            s = biased_scores(st, q_ref[:, h, :], k_h, z, terms[h], keep)
            p = jnp.exp(s - lse_ref[h, :][:, None])
            do_h = do_ref[:, h, :]
            dp = dot(do_h, v_ref[rows, h, :], st, (1, 1))
            ds = p * (dp - delta_ref[h, :][:, None])
            dq = dq + dot(ds.astype(k_h.dtype), k_h, st, (1, 0))
            g_e, g_ez = list(g_e), list(g_ez)
            for t, (_, nb, which) in enumerate(terms[h]):
                dse = ds * jnp.exp(nb * z[which])  # recomputed: one tile live at a time
                g_e[t] = g_e[t] + jnp.sum(dse, axis=1)
                g_ez[t] = g_ez[t] + jnp.sum(dse * z[which], axis=1)
            new.append((dq, tuple(g_e), tuple(g_ez)))
        return tuple(new)

    bq = st.block_q
    zeros = lambda *shape: jnp.zeros(shape, jnp.float32)  # noqa: E731
    init = tuple(
        (
            zeros(bq, dq_ref.shape[-1]),
            tuple(zeros(bq) for _ in range(n_terms)),
            tuple(zeros(bq) for _ in range(n_terms)),
        )
        for _ in range(st.heads)
    )
    grads = jax.lax.fori_loop(0, n_k_blocks, body, init)
    for h, (dq, g_e, g_ez) in enumerate(grads):
        dq_ref[:, h, :] = dq * st.scale
        for (col_a, col_b, _), ge, gez in zip(term_columns(st), g_e, g_ez, strict=True):
            outs[1][h, col_a, :] = ge  # beside a: Σ dS e
            outs[1][h, col_b, :] = gez  # beside -b: Σ dS e z


def rbf_attention_bwd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array,
    q_feats: Any,
    k_feats: Any,
    spec: RBFSpec,
    weights: Any,
    d_out: jax.Array,
    lse: jax.Array,
    delta: jax.Array,
    *,
    block_q: int = 64,
    block_k: int = 64,
    heads_per_block: int | None = None,
    num_warps: int = 4,
    num_stages: int = 2,
    interpret: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array, list[jax.Array]]:
    """Cotangents of :func:`~xnp.nn.pallas_attention.rbf_attention`'s output, in Pallas.

    What :func:`xnp.nn.native.rbf_attention_bwd` computes on the CPU.

    Parameters
    ----------
    q, k, v, mask, q_feats, k_feats, spec, weights
        As for :func:`~xnp.nn.pallas_attention.rbf_attention`.
    d_out : array, shape ``[B, Nq, H, Dv]``
        Cotangent of the output.
    lse : float32 array, shape ``[B, H, Nq]``
        The forward's log-sum-exp (+inf for a query with no valid key).
    delta : array, shape ``[B, H, Nq]``
        ``Σ_d d_out · out`` per query and head.
    block_q, block_k, heads_per_block, num_warps, num_stages, interpret
        As for :func:`~xnp.nn.pallas_attention.rbf_attention`; both kernels use
        the same blocks.

    Returns
    -------
    dq, dk, dv : float32 arrays
        Cotangents of ``q``, ``k`` and ``v`` (shapes of the inputs).
    dweights : list of float32 arrays
        Cotangents of each array of ``weights``.  The features get none.
    """
    b, nq, h, d = q.shape
    nk, dv_dim = k.shape[1], v.shape[-1]
    x = prepare(
        q, k, v, mask, q_feats, k_feats, spec, weights,
        block_q=block_q, block_k=block_k, heads=heads_per_block,
    )  # fmt: skip
    st = x.static
    nqp, nkp = x.q.shape[1], x.k.shape[1]
    dp, dvp, hg = x.q.shape[-1], x.v.shape[-1], st.heads
    d_out_p = jnp.pad(d_out.astype(x.v.dtype), [(0, 0), (0, nqp - nq), (0, 0), (0, dvp - dv_dim)])
    lse_p = jnp.pad(
        lse.astype(jnp.float32), [(0, 0), (0, 0), (0, nqp - nq)], constant_values=jnp.inf
    )
    delta_p = jnp.pad(delta.astype(jnp.float32), [(0, 0), (0, 0), (0, nqp - nq)])
    operands = (x.q, x.k, x.v, x.mask, *x.feats, x.weights, d_out_p, lse_p, delta_p)
    grid_groups = (b, h // hg)
    call = functools.partial(
        pl.pallas_call,
        compiler_params=compiler_params(num_warps, num_stages),
        interpret=interpret,
    )

    def whole(n, width):
        return pl.BlockSpec((None, n, hg, width), lambda i, b, g: (b, 0, g, 0))

    def block(n, width):
        return pl.BlockSpec((None, n, hg, width), lambda i, b, g: (b, i, g, 0))

    rows_whole = pl.BlockSpec((None, hg, nqp), lambda i, b, g: (b, g, 0))
    rows_block = pl.BlockSpec((None, hg, st.block_q), lambda i, b, g: (b, g, i))

    # dK, dV: programs over key blocks
    dk, dv = call(
        functools.partial(_dkdv_kernel, st=st, n_q_blocks=nqp // st.block_q),
        out_shape=(
            jax.ShapeDtypeStruct(x.k.shape, jnp.float32),
            jax.ShapeDtypeStruct(x.v.shape, jnp.float32),
        ),
        grid=(nkp // st.block_k, *grid_groups),
        in_specs=[
            whole(nqp, dp),
            block(st.block_k, dp),
            block(st.block_k, dvp),
            pl.BlockSpec((None, st.block_k), lambda i, b, g: (b, i)),
            *feature_specs(st, "k", nqp, nkp),
            weight_spec(x),
            whole(nqp, dvp),
            rows_whole,
            rows_whole,
        ],
        out_specs=(block(st.block_k, dp), block(st.block_k, dvp)),
        name="xnp_rbf_attention_dkdv",
    )(*operands)

    # dQ and the weights' row sums: programs over query blocks
    n_cols = x.weights.shape[1]
    has_terms = st.n_space + st.n_time > 0
    out_shape = [jax.ShapeDtypeStruct(x.q.shape, jnp.float32)]
    out_specs = [block(st.block_q, dp)]
    if has_terms:
        out_shape.append(jax.ShapeDtypeStruct((b, h, n_cols, nqp), jnp.float32))
        out_specs.append(
            pl.BlockSpec((None, hg, n_cols, st.block_q), lambda i, b, g: (b, g, 0, i))
        )
    outs = call(
        functools.partial(_dq_kernel, st=st, n_k_blocks=nkp // st.block_k),
        out_shape=tuple(out_shape),
        grid=(nqp // st.block_q, *grid_groups),
        in_specs=[
            block(st.block_q, dp),
            whole(nkp, dp),
            whole(nkp, dvp),
            pl.BlockSpec((None, nkp), lambda i, b, g: (b, 0)),
            *feature_specs(st, "q", nqp, nkp),
            weight_spec(x),
            block(st.block_q, dvp),
            rows_block,
            rows_block,
        ],
        out_specs=tuple(out_specs),
        name="xnp_rbf_attention_dq",
    )(*operands)
    dq = outs[0]
    dweights = []
    if has_terms:
        sums = jnp.sum(outs[1], axis=(0, 3))  # [H, columns]
        cols = term_columns(st)
        for part in (cols[: st.n_space], cols[st.n_space :]):
            if part:
                col_a, col_b = [c[0] for c in part], [c[1] for c in part]
                da, sum_ez = sums[:, col_a], sums[:, col_b]
                dweights += [da, -x.weights[:, col_a] * sum_ez]  # db = -a Σ dS e z
    return (
        dq[:, :nq, :, :d],
        dk[:, :nk, :, :d],
        dv[:, :nk, :, :dv_dim],
        dweights,
    )

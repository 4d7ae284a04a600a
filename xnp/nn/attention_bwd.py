"""The backward pass of Biased Scan Attention, in the FlashAttention-2 form.

The forward keeps only the output and the per-row log-sum-exp; :func:`bsa_backward`
recomputes each score tile, so the backward needs ``O(q_chunk · k_chunk)``
temporary memory per head.  Gradients flow to ``q``, ``k``, ``v``, to the
floating-point leaves of the query and key features, and to every array the bias
function closes over.  On the CPU, with an RBF bias and float32 inputs, one
native kernel does the same (:func:`xnp.nn.native.rbf_attention_bwd`), and on an
NVIDIA GPU, with float32 or bfloat16 inputs, two Pallas kernels
(:func:`xnp.nn.pallas_attention_bwd.rbf_attention_bwd`); the tiled JAX loops here
are their reference and the path on every other platform.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from xnp.nn import native
from xnp.nn.dispatch import by_platform, on_cuda
from xnp.nn.tiles import (
    fused_spec,
    loop,
    over_batch_tiles,
    scores,
    slice_tile,
    slice_tree,
    update_tile,
)

__all__ = ["bsa_backward", "pallas_spec"]


def _is_float(x: Any) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


class _GradLeaves:
    """The leaves of a pytree that need a cotangent: floating point and perturbed."""

    def __init__(self, tree: Any, perturbed: Any = None):
        leaves, self.treedef = jax.tree.flatten(tree)
        flags = [True] * len(leaves) if perturbed is None else jax.tree.leaves(perturbed)
        self.wanted = [_is_float(x) and bool(p) for x, p in zip(leaves, flags, strict=True)]

    def floats(self, tree: Any) -> list[jax.Array]:
        return [x for x, w in zip(jax.tree.leaves(tree), self.wanted, strict=True) if w]

    def rebuild(self, tree: Any, floats: list[jax.Array]) -> Any:
        it = iter(floats)
        leaves = [
            next(it) if w else x for x, w in zip(jax.tree.leaves(tree), self.wanted, strict=True)
        ]
        return jax.tree.unflatten(self.treedef, leaves)

    def cotangent(self, tree: Any, cts: list[jax.Array]) -> Any:
        """Full cotangent tree: ``cts`` for wanted leaves, None (zero) elsewhere."""
        it = iter(cts)
        leaves = [
            next(it).astype(x.dtype) if w else None
            for x, w in zip(jax.tree.leaves(tree), self.wanted, strict=True)
        ]
        return jax.tree.unflatten(self.treedef, leaves)


def bsa_backward(fns, tiles, res, cotangents):
    """The custom VJP's backward rule: cotangents of every input of the attention.

    ``res`` is what the forward saved (inputs, which leaves need a cotangent, the
    output and the log-sum-exp); ``cotangents`` those of the output and of the
    log-sum-exp.  Returns the cotangents in the order of the attention's
    differentiable arguments.

    The log-sum-exp's cotangent needs no kernel of its own: with
    ``dS_ij = P_ij (dP_ij - delta_i)`` for the output and ``dS_ij = P_ij dlse_i``
    for the log-sum-exp, both are the usual backward pass with ``delta - dlse``.
    """
    (q, k, v, qf, kf, mask, consts, _), needed, out, lse = res
    d_out, d_lse = cotangents
    if isinstance(d_out, SymbolicZero):
        d_out = jnp.zeros(d_out.shape, d_out.dtype)
    # delta_i = Σ_d dO·O, laid out [B, H, Nq] like lse
    delta = jnp.einsum("bqhd,bqhd->bhq", d_out, out, preferred_element_type=jnp.float32)
    if not isinstance(d_lse, SymbolicZero):  # (a query without keys has lse = inf)
        delta = delta - jnp.where(jnp.isfinite(lse), d_lse.astype(jnp.float32), 0.0)
    splits = tuple(
        _GradLeaves(tree, _flags(tree, need))
        for tree, need in ((qf, needed[3]), (kf, needed[4]), (consts, needed[6]))
    )
    qf_split, kf_split, c_split = splits
    data = (q, k, v, qf, kf, mask, d_out, lse, delta)
    spec = fused_spec(fns, q, k, v, d_out)
    gpu_spec = pallas_spec(fns, q, k, v, d_out)
    branches = {}
    if not qf_split.floats(qf) and not kf_split.floats(kf):
        # no cotangent for the features: one native kernel on the CPU, Pallas on a GPU
        if spec is not None:

            def cpu(consts, *data):
                q, k, v, qf, kf, mask, d_out, lse, delta = data
                dq, dk, dv, dw = native.rbf_attention_bwd(
                    q, k, v, mask, qf, kf, spec, consts, d_out, lse, delta
                )
                # float32, as the tiled backward's accumulators (the branches must match)
                return dq, dk, dv, [], [], [g.astype(jnp.float32) for g in c_split.floats(dw)]

            branches["cpu"] = cpu
        if gpu_spec is not None:

            def cuda(consts, *data):
                from xnp.nn import pallas_attention_bwd  # only where a GPU may use it

                q, k, v, qf, kf, mask, d_out, lse, delta = data
                dq, dk, dv, dw = pallas_attention_bwd.rbf_attention_bwd(
                    q, k, v, mask, qf, kf, gpu_spec, consts, d_out, lse, delta
                )
                # dtypes of the tiled backward's (the branches must match)
                return dq.astype(q.dtype), dk, dv, [], [], c_split.floats(dw)

            branches["cuda"] = cuda
    if branches:
        grads = by_platform(
            consts,
            *data,
            **branches,
            default=lambda consts, *data: _backward_xla(fns, tiles, splits, consts, data),
        )
    else:
        grads = _backward_xla(fns, tiles, splits, consts, data)
    dq, dk, dv, dqf, dkf, dc = grads
    return (
        dq.astype(q.dtype),
        dk.astype(k.dtype),
        dv.astype(v.dtype),
        qf_split.cotangent(qf, dqf),
        kf_split.cotangent(kf, dkf),
        None,
        c_split.cotangent(consts, dc),
        None,  # the output does not depend on the shift bound (softmax shift invariance)
    )


def pallas_spec(fns, *arrays):
    """The :class:`~xnp.nn.bias.RBFSpec` when the Pallas GPU kernels can run, else None.

    They need an RBF bias (``fns[2]``), float32 or bfloat16 ``arrays`` of one
    dtype, an NVIDIA GPU in this process and ``XNP_PALLAS`` other than ``0``
    (:func:`xnp.nn.pallas_attention.enabled`).  Without a GPU, Pallas is never
    imported and the dispatch is what it was without these kernels.
    """
    spec = fns[2] if len(fns) > 2 else None
    dtypes = {x.dtype for x in arrays}
    if spec is None or len(dtypes) != 1 or dtypes.pop() not in (jnp.float32, jnp.bfloat16):
        return None
    if not on_cuda():
        return None
    from xnp.nn import pallas_attention  # Pallas is imported only where a GPU may use it

    return spec if pallas_attention.enabled() else None


def _backward_xla(fns, tiles, splits, consts, data):
    """:func:`bsa_backward` as tiled JAX loops: ``(dq, dk, dv, dqf, dkf, dc)``.

    ``dqf``, ``dkf`` and ``dc`` are lists of the cotangents of the leaves that
    need one (see :class:`_GradLeaves`).
    """
    q, k, v, qf, kf = data[:5]
    qf_split, kf_split, c_split = splits
    zeros_f32 = partial(jax.tree.map, lambda x: jnp.zeros(x.shape, jnp.float32))
    dc0 = zeros_f32(c_split.floats(consts))
    # one batch tile at a time, as in the forward; the cotangents of q, k, v and the
    # features are per batch element, those of the bias weights accumulate
    grads, dc = over_batch_tiles(
        lambda data, dc: _backward_tiles(fns[1], tiles, splits, consts, data, dc),
        data,
        lambda: _zero_cotangents(q, k, v, qf_split.floats(qf), kf_split.floats(kf)),
        dc0,
        tiles[3],
    )
    return (*grads, dc)


def _zero_cotangents(q, k, v, qf_floats, kf_floats):
    """Zero accumulators ``(dq, dk, dv, dqf, dkf)``; key-side sums are kept in float32."""
    return (
        jnp.zeros(q.shape, q.dtype),
        jnp.zeros(k.shape, jnp.float32),
        jnp.zeros(v.shape, jnp.float32),
        [jnp.zeros_like(a) for a in qf_floats],
        [jnp.zeros(a.shape, jnp.float32) for a in kf_floats],
    )


def _backward_tiles(fn, tiles, splits, consts, data, dc):
    """FlashAttention-2 backward for one batch tile, recomputing each score tile.

    Returns the cotangents ``(dq, dk, dv, dqf, dkf)`` of the tile's inputs and the
    bias weights' cotangent ``dc`` with this tile's contribution added.
    """
    q, k, v, qf, kf, mask, d_out, lse, delta = data
    qf_split, kf_split, c_split = splits
    qc, kc = tiles[1], tiles[4]
    b, nq, h, d = q.shape
    scale = jnp.asarray(d**-0.5, q.dtype)
    zeros_f32 = partial(jax.tree.map, lambda x: jnp.zeros(x.shape, jnp.float32))

    def bias_and_vjp(qf_i, kf_j):
        """Bias tile and a function mapping its cotangent to float-leaf cotangents."""

        def f(c_fl, qf_fl, kf_fl):
            c = c_split.rebuild(consts, c_fl)
            return fn(qf_split.rebuild(qf_i, qf_fl), kf_split.rebuild(kf_j, kf_fl), *c)

        return jax.vjp(f, c_split.floats(consts), qf_split.floats(qf_i), kf_split.floats(kf_j))

    def q_step(carry, i):
        dq, dk, dv, dqf, dkf, dc = carry
        qs_i = slice_tile(q, i, qc) * scale
        qf_i = slice_tree(qf, i, qc)
        do_i = slice_tile(d_out, i, qc)
        lse_i = jax.lax.dynamic_slice_in_dim(lse, i * qc, qc, axis=2)
        delta_i = jax.lax.dynamic_slice_in_dim(delta, i * qc, qc, axis=2)

        def k_step(carry2, j):
            dq_i, dqf_i, dk, dv, dkf, dc = carry2
            k_j, v_j, kf_j = slice_tile(k, j, kc), slice_tile(v, j, kc), slice_tree(kf, j, kc)
            bias, vjp = (None, None) if fn is None else bias_and_vjp(qf_i, kf_j)
            s = scores(qs_i, k_j, slice_tile(mask, j, kc), bias)
            p = jnp.exp(s - lse_i[..., None])
            dp = jnp.einsum("bqhd,bkhd->bhqk", do_i, v_j, preferred_element_type=jnp.float32)
            ds = p * (dp - delta_i[..., None])
            dv_j = jnp.einsum("bhqk,bqhd->bkhd", p, do_i, preferred_element_type=jnp.float32)
            dk_j = jnp.einsum("bhqk,bqhd->bkhd", ds, qs_i, preferred_element_type=jnp.float32)
            dq_i = dq_i + jnp.einsum(
                "bhqk,bkhd->bqhd", ds, k_j, preferred_element_type=jnp.float32
            )
            dk = update_tile(dk, slice_tile(dk, j, kc) + dk_j, j, kc)
            dv = update_tile(dv, slice_tile(dv, j, kc) + dv_j, j, kc)
            if vjp is not None:
                dc_t, dqf_t, dkf_t = vjp(ds.astype(bias.dtype))
                dc = jax.tree.map(jnp.add, dc, dc_t)
                dqf_i = jax.tree.map(jnp.add, dqf_i, dqf_t)
                dkf = [
                    update_tile(a, slice_tile(a, j, kc) + t, j, kc)
                    for a, t in zip(dkf, dkf_t, strict=True)
                ]
            return (dq_i, dqf_i, dk, dv, dkf, dc), None

        init = (
            jnp.zeros((b, qc, h, d), jnp.float32),
            zeros_f32(qf_split.floats(qf_i)),
            dk,
            dv,
            dkf,
            dc,
        )
        dq_i, dqf_i, dk, dv, dkf, dc = loop(k_step, init, k.shape[1] // kc)
        dq = update_tile(dq, dq_i * scale, i, qc)
        dqf = [update_tile(a, t, i, qc) for a, t in zip(dqf, dqf_i, strict=True)]
        return (dq, dk, dv, dqf, dkf, dc), None

    init = (*_zero_cotangents(q, k, v, qf_split.floats(qf), kf_split.floats(kf)), dc)
    dq, dk, dv, dqf, dkf, dc = loop(q_step, init, nq // qc)
    return (dq, dk, dv, dqf, dkf), dc


def _flags(tree: Any, needed: Any) -> list[bool]:
    """Per-leaf "needs a cotangent" flags of ``tree`` from the fwd's ``needed`` structure."""
    n = len(jax.tree.leaves(tree))
    marks = jax.tree.leaves(needed, is_leaf=lambda x: x is None or x == ())
    return [m == () for m in marks] if len(marks) == n else [True] * n

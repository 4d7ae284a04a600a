"""Biased Scan Attention (BSA) and its dense reference.

:func:`biased_scan_attention` computes ``softmax(q kᵀ / √D + bias) v`` without ever
holding the ``[Nq, Nk]`` score or bias matrix.  It tiles queries and keys, runs an
online softmax (running max ``m``, running sum ``l``, rescaled output ``o``, as in
FlashAttention-2) with :func:`jax.lax.scan`, and evaluates the bias tile by tile
from per-point features (coordinates, times) through a user-supplied JAX function.

The backward pass is a custom VJP in the FlashAttention-2 form: the forward keeps
only the output and the per-row log-sum-exp, and the backward recomputes each
score tile, so forward *and* backward need ``O(q_chunk · k_chunk)`` temporary
memory per head instead of ``O(Nq · Nk)``.  Gradients flow to ``q``, ``k``, ``v``,
to the floating-point leaves of ``q_feats``/``k_feats``, and to every array the
bias function closes over (its learnable parameters).

:func:`dense_attention` has the same signature and computes the same thing the
plain way; it is the reference every test compares against.  The tiles are
walked by :mod:`xnp.nn.tiles`; the backward pass is :mod:`xnp.nn.attention_bwd`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import CustomVJPPrimal

from xnp.errors import ConfigError, ShapeError
from xnp.nn import native
from xnp.nn.attention_bwd import bsa_backward, pallas_spec
from xnp.nn.dispatch import by_platform
from xnp.nn.tiles import (
    NEG_INF,
    fused_spec,
    loop,
    over_batch_tiles,
    scores,
    slice_tile,
    slice_tree,
    update_tile,
)

__all__ = ["BiasFn", "biased_scan_attention", "dense_attention"]


#: ``bias_fn(q_feats_tile, k_feats_tile) -> [B, H, q_tile, k_tile]``.
BiasFn = Callable[[Any, Any], jax.Array]


def _check_inputs(q, k, v, q_feats, k_feats, k_mask, bias_fn) -> None:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ShapeError(
            "q, k and v must have shape [B, N, H, D]; got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}."
        )
    b, _, h, d = q.shape
    if k.shape[0] != b or k.shape[2:] != (h, d):
        raise ShapeError(
            f"k must have shape [B={b}, Nk, H={h}, D={d}] to match q; got {tuple(k.shape)}."
        )
    if v.shape[:3] != k.shape[:3]:
        raise ShapeError(
            f"v must have shape [B, Nk, H, Dv] = {tuple(k.shape[:3])} + (Dv,); "
            f"got {tuple(v.shape)}."
        )
    if k_mask is not None and tuple(k_mask.shape) != tuple(k.shape[:2]):
        raise ShapeError(
            f"k_mask must have shape [B, Nk] = {tuple(k.shape[:2])}; got {tuple(k_mask.shape)}."
        )
    for name, feats, n in (("q_feats", q_feats, q.shape[1]), ("k_feats", k_feats, k.shape[1])):
        for leaf in jax.tree.leaves(feats):
            if leaf.ndim < 2 or leaf.shape[:2] != (b, n):
                raise ShapeError(
                    f"every leaf of {name} must have leading dims [B, N] = [{b}, {n}]; "
                    f"got a leaf of shape {tuple(leaf.shape)}."
                )
    if bias_fn is None and (q_feats is not None or k_feats is not None):
        raise ConfigError("q_feats/k_feats were given without a bias_fn to use them.")


def _chunk_size(n: int, chunk: int) -> int:
    """Tile length for ``n`` points: at most ``chunk``, with as little padding as possible."""
    if chunk <= 0:
        raise ConfigError(f"chunk sizes must be positive; got {chunk}.")
    if n <= chunk:
        return n
    n_tiles = math.ceil(n / chunk)
    size = math.ceil(n / n_tiles)
    return min(chunk, -(-size // 8) * 8)  # multiple of 8 keeps vector lanes full


#: Bytes of one float32 score tile ``[b_tile, H, q_tile, k_tile]`` the batch tile aims at.
_TILE_BYTES = 4 << 20


def _batch_tile(b: int, tile_elems: int, b_chunk: int | None) -> int:
    """Batch elements per tile: ``b_chunk``, or the most whose scores fit ``_TILE_BYTES``."""
    if b_chunk is not None:
        if b_chunk <= 0 or b % b_chunk:
            raise ConfigError(
                f"b_chunk must be a positive divisor of the batch size {b}; got {b_chunk}."
            )
        return b_chunk
    most = max(1, _TILE_BYTES // (4 * tile_elems))
    return max(n for n in range(1, min(b, most) + 1) if b % n == 0)


def _pad_points(x: jax.Array, n: int) -> jax.Array:
    """Zero-pad axis 1 (the point axis) of ``x`` to length ``n``."""
    extra = n - x.shape[1]
    if not extra:
        return x
    return jnp.pad(x, [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2))


def _forward(fns, tiles, q, k, v, qf, kf, mask, consts, bound):
    """Online-softmax forward; returns the output ``[B, Nq, H, Dv]`` and lse ``[B, H, Nq]``.

    Batch tiles of ``tiles[0]`` elements run one after another, so that a score tile
    ``[b_tile, H, q_tile, k_tile]`` stays in the CPU's caches through the chain of
    operations on it (writing it to memory and back costs more than the arithmetic).
    With an RBF bias (``fns[2]``, an :class:`~xnp.nn.bias.RBFSpec`) and float32
    inputs on the CPU, one native kernel computes the same
    (:func:`xnp.nn.native.rbf_attention`); with float32 or bfloat16 inputs on an
    NVIDIA GPU, one Pallas kernel (:func:`xnp.nn.pallas_attention.rbf_attention`).
    """
    spec = fused_spec(fns, q, k, v)
    gpu_spec = pallas_spec(fns, q, k, v)
    if spec is None and gpu_spec is None:
        return _forward_xla(fns, tiles, q, k, v, qf, kf, mask, consts, bound)

    def cpu(q, k, v, qf, kf, mask, consts):
        return native.rbf_attention(q, k, v, mask, qf, kf, spec, consts)

    def cuda(q, k, v, qf, kf, mask, consts):
        from xnp.nn import pallas_attention  # imported only where a GPU may use it

        return pallas_attention.rbf_attention(q, k, v, mask, qf, kf, gpu_spec, consts)

    branches = {"cpu": cpu} if spec is not None else {}
    if gpu_spec is not None:
        branches["cuda"] = cuda
    args = (q, k, v, qf, kf, mask, consts)
    return by_platform(*args, **branches, default=lambda *a: _forward_xla(fns, tiles, *a, bound))


def _forward_xla(fns, tiles, q, k, v, qf, kf, mask, consts, bound):
    """:func:`_forward` as tiled JAX loops (any bias function, any platform)."""
    b, nq, h, _ = q.shape

    def step(data, acc):
        return _forward_tiles(fns, tiles, *data, consts, bound), acc

    def zeros():
        return jnp.zeros((b, nq, h, v.shape[-1]), v.dtype), jnp.zeros((b, h, nq), jnp.float32)

    return over_batch_tiles(step, (q, k, v, qf, kf, mask), zeros, None, tiles[0])[0]


def _forward_tiles(fns, tiles, q, k, v, qf, kf, mask, consts, bound):
    """:func:`_forward` for one batch tile: loops over query and key tiles."""
    qc, kc = tiles[1:3]
    fn = fns[0]
    b, nq, h, d = q.shape
    dv = v.shape[-1]
    scale = jnp.asarray(d**-0.5, q.dtype)

    def q_step(carry, i):
        out, lse = carry
        q_i = slice_tile(q, i, qc) * scale
        qf_i = slice_tree(qf, i, qc)

        def k_step(stats, j):
            m, den, o = stats
            bias = None if fn is None else fn(qf_i, slice_tree(kf, j, kc), *consts)
            if bound is None or bias is None:
                s = scores(q_i, slice_tile(k, j, kc), slice_tile(mask, j, kc), bias)
                m_new = jnp.maximum(m, jnp.max(s, axis=-1))
            else:
                # Shift by rowmax(q·k) + an upper bound of the bias instead of the row
                # max of q·k + bias: softmax is shift-invariant, so this is exact, and
                # the bias never has to be materialised before the exponential.
                s = scores(q_i, slice_tile(k, j, kc), slice_tile(mask, j, kc), None)
                m_new = jnp.maximum(m, jnp.max(s, axis=-1) + bound[None, :, None])
                s = s + bias.astype(jnp.float32)
            m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)  # rows with no key yet
            p = jnp.exp(s - m_safe[..., None])
            corr = jnp.exp(m - m_safe)
            den = corr * den + jnp.sum(p, axis=-1)
            v_j = slice_tile(v, j, kc)
            pv = jnp.einsum(
                "bhqk,bkhd->bhqd", p.astype(v.dtype), v_j, preferred_element_type=jnp.float32
            )
            return (m_new, den, corr[..., None] * o + pv), None

        init = (
            jnp.full((b, h, qc), NEG_INF, jnp.float32),
            jnp.zeros((b, h, qc), jnp.float32),
            jnp.zeros((b, h, qc, dv), jnp.float32),
        )
        m, den, o = loop(k_step, init, k.shape[1] // kc)
        valid = den > 0
        l_safe = jnp.where(valid, den, 1.0)
        o = jnp.where(valid[..., None], o / l_safe[..., None], 0.0)
        lse_i = jnp.where(valid, m + jnp.log(l_safe), jnp.inf)
        out = update_tile(out, jnp.swapaxes(o, 1, 2), i, qc)
        lse = jax.lax.dynamic_update_slice_in_dim(lse, lse_i, i * qc, axis=2)
        return (out, lse), None

    init = (jnp.zeros((b, nq, h, dv), v.dtype), jnp.zeros((b, h, nq), jnp.float32))
    out, lse = loop(q_step, init, nq // qc)
    return out, lse


@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _bsa(fns, tiles, q, k, v, qf, kf, mask, consts, bound):
    return _forward(fns, tiles, q, k, v, qf, kf, mask, consts, bound)


def _bsa_fwd(fns, tiles, *args):
    # symbolic_zeros: each input leaf arrives as CustomVJPPrimal(value, perturbed)
    is_primal = lambda x: isinstance(x, CustomVJPPrimal)  # noqa: E731
    values = jax.tree.map(lambda p: p.value, args, is_leaf=is_primal)
    # which leaves need a cotangent, kept as pytree *structure* (None = not needed)
    needed = jax.tree.map(lambda p: () if p.perturbed else None, args, is_leaf=is_primal)
    out, lse = _forward(fns, tiles, *values)
    return (out, lse), (values, needed, out, lse)


_bsa.defvjp(_bsa_fwd, bsa_backward, symbolic_zeros=True)


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` under numpy's rules."""
    if len(shape) > len(target):
        return False
    return all(a in (1, b) for a, b in zip(shape[::-1], target[::-1], strict=False))


def _broadcast_to(fn: Callable, shape: tuple[int, ...]) -> Callable:
    """``fn`` with its output broadcast to ``shape`` (e.g. one bias for every head)."""

    def broadcast(*args: Any) -> jax.Array:
        return jnp.broadcast_to(fn(*args), shape)

    return broadcast


def _convert_bias(bias_fn, qf, kf, h, qc, shapes):
    """Closure-convert ``bias_fn`` for tiles ``(bc, qc, kc)`` for each ``(bc, kc)`` in ``shapes``.

    Returns the converted functions and the closed-over arrays they take as extra
    arguments (those receive gradients).  If the arrays differ between tile
    shapes, the second function is None and the caller uses the first shape only.
    """
    fns, consts = [], None
    for bc, kc in shapes:
        example = (
            jax.tree.map(lambda a, bc=bc: a[:bc, :qc], qf),
            jax.tree.map(lambda a, bc=bc, kc=kc: a[:bc, :kc], kf),
        )
        expected = (bc, h, qc, kc)
        try:
            fn, found = jax.closure_convert(bias_fn, *example)
            got = jax.eval_shape(fn, *example, *found).shape
        except (TypeError, ValueError) as err:  # e.g. a closed-over array's batch axis
            raise ShapeError(
                f"bias_fn failed on tiles of {bc} batch elements, {qc} queries and {kc} "
                f"keys: {err}  (Tiles are also taken along the batch axis: take the "
                "batch size from the features, and close over no array with a batch axis.)"
            ) from err
        if tuple(got) != expected:
            if not _broadcasts(tuple(got), expected):
                raise ShapeError(
                    f"bias_fn must return [b_tile, H, q_tile, k_tile] = {list(expected)} "
                    f"(or a shape that broadcasts to it, e.g. one head for all) for the "
                    f"tiles it is given; it returned shape {tuple(got)}.  (Tiles are also "
                    "taken along the batch axis: take the batch size from the features, "
                    "and close over no array with a batch axis.)"
                )
            fn = _broadcast_to(fn, expected)  # as numpy, and dense_attention, broadcast
        if consts is None:
            consts = found
        elif len(found) != len(consts) or any(
            a is not b for a, b in zip(found, consts, strict=True)
        ):
            fn = None
        fns.append(fn)
    return tuple(fns), consts


def biased_scan_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    bias_fn: BiasFn | None = None,
    q_feats: Any = None,
    k_feats: Any = None,
    k_mask: jax.Array | None = None,
    q_chunk: int = 512,
    k_chunk: int = 512,
    bias_bounds: tuple[jax.Array, jax.Array] | None = None,
    b_chunk: int | None = None,
    return_lse: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Memory-efficient multi-head attention with a bias computed tile by tile.

    Computes, for every batch element ``b``, head ``h`` and query ``i``::

        out[b, i, h] = Σ_j softmax_j(q[b,i,h]·k[b,j,h] / √D + bias[b,h,i,j]) v[b,j,h]

    over the keys with ``k_mask[b, j]`` True, where the bias tile is
    ``bias_fn(q_feats_tile, k_feats_tile)``.  The full ``[Nq, Nk]`` matrix is never
    formed, in the forward or the backward pass.

    Parameters
    ----------
    q : array, shape ``[B, Nq, H, D]``
        Queries.
    k : array, shape ``[B, Nk, H, D]``
        Keys.
    v : array, shape ``[B, Nk, H, Dv]``
        Values.
    bias_fn : callable, optional
        ``bias_fn(q_feats_tile, k_feats_tile) -> [B, H, q_tile, k_tile]``.  Any
        arrays it closes over (e.g. learnable bias parameters) receive gradients.
    q_feats, k_feats : pytree, optional
        Per-point features for the bias; every leaf has leading dims ``[B, Nq]``
        (resp. ``[B, Nk]``).  Tiles of them are passed to ``bias_fn``.
    k_mask : bool array, shape ``[B, Nk]``, optional
        True for real keys.  A query with no valid key gets a zero output.
    q_chunk, k_chunk : int
        Tile lengths.  Lengths that are not multiples are padded internally; the
        tile is shrunk when that reduces padding.  512 × 512 was the fastest on
        CPU (``recipes/benchmarks/attention.py``): 1.3–1.7× faster than 1024 × 1024
        forward and backward, whose score tiles spill out of the caches.
    bias_bounds : (array, array), optional
        Lower and upper bounds ``[H]`` of the values ``bias_fn`` can return (e.g.
        ``Σ_f min(a_f, 0)`` and ``Σ_f max(a_f, 0)`` for an RBF network).  With them
        the softmax is shifted by ``rowmax(q·k) + upper`` rather than by the row
        maximum of the biased scores, which is exact (softmax is shift-invariant)
        and lets the bias be evaluated inside the exponential's loop instead of in
        a pass of its own (≈2× less bias overhead on CPU).  Used only while
        ``upper - lower < 60`` for every head (beyond that the shift could
        underflow); otherwise the plain path runs.
    b_chunk : int, optional
        Batch elements per tile (a divisor of ``B``).  By default, as many as keep a
        float32 score tile ``[b_chunk, H, q_tile, k_tile]`` within 4 MiB (at least
        one), in the forward and, with its shorter key tiles, in the backward pass:
        then a tile stays in the CPU's caches through the operations on it.  For
        training batches on a CPU this makes attention ≈1.4× faster than tiles of
        the whole batch, whose round trips to memory cost more than the arithmetic.
        ``bias_fn`` then sees tiles of ``b_chunk`` batch elements; one that cannot
        (it closes over an array with a batch axis) runs on the whole batch by
        default, and raises :class:`ShapeError` with an explicit ``b_chunk``.
    return_lse : bool
        Also return the log-sum-exp of each query's biased scores over the valid
        keys, ``[B, H, Nq]`` float32 (``+inf`` for a query without valid keys), with
        its gradient: what merging this attention with further keys needs
        (:class:`xnp.nn.layers.MultiHeadAttention`'s prior key).

    Returns
    -------
    array, shape ``[B, Nq, H, Dv]``
        Same dtype as ``v``; softmax statistics are accumulated in float32.  With
        ``return_lse``, the pair ``(out, lse)``.

    Examples
    --------
    >>> import jax
    >>> q = k = v = jax.random.normal(jax.random.key(0), (1, 300, 2, 8))
    >>> out = biased_scan_attention(q, k, v, q_chunk=128, k_chunk=128)
    >>> bool(jnp.allclose(out, dense_attention(q, k, v), atol=1e-5))
    True
    """
    _check_inputs(q, k, v, q_feats, k_feats, k_mask, bias_fn)
    b, nq, _, _ = q.shape
    nk = k.shape[1]
    qc, kc = _chunk_size(nq, q_chunk), _chunk_size(nk, k_chunk)
    mask = jnp.ones((b, nk), bool) if k_mask is None else jnp.asarray(k_mask, bool)

    nq_pad, nk_pad = -(-nq // qc) * qc, -(-nk // kc) * kc
    q_p = _pad_points(q, nq_pad)
    k_p, v_p, mask_p = (_pad_points(a, nk_pad) for a in (k, v, mask))  # padding is masked
    qf_p = jax.tree.map(lambda a: _pad_points(a, nq_pad), q_feats)
    kf_p = jax.tree.map(lambda a: _pad_points(a, nk_pad), k_feats)

    # The backward keeps p, dp and ds live per tile where the forward keeps s and p;
    # it uses key tiles half as long so that its peak memory stays at the forward's
    # (and, by default, twice as many batch elements per tile).
    kc_bwd = kc // 2 if kc % 16 == 0 else kc
    h = q.shape[2]
    bc, bc_bwd = (_batch_tile(b, h * qc * n, b_chunk) for n in (kc, kc_bwd))
    native_rbf = getattr(bias_fn, "native_rbf", None)
    if bias_fn is None:
        fns, consts = (None, None), []
    elif native_rbf is not None:
        # an RBF bias (SpaceTimeBias.bind): a static spec and explicit weights, for
        # tiles of any batch size; on the CPU the forward pass is one native kernel
        spec, weights = native_rbf
        fns, consts = (spec.bias, spec.bias, spec), list(weights)
    else:
        try:
            fns, consts = _convert_bias(bias_fn, qf_p, kf_p, h, qc, ((bc, kc), (bc_bwd, kc_bwd)))
        except ShapeError:
            if b_chunk is not None or bc == bc_bwd == b:
                raise
            # a bias_fn that needs the whole batch (closes over batch-shaped arrays)
            # still works, without the batch tiles' speed
            bc = bc_bwd = b
            fns, consts = _convert_bias(bias_fn, qf_p, kf_p, h, qc, ((bc, kc), (bc, kc_bwd)))
        if fns[1] is None:
            fns, bc_bwd, kc_bwd = (fns[0], fns[0]), bc, kc
    tiles = (bc, qc, kc, bc_bwd, kc_bwd)
    args = (q_p, k_p, v_p, qf_p, kf_p, mask_p, list(consts))
    if bias_fn is None or bias_bounds is None:
        out, lse = _bsa(fns, tiles, *args, None)
    else:
        lower, upper = (jax.lax.stop_gradient(jnp.asarray(x, jnp.float32)) for x in bias_bounds)
        if upper.shape != (q.shape[2],) or lower.shape != upper.shape:
            raise ShapeError(f"bias_bounds must be two arrays of shape [H] = [{q.shape[2]}].")
        out, lse = jax.lax.cond(
            jnp.all(upper - lower < 60.0),
            lambda: _bsa(fns, tiles, *args, upper),
            lambda: _bsa(fns, tiles, *args, None),
        )
    return (out[:, :nq], lse[:, :, :nq]) if return_lse else out[:, :nq]


def dense_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    bias_fn: BiasFn | None = None,
    q_feats: Any = None,
    k_feats: Any = None,
    k_mask: jax.Array | None = None,
    q_chunk: int | None = None,
    k_chunk: int | None = None,
    bias_bounds: tuple[jax.Array, jax.Array] | None = None,
    return_lse: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Plain multi-head attention with the signature of :func:`biased_scan_attention`.

    Materialises the full ``[B, H, Nq, Nk]`` score matrix (and calls ``bias_fn``
    once on all points); ``q_chunk``, ``k_chunk`` and ``bias_bounds`` are accepted
    and ignored.  It is the reference implementation for tests and small problems.

    Examples
    --------
    >>> import jax
    >>> q = k = v = jnp.ones((1, 4, 1, 2))
    >>> dense_attention(q, k, v).shape
    (1, 4, 1, 2)
    """
    del q_chunk, k_chunk, bias_bounds
    _check_inputs(q, k, v, q_feats, k_feats, k_mask, bias_fn)
    scale = q.shape[-1] ** -0.5
    s = jnp.einsum("bqhd,bkhd->bhqk", q * scale, k, preferred_element_type=jnp.float32)
    if bias_fn is not None:
        s = s + bias_fn(q_feats, k_feats).astype(jnp.float32)
    mask = jnp.ones(k.shape[:2], bool) if k_mask is None else jnp.asarray(k_mask, bool)
    s = jnp.where(mask[:, None, None, :], s, NEG_INF)
    any_key = jnp.any(mask, axis=-1)[:, None, None, None]
    p = jax.nn.softmax(jnp.where(any_key, s, 0.0), axis=-1)
    p = jnp.where(any_key, p, 0.0)
    out = jnp.einsum("bhqk,bkhd->bqhd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    if not return_lse:
        return out.astype(v.dtype)
    lse = jax.nn.logsumexp(jnp.where(any_key, s, 0.0), axis=-1)
    return out.astype(v.dtype), jnp.where(any_key[..., 0], lse, jnp.inf)

"""Tiles of Biased Scan Attention: slicing, loops over tiles, masked scores, kernel choice.

The forward (:mod:`xnp.nn.attention`) and the backward (:mod:`xnp.nn.attention_bwd`)
walk the same tiles: query and key tiles along the point axis (axis 1), batch
tiles along axis 0, with the scores of a tile masked and kept in float32.
:func:`fused_spec` decides, for both, whether the native CPU kernels can run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from xnp.nn import native

__all__ = [
    "NEG_INF",
    "fused_spec",
    "loop",
    "over_batch_tiles",
    "scores",
    "slice_tile",
    "slice_tree",
    "update_tile",
]


NEG_INF = -jnp.inf


def slice_tile(x: jax.Array, i: jax.Array, size: int) -> jax.Array:
    """Tile ``i`` of length ``size`` along axis 1."""
    return jax.lax.dynamic_slice_in_dim(x, i * size, size, axis=1)


def slice_tree(tree: Any, i: jax.Array, size: int) -> Any:
    """Tile ``i`` of length ``size`` along axis 1 of every leaf of ``tree``."""
    return jax.tree.map(lambda a: slice_tile(a, i, size), tree)


def update_tile(x: jax.Array, tile: jax.Array, i: jax.Array, size: int) -> jax.Array:
    """Write ``tile`` into tile ``i`` of ``x`` along axis 1 (in place under XLA)."""
    return jax.lax.dynamic_update_slice_in_dim(x, tile.astype(x.dtype), i * size, axis=1)


def loop(step: Callable, init: Any, n: int) -> Any:
    """Final carry of ``lax.scan(step, init, arange(n))``; one step is simply inlined.

    Most calls at small sizes (regional chunks, training tasks) fit in one tile;
    without a while loop around it, XLA fuses across the step and skips the loop's
    bookkeeping and dynamic slicing (a quarter of a 256-point forward pass on a CPU).
    """
    if n == 1:
        return step(init, jnp.zeros((), jnp.int32))[0]
    return jax.lax.scan(step, init, jnp.arange(n))[0]


def scores(q_i, k_j, mask_j, bias):
    """Masked scores ``[B, H, qc, kc]`` in float32 (``q_i`` already scaled by 1/√D)."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q_i, k_j, preferred_element_type=jnp.float32)
    if bias is not None:
        s = s + bias.astype(jnp.float32)
    return jnp.where(mask_j[:, None, None, :], s, NEG_INF)


def _batch_slice(tree: Any, n: jax.Array, size: int) -> Any:
    """Batch tile ``n`` of length ``size`` (axis 0) of every leaf of ``tree``."""
    return jax.tree.map(lambda a: jax.lax.dynamic_slice_in_dim(a, n * size, size, axis=0), tree)


def _batch_update(x: jax.Array, tile: jax.Array, n: jax.Array, size: int) -> jax.Array:
    return jax.lax.dynamic_update_slice_in_dim(x, tile.astype(x.dtype), n * size, axis=0)


def over_batch_tiles(step: Callable, data: Any, zeros: Callable, acc: Any, size: int):
    """Run ``step(data_tile, acc) -> (outs, acc)`` over batch tiles of ``size`` elements.

    ``outs`` (a pytree of arrays with the batch on axis 0) are written into their
    place in ``zeros()``; ``acc`` carries from tile to tile.  With one tile,
    ``step`` runs on ``data`` directly.
    """
    b = jax.tree.leaves(data)[0].shape[0]
    if size == b:
        return step(data, acc)

    def b_step(carry, n):
        outs, acc = carry
        outs_n, acc = step(_batch_slice(data, n, size), acc)
        outs = jax.tree.map(lambda a, t: _batch_update(a, t, n, size), outs, outs_n)
        return (outs, acc), None

    return loop(b_step, (zeros(), acc), b // size)


def fused_spec(fns, *arrays):
    """The :class:`~xnp.nn.bias.RBFSpec` when the native kernels can run, else None.

    They need an RBF bias (``fns[2]``), float32 ``arrays`` and :func:`native.enabled`.
    """
    spec = fns[2] if len(fns) > 2 else None
    if spec is None or any(x.dtype != jnp.float32 for x in arrays):
        return None
    return spec if native.enabled() else None

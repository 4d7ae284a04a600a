"""Small building blocks: MLPs and multi-head attention with a pluggable kernel."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import nnx

from xnp.nn.attention import biased_scan_attention, dense_attention

__all__ = ["MLP", "MultiHeadAttention", "count_params", "dense"]

AttentionKind = Literal["bsa", "dense"]

_KERNEL_INIT = nnx.initializers.orthogonal()


def count_params(tree: nnx.Module | Any) -> int:
    """Number of scalar parameters of a module (its ``nnx.Param`` variables) or of a state.

    Works on abstract modules (:func:`flax.nnx.eval_shape`) too: nothing is allocated.

    Examples
    --------
    >>> count_params(MLP([3, 16, 2], rngs=nnx.Rngs(0)))
    98
    """
    if isinstance(tree, nnx.Module):
        tree = nnx.state(tree, nnx.Param)
    return sum(math.prod(x.shape) for x in jax.tree.leaves(tree))


def dense(d_in: int, d_out: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32) -> nnx.Linear:
    """A Linear layer with orthogonal kernel init and zero bias (the paper's choice)."""
    return nnx.Linear(d_in, d_out, kernel_init=_KERNEL_INIT, dtype=dtype, rngs=rngs)


class MLP(nnx.Module):
    """Dense layers with GELU between them and none after the last.

    Parameters
    ----------
    sizes : sequence of int
        ``[d_in, h_1, ..., d_out]``.

    Examples
    --------
    >>> mlp = MLP([3, 16, 2], rngs=nnx.Rngs(0))
    >>> mlp(jnp.ones((5, 3))).shape
    (5, 2)
    """

    def __init__(self, sizes: Sequence[int], *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.layers = nnx.List(
            [dense(a, b, rngs=rngs, dtype=dtype) for a, b in itertools.pairwise(sizes)]
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """Apply the MLP to the last axis of ``x``."""
        for i, layer in enumerate(self.layers):
            if i:
                x = jax.nn.gelu(x)
            x = layer(x)
        return x


#: Initial logit offset ``c`` of the prior key (see :class:`MultiHeadAttention`): about
#: the median log-sum-exp of the shipped ``gp-sphere``'s attention rows (7–11 on its
#: training tasks), so that the prior starts with a share of a third or so and its gate
#: gets a useful gradient (the gate at zero keeps the output exact whatever this is).
PRIOR_LOGIT_INIT = 8.0


class MultiHeadAttention(nnx.Module):
    """Multi-head attention whose key/value projection can be computed once and reused.

    Queries, keys and values are projected to ``d_attn`` and split into
    ``n_heads``; the heads are combined by an output projection to ``d_out``.
    The attention kernel is Biased Scan Attention (``"bsa"``) or the dense
    reference (``"dense"``).

    With ``prior=True`` every query also attends to one learned *prior key* per
    head, which has no location and so no distance bias: its logit is
    ``q·k_p / √D + c`` and its value ``v_p``.  Softmax weights sum to one, so
    without it a query far from every key still spends all its attention on them;
    with it, the share left to the keys falls as their distance biases decay and
    the output moves to the learned ``v_p`` (in a neural process: the prediction
    reverts to a prior far from the observations, and with no observation at
    all).  The prior enters through a gate per head initialised at zero, so a
    module built with the prior computes exactly what it computes without one
    until training opens the gate (a pretrained model gains it without any change
    at step 0).  Merging uses the attention's log-sum-exp (``return_lse``), so
    the prior costs one dot product per query and head on any kernel.

    Examples
    --------
    >>> mha = MultiHeadAttention(8, 16, 2, 8, rngs=nnx.Rngs(0))
    >>> x = jnp.ones((1, 5, 8))
    >>> mha(x, mha.project_kv(x)).shape
    (1, 5, 8)
    """

    def __init__(
        self,
        d_in: int,
        d_attn: int,
        n_heads: int,
        d_out: int,
        *,
        kind: AttentionKind = "bsa",
        q_chunk: int = 512,
        k_chunk: int = 512,
        rngs: nnx.Rngs,
        dtype: Any = jnp.float32,
        prior: bool = False,
    ):
        self.n_heads = n_heads
        self.kind = kind
        self.prior = prior
        if prior:
            d_head = d_attn // n_heads
            key = rngs.params()
            self.prior_k = nnx.Param(jax.random.normal(key, (n_heads, d_head)) / math.sqrt(d_head))
            self.prior_v = nnx.Param(jnp.zeros((n_heads, d_head)))
            self.prior_c = nnx.Param(jnp.full((n_heads,), PRIOR_LOGIT_INIT))
            self.prior_gate = nnx.Param(jnp.zeros((n_heads,)))
        self.q_chunk, self.k_chunk = q_chunk, k_chunk
        self.q = dense(d_in, d_attn, rngs=rngs, dtype=dtype)
        self.k = dense(d_in, d_attn, rngs=rngs, dtype=dtype)
        self.v = dense(d_in, d_attn, rngs=rngs, dtype=dtype)
        self.out = dense(d_attn, d_out, rngs=rngs, dtype=dtype)

    def _heads(self, x: jax.Array) -> jax.Array:
        return x.reshape(*x.shape[:-1], self.n_heads, x.shape[-1] // self.n_heads)

    def project_kv(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Keys and values ``[B, N, H, D]`` of tokens ``x`` ``[B, N, d_in]``."""
        return self._heads(self.k(x)), self._heads(self.v(x))

    def __call__(
        self,
        x: jax.Array,
        kv: tuple[jax.Array, jax.Array],
        *,
        bias_fn: Callable | None = None,
        q_feats: Any = None,
        k_feats: Any = None,
        k_mask: jax.Array | None = None,
        bias_bounds: tuple[jax.Array, jax.Array] | None = None,
    ) -> jax.Array:
        """Attend from query tokens ``x`` ``[B, Nq, d_in]`` to projected ``kv``."""
        attend = biased_scan_attention if self.kind == "bsa" else dense_attention
        q = self._heads(self.q(x))
        out = attend(
            q,
            *kv,
            bias_fn=bias_fn,
            q_feats=q_feats if bias_fn is not None else None,
            k_feats=k_feats if bias_fn is not None else None,
            k_mask=k_mask,
            q_chunk=self.q_chunk,
            k_chunk=self.k_chunk,
            bias_bounds=bias_bounds if bias_fn is not None else None,
            return_lse=self.prior,
        )
        if self.prior:
            out = self._with_prior(q, *out)
        return self.out(out.reshape(*out.shape[:-2], -1))

    def _with_prior(self, q: jax.Array, out: jax.Array, lse: jax.Array) -> jax.Array:
        """The attention ``out`` ``[B, Nq, H, Dv]`` merged with the prior key's value."""
        scale = q.shape[-1] ** -0.5
        k_p, v_p = self.prior_k[...], self.prior_v[...]
        s_p = jnp.einsum("bqhd,hd->bqh", q.astype(jnp.float32) * scale, k_p)
        s_p = s_p + self.prior_c[...][None, None]
        lse = jnp.swapaxes(lse, 1, 2)  # [B, Nq, H]; +inf where a query had no key
        lse = jnp.where(jnp.isfinite(lse), lse, -jnp.inf)  # no key: all weight on the prior
        share = jax.nn.sigmoid(s_p - lse)  # the prior's share of a softmax over both
        mix = (self.prior_gate[...][None, None] * share)[..., None]
        out32 = out.astype(jnp.float32)
        return (out32 + mix * (v_p[None, None] - out32)).astype(out.dtype)

from functools import partial
from unittest.mock import patch

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xnp.errors import ConfigError, ShapeError
from xnp.nn import attention
from xnp.nn.attention import (
    _batch_tile,
    _chunk_size,
    biased_scan_attention,
    dense_attention,
)

B, H, D = 2, 2, 8


def make_inputs(nq, nk, *, seed=0, dv=D):
    ks = jax.random.split(jax.random.key(seed), 6)
    q = jax.random.normal(ks[0], (B, nq, H, D))
    k = jax.random.normal(ks[1], (B, nk, H, D))
    v = jax.random.normal(ks[2], (B, nk, H, dv))
    q_feats = {"s": jax.random.normal(ks[3], (B, nq, 2)), "id": jnp.zeros((B, nq), jnp.int32)}
    k_feats = {"s": jax.random.normal(ks[4], (B, nk, 2)), "id": jnp.ones((B, nk), jnp.int32)}
    mask = jax.random.bernoulli(ks[5], 0.7, (B, nk))
    return q, k, v, q_feats, k_feats, mask


def rbf_bias(a, b):
    """A bias function with learnable (a, b) closed over, as the models use it."""

    def bias_fn(qf, kf):
        d2 = jnp.sum((qf["s"][:, :, None, :] - kf["s"][:, None, :, :]) ** 2, axis=-1)
        z = d2[:, None]
        return a[None, :, None, None] * jnp.exp(-b[None, :, None, None] * z)

    return bias_fn


A0, B0 = jnp.array([1.0, -0.5]), jnp.array([0.5, 2.0])


def run(attn, q, k, v, a, b, sq, sk, *, qf_int, kf_int, mask, use_bias, chunks):
    kwargs = {"k_mask": mask, "q_chunk": chunks[0], "k_chunk": chunks[1]}
    if use_bias:
        kwargs.update(
            bias_fn=rbf_bias(a, b),
            q_feats={"s": sq, "id": qf_int},
            k_feats={"s": sk, "id": kf_int},
        )
    out = attn(q, k, v, **kwargs)
    return jnp.sum(jnp.sin(out) * out), out


@pytest.mark.parametrize(
    ("nq", "nk", "chunks"),
    [(64, 48, (16, 16)), (50, 37, (16, 16)), (33, 70, (64, 64))],
    ids=["multiple", "ragged", "single-tile"],
)
@pytest.mark.parametrize("use_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("use_mask", [True, False], ids=["mask", "nomask"])
def test_bsa_matches_dense_values_and_gradients(nq, nk, chunks, use_bias, use_mask):
    q, k, v, qf, kf, mask = make_inputs(nq, nk)
    mask = mask if use_mask else None
    results = []
    for attn in (biased_scan_attention, dense_attention):

        def loss(q, k, v, a, b, sq, sk, attn=attn):
            return run(
                attn,
                q,
                k,
                v,
                a,
                b,
                sq,
                sk,
                qf_int=qf["id"],
                kf_int=kf["id"],
                mask=mask,
                use_bias=use_bias,
                chunks=chunks,
            )

        grad = jax.jit(jax.value_and_grad(loss, argnums=range(7), has_aux=True))
        (_, out), grads = grad(q, k, v, A0, B0, qf["s"], kf["s"])
        results.append((out, grads))
    (out, grads), (out_ref, grads_ref) = results
    np.testing.assert_allclose(out, out_ref, atol=2e-6, rtol=1e-5)
    names = ["q", "k", "v", "bias a", "bias b", "q_feats", "k_feats"]
    for name, g, g_ref in zip(names, grads, grads_ref, strict=True):
        scale = float(jnp.max(jnp.abs(g_ref))) or 1.0
        # The bias parameters' gradients sum over every (batch, head, query, key): in
        # float32 the two summation orders then differ by more.  Measured on an AVX-512
        # machine without LLVM optimisations (ragged case): tiled and dense each lay
        # 4-5e-6 (relative) from the float64 value, on opposite sides.
        atol = 1e-5 if name.startswith("bias") else 2e-6
        np.testing.assert_allclose(g / scale, g_ref / scale, atol=atol, err_msg=name)
    if use_bias:
        assert float(jnp.abs(grads[3]).sum()) > 0  # the bias parameters really get gradient


@pytest.mark.parametrize("b_chunk", [1, 2])
def test_batch_tiles_match_dense(b_chunk):
    # four batch elements in tiles of one or two: the batch loop of the forward and
    # backward passes (the bias weights' gradient accumulates across batch tiles)
    parts = [make_inputs(24, 20, seed=s) for s in (1, 2)]
    q, k, v, qf, kf, mask = jax.tree.map(lambda *x: jnp.concatenate(x), *parts)
    feats = {"q_feats": {"s": qf["s"]}, "k_feats": {"s": kf["s"]}, "k_mask": mask}

    def loss(attn, q, k, v, a, sq, **extra):
        feats["q_feats"] = {"s": sq}
        out = attn(q, k, v, bias_fn=rbf_bias(a, B0), q_chunk=8, k_chunk=16, **feats, **extra)
        return jnp.sum(jnp.sin(out) * out)

    args = (q, k, v, A0, qf["s"])
    grad = partial(jax.value_and_grad, argnums=range(5))
    got = jax.jit(grad(lambda *x: loss(biased_scan_attention, *x, b_chunk=b_chunk)))(*args)
    ref = grad(lambda *x: loss(dense_attention, *x))(*args)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
    for g, g_ref in zip(got[1], ref[1], strict=True):
        np.testing.assert_allclose(g, g_ref, atol=2e-6 * float(jnp.max(jnp.abs(g_ref))))
    with pytest.raises(ConfigError, match="divisor of the batch size 4"):
        biased_scan_attention(q, k, v, b_chunk=3)


def test_bias_closing_over_the_batch_runs_untiled_or_says_why():
    # a bias with a weight per batch element cannot be cut into batch tiles: by default
    # the batch runs in one tile (same numbers as dense); with b_chunk, a clear error
    q, k, v, qf, kf, _ = make_inputs(16, 12)
    w = jnp.array([[1.0, 0.5], [-2.0, 1.0]])[:, :, None, None]  # [B, H, 1, 1]

    def bias_fn(qf, kf):
        d2 = jnp.sum((qf["s"][:, :, None, :] - kf["s"][:, None, :, :]) ** 2, axis=-1)
        return w * jnp.exp(-d2[:, None])

    feats = {"bias_fn": bias_fn, "q_feats": {"s": qf["s"]}, "k_feats": {"s": kf["s"]}}
    with patch.object(attention, "_TILE_BYTES", 1):  # default tiles of one element
        out = biased_scan_attention(q, k, v, q_chunk=8, k_chunk=8, **feats)
    np.testing.assert_allclose(out, dense_attention(q, k, v, **feats), atol=2e-6)
    with pytest.raises(ShapeError, match="taken along the batch axis"):
        biased_scan_attention(q, k, v, b_chunk=1, **feats)


def test_default_batch_tile_keeps_scores_within_budget():
    # 4 MiB of float32 scores: [b, 4, 512, 512] tiles hold one batch element, the
    # backward's half-length key tiles two; small problems run the batch at once
    assert _batch_tile(8, 4 * 512 * 512, None) == 1
    assert _batch_tile(8, 4 * 512 * 256, None) == 2
    assert _batch_tile(6, 4 * 512 * 128, None) == 3  # largest divisor within budget
    assert _batch_tile(2, 2 * 16 * 16, None) == 2


def test_fully_masked_queries_return_zeros_not_nan():
    q, k, v, *_ = make_inputs(20, 30)
    mask = jnp.ones((B, 30), bool).at[1].set(False)

    def loss(q, k, v):
        out = biased_scan_attention(q, k, v, k_mask=mask, q_chunk=8, k_chunk=8)
        return jnp.sum(out**2), out

    (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    assert not bool(jnp.isnan(out).any())
    np.testing.assert_array_equal(out[1], 0.0)
    assert all(bool(jnp.isfinite(g).all()) for g in grads)
    np.testing.assert_array_equal(dense_attention(q, k, v, k_mask=mask)[1], 0.0)


def test_value_dim_may_differ_and_dtype_is_kept():
    q, k, v, *_ = make_inputs(10, 12, dv=5)
    out = biased_scan_attention(q, k, v, q_chunk=4, k_chunk=4)
    assert out.shape == (B, 10, H, 5)
    np.testing.assert_allclose(out, dense_attention(q, k, v), atol=2e-6)
    out16 = biased_scan_attention(
        q.astype(jnp.bfloat16),
        k.astype(jnp.bfloat16),
        v.astype(jnp.bfloat16),
        q_chunk=4,
        k_chunk=4,
    )
    assert out16.dtype == jnp.bfloat16
    np.testing.assert_allclose(out16.astype(jnp.float32), out, atol=5e-2)


def test_a_bias_for_all_heads_broadcasts_as_in_numpy():
    # a bias_fn may return one bias for every head, [B, 1, q, k] (or any shape that
    # broadcasts to [B, H, q, k]), as numpy and the dense reference allow
    q, k, v, qf, kf, mask = make_inputs(40, 33)
    a = jnp.array([0.7])

    def shared(qf, kf, a=a):
        d2 = jnp.sum((qf["s"][:, :, None, :] - kf["s"][:, None, :, :]) ** 2, axis=-1)
        return a[0] * jnp.exp(-d2)[:, None]  # [B, 1, q, k]

    def loss(attn, q, a):
        bias = partial(shared, a=a)
        out = attn(q, k, v, bias_fn=bias, q_feats=qf, k_feats=kf, k_mask=mask,
                   q_chunk=16, k_chunk=16)  # fmt: skip
        return jnp.sum(jnp.sin(out) * out), out

    (_, fast), grads = jax.value_and_grad(partial(loss, biased_scan_attention), (0, 1),
                                          has_aux=True)(q, a)  # fmt: skip
    (_, ref), ref_grads = jax.value_and_grad(partial(loss, dense_attention), (0, 1),
                                             has_aux=True)(q, a)  # fmt: skip
    np.testing.assert_allclose(fast, ref, atol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        np.testing.assert_allclose(g, r, atol=1e-4)
    explicit = biased_scan_attention(
        q, k, v, bias_fn=lambda qf, kf: jnp.repeat(shared(qf, kf), H, axis=1),
        q_feats=qf, k_feats=kf, k_mask=mask, q_chunk=16, k_chunk=16,
    )  # fmt: skip
    np.testing.assert_allclose(fast, explicit, atol=1e-6)


def test_bad_inputs_raise_clear_errors():
    q, k, v, qf, kf, mask = make_inputs(8, 9)
    with pytest.raises(ShapeError, match=r"\[B, N, H, D\]"):
        biased_scan_attention(q[0], k, v)
    with pytest.raises(ShapeError, match="k must have shape"):
        biased_scan_attention(q, k[..., :3], v)
    with pytest.raises(ShapeError, match="k_mask"):
        biased_scan_attention(q, k, v, k_mask=mask[:, :4])
    with pytest.raises(ShapeError, match="leading dims"):
        biased_scan_attention(
            q, k, v, bias_fn=rbf_bias(A0, B0), q_feats={"s": qf["s"][:, :3]}, k_feats=kf
        )
    with pytest.raises(ShapeError, match="bias_fn must return"):
        biased_scan_attention(
            q, k, v, bias_fn=lambda a, b: jnp.zeros((1, 3)), q_feats=qf, k_feats=kf
        )
    with pytest.raises(ConfigError, match="without a bias_fn"):
        biased_scan_attention(q, k, v, q_feats=qf, k_feats=kf)
    with pytest.raises(ConfigError, match="positive"):
        biased_scan_attention(q, k, v, q_chunk=0)


@given(st.integers(1, 5000), st.integers(1, 2048))
def test_chunk_size_covers_with_little_padding(n, chunk):
    size = _chunk_size(n, chunk)
    assert 1 <= size <= max(chunk, 1)
    n_tiles = -(-n // size)
    assert n_tiles == -(-n // chunk) or size == n  # never more tiles than needed
    assert n_tiles * size - n < max(8 * n_tiles, size)  # padding below one tile


def test_memory_stays_bounded_at_16k():
    """Compiled forward+backward temporaries at Nq = Nk = 16384, H = 4, D = 32."""
    spec = jax.ShapeDtypeStruct((1, 16384, 4, 32), jnp.float32)

    def temp_mib(attn):
        def loss(q, k, v):
            return jnp.sum(attn(q, k, v))

        compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(spec, spec, spec).compile()
        return compiled.memory_analysis().temp_size_in_bytes / 2**20

    bsa = temp_mib(biased_scan_attention)
    assert bsa < 64, f"BSA forward+backward needs {bsa:.1f} MiB of temporaries"
    assert temp_mib(dense_attention) > 1024  # the dense reference needs GiBs


@pytest.mark.parametrize("scale", [1.0, 40.0], ids=["shifted-path", "fallback-path"])
def test_bias_bounds_shift_is_exact(scale):
    # bounds of a·exp(-b d²) with a of both signs; a large scale makes the span > 60
    q, k, v, qf, kf, mask = make_inputs(40, 35)
    a, b = A0 * scale, B0
    bounds = (jnp.minimum(a, 0.0), jnp.maximum(a, 0.0))

    def loss(attn, q, k, v, a, **extra):
        out = attn(
            q,
            k,
            v,
            bias_fn=rbf_bias(a, b),
            q_feats={"s": qf["s"]},
            k_feats={"s": kf["s"]},
            k_mask=mask,
            q_chunk=16,
            k_chunk=16,
            **extra,
        )
        return jnp.sum(out * jnp.cos(out))

    got = jax.jit(
        jax.value_and_grad(
            lambda *x: loss(biased_scan_attention, *x, bias_bounds=bounds), argnums=(0, 1, 2, 3)
        )
    )(q, k, v, a)
    ref = jax.value_and_grad(lambda *x: loss(dense_attention, *x), argnums=(0, 1, 2, 3))(
        q, k, v, a
    )
    assert float(got[0]) == pytest.approx(float(ref[0]), rel=1e-5, abs=1e-4)
    # float32 rounding of scores grows with the bias: 40× larger biases (|s| ~ 40) on the
    # fallback path differ by ~2e-5 of the largest gradient on some CPUs
    atol = 2e-5 * max(1.0, scale / 10.0)
    for g, g_ref in zip(got[1], ref[1], strict=True):
        scale_ = float(jnp.max(jnp.abs(g_ref))) or 1.0
        np.testing.assert_allclose(g / scale_, g_ref / scale_, atol=atol)


def test_rbf_bias_custom_gradient_equals_autodiff_of_the_formula():
    from xnp.nn.bias import RBFBias

    ka, kb, kz, kg = jax.random.split(jax.random.key(3), 4)
    a = jax.random.normal(ka, (3, 5))
    b = jax.nn.softplus(jax.random.normal(kb, (3, 5)))
    z = jax.random.uniform(kz, (2, 7, 6), maxval=4.0)
    g = jax.random.normal(kg, (2, 3, 7, 6))

    def plain(a, b, z):
        terms = a[None, :, :, None, None] * jnp.exp(-b[None, :, :, None, None] * z[:, None, None])
        return jnp.sum(terms, axis=2)

    # (on the CPU a native kernel with its own exponential: float32 rounding apart)
    np.testing.assert_allclose(RBFBias.apply(a, b, z), plain(a, b, z), rtol=1e-6, atol=1e-6)
    got = jax.grad(lambda *w: jnp.sum(g * RBFBias.apply(*w)), argnums=(0, 1, 2))(a, b, z)
    want = jax.grad(lambda *w: jnp.sum(g * plain(*w)), argnums=(0, 1, 2))(a, b, z)
    for x, y in zip(got, want, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("native_rbf", [False, True], ids=["tiled", "native-rbf"])
def test_log_sum_exp_and_its_gradient_match_dense(native_rbf):
    """``return_lse``: the log-sum-exp and gradients through it and the output together."""
    from xnp.nn.bias import SpaceTimeBias

    q, k, v, _, _, mask = make_inputs(37, 45, seed=4)
    mask = mask.at[1].set(False)  # a batch element without keys: lse = inf, no NaN
    ks = jax.random.split(jax.random.key(9), 2)
    sq, sk = (
        jax.random.uniform(kk, (B, n, 2), maxval=10.0) for kk, n in zip(ks, (37, 45), strict=True)
    )
    if native_rbf:  # the RBF bias the models use: the native kernels on the CPU
        bias = SpaceTimeBias(H, spatial="euclidean", spatial_scale=5.0)
        qf, kf = bias.features(sq, None), bias.features(sk, None)
        extra = {"bias_fn": bias.bind(), "bias_bounds": bias.bounds()}
    else:
        qf = {"s": sq, "id": jnp.zeros((B, 37), jnp.int32)}
        kf = {"s": sk, "id": jnp.ones((B, 45), jnp.int32)}
        extra = {"bias_fn": rbf_bias(A0, B0)}
    weights = jax.random.normal(jax.random.key(5), (B, H, 37))

    def loss(attn, q, k, v):
        out, lse = attn(q, k, v, q_feats=qf, k_feats=kf, k_mask=mask, q_chunk=16, k_chunk=16,
                        return_lse=True, **extra)  # fmt: skip
        finite = jnp.where(jnp.isfinite(lse), lse, 0.0)
        return jnp.sum(jnp.sin(out) * out) + jnp.sum(weights * finite), (out, lse)

    grad = jax.value_and_grad(loss, argnums=(1, 2, 3), has_aux=True)
    (_, (out, lse)), got = grad(biased_scan_attention, q, k, v)
    (_, (out_d, lse_d)), want = grad(dense_attention, q, k, v)
    assert lse.shape == (B, H, 37)
    assert bool(jnp.isinf(lse[1]).all())
    assert bool(jnp.isfinite(lse[0]).all())
    np.testing.assert_allclose(lse[0], lse_d[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, out_d, rtol=1e-5, atol=1e-5)
    for g, w in zip(got, want, strict=True):
        assert bool(jnp.isfinite(g).all())
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)
    # without return_lse the output alone, as before
    plain = biased_scan_attention(q, k, v, q_feats=qf, k_feats=kf, k_mask=mask, q_chunk=16,
                                  k_chunk=16, **extra)  # fmt: skip
    np.testing.assert_array_equal(plain, out)

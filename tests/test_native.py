"""The native CPU kernels for the RBF bias and its gradient against their JAX references."""

import logging
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xnp.errors import ConfigError, NativeKernelError
from xnp.nn import native
from xnp.nn.attention import biased_scan_attention
from xnp.nn.bias import SpaceTimeBias

needs_compiler = pytest.mark.skipif(
    shutil.which("c++") is None, reason="no C++ compiler ('c++') to build the native kernels"
)


def _inputs(h, f, b, q, k, seed=0):
    ka, kb, kz, kg = jax.random.split(jax.random.key(seed), 4)
    a = jax.random.normal(ka, (h, f))
    rate = jax.nn.softplus(jax.random.normal(kb, (h, f))) * 4.0
    z = jax.random.uniform(kz, (b, q, k), maxval=6.0)
    g = jax.random.normal(kg, (b, h, q, k))
    return a, rate, z, g


@needs_compiler
def test_the_kernel_builds_and_is_used_on_the_cpu():
    assert native.enabled()
    a, b, z, g = _inputs(2, 3, 1, 4, 5)
    hlo = jax.jit(lambda *x: native.rbf_grad(*x, want_dz=True)).lower(a, b, z, g).as_text()
    assert "xnp_rbf_grad_dz" in hlo


@needs_compiler
@pytest.mark.parametrize(
    ("h", "f", "b", "q", "k"),
    [(4, 5, 2, 33, 48), (1, 1, 1, 1, 1), (3, 16, 3, 7, 15), (2, 3, 1, 64, 257)],
)
@pytest.mark.parametrize("want_dz", [False, True])
def test_kernel_equals_the_jax_sums(h, f, b, q, k, want_dz):
    args = _inputs(h, f, b, q, k, seed=q + k)
    got = jax.jit(lambda *x: native.rbf_grad(*x, want_dz=want_dz))(*args)
    want = jax.jit(lambda *x: native.rbf_grad_reference(*x, want_dz=want_dz))(*args)
    assert (got[2] is None) == (not want_dz)
    for x, y in zip(got, want, strict=True):
        if y is None:
            continue
        scale = float(jnp.max(jnp.abs(y))) or 1.0
        np.testing.assert_allclose(np.asarray(x) / scale, np.asarray(y) / scale, atol=3e-6)


@needs_compiler
@pytest.mark.parametrize(
    ("h", "f", "b", "q", "k"), [(4, 5, 2, 33, 48), (1, 1, 1, 1, 1), (3, 16, 1, 7, 15)]
)
def test_bias_kernel_equals_the_jax_sum(h, f, b, q, k):
    a, rate, z, _ = _inputs(h, f, b, q, k, seed=h + q)
    z = z.at[-1, -1, -1].set(1e4).at[0, 0, 0].set(0.0)  # far beyond e^-87; zero distance
    fn = jax.jit(native.rbf_bias)
    assert "xnp_rbf_bias" in fn.lower(a, rate, z).as_text()
    got, want = fn(a, rate, z), jax.jit(native.rbf_bias_reference)(a, rate, z)
    assert got.shape == (b, h, q, k)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * float(jnp.max(jnp.abs(a))))
    np.testing.assert_allclose(got[0, :, 0, 0], jnp.sum(a, axis=1), rtol=1e-6)


@needs_compiler
def test_kernel_is_deterministic_and_keeps_dtypes():
    a, b, z, g = _inputs(4, 5, 3, 100, 130)
    fn = jax.jit(lambda *x: native.rbf_grad(*x, want_dz=True))
    first, second = fn(a, b, z, g), fn(a, b, z, g)
    for x, y in zip(first, second, strict=True):
        np.testing.assert_array_equal(x, y)
    half = fn(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), z, g.astype(jnp.bfloat16))
    assert [x.dtype for x in half] == [jnp.bfloat16, jnp.bfloat16, jnp.float32]


@needs_compiler
def test_attention_gradients_are_those_of_the_jax_path(monkeypatch):
    """The training gradient of biased attention with the native kernel and without."""
    kq, kk, kv, ks = jax.random.split(jax.random.key(1), 4)
    q = jax.random.normal(kq, (2, 40, 2, 8))
    k = jax.random.normal(kk, (2, 56, 2, 8))
    v = jax.random.normal(kv, (2, 56, 2, 8))
    s_q = jax.random.uniform(ks, (2, 40, 2), minval=-10.0, maxval=10.0)
    s_k = jax.random.uniform(ks, (2, 56, 2), minval=-10.0, maxval=10.0) + 1.0
    t0 = jnp.zeros((2, 40, 1)), jnp.zeros((2, 56, 1))
    bias = SpaceTimeBias(2, spatial="great_circle", rngs=None)
    from flax import nnx

    graphdef, params = nnx.split(bias)

    def loss(params, q, k, v):
        layer = nnx.merge(graphdef, params)
        qf, kf = layer.features(s_q, t0[0]), layer.features(s_k, t0[1])
        out = biased_scan_attention(
            q, k, v, bias_fn=layer.bind(), q_feats=qf, k_feats=kf, q_chunk=16, k_chunk=16
        )
        return jnp.sum(jnp.sin(out))

    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
    with_kernel = grad(params, q, k, v)
    monkeypatch.setenv("XNP_NATIVE", "0")
    without = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(params, q, k, v)
    for x, y in zip(jax.tree.leaves(with_kernel), jax.tree.leaves(without), strict=True):
        np.testing.assert_allclose(x, y, rtol=2e-5, atol=2e-6)


@needs_compiler
def test_kernel_under_a_batch_sharded_jit():
    """Two (fake) CPU devices splitting the batch, as the train step does."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    a, b, z, g = _inputs(2, 5, 4, 24, 32)
    mesh = Mesh(np.array(jax.devices()[:2]), ("batch",))
    z_s = jax.device_put(z, NamedSharding(mesh, PartitionSpec("batch")))
    g_s = jax.device_put(g, NamedSharding(mesh, PartitionSpec("batch")))
    got = jax.jit(lambda *x: native.rbf_grad(*x, want_dz=True))(a, b, z_s, g_s)
    want = native.rbf_grad_reference(a, b, z, g, want_dz=True)
    for x, y in zip(got, want, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


def test_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv("XNP_NATIVE", "0")
    assert not native.enabled()
    a, b, z, g = _inputs(2, 3, 1, 4, 5)
    hlo = jax.jit(lambda *x: native.rbf_grad(*x, want_dz=False)).lower(a, b, z, g).as_text()
    assert "xnp_rbf_grad" not in hlo
    monkeypatch.setenv("XNP_NATIVE", "yes")
    with pytest.raises(ConfigError, match="XNP_NATIVE must be"):
        native.enabled()


def test_no_compiler_falls_back_or_raises_when_required(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("XNP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("XNP_NATIVE", "auto")
    with caplog.at_level(logging.INFO, logger="xnp.nn.native"):
        assert not native.enabled()
    assert "no C++ compiler found" in caplog.text
    a, b, z, g = _inputs(2, 3, 1, 4, 5)
    da, _, _ = native.rbf_grad(a, b, z, g, want_dz=False)  # the JAX path
    np.testing.assert_allclose(da, native.rbf_grad_reference(a, b, z, g, want_dz=False)[0])
    monkeypatch.setenv("XNP_NATIVE", "1")
    with pytest.raises(NativeKernelError, match="XNP_NATIVE=0"):
        native.enabled()


@needs_compiler
def test_build_is_cached_by_content(monkeypatch, tmp_path):
    monkeypatch.setenv("XNP_CACHE_DIR", str(tmp_path))
    first = native._build()
    assert first.parent == tmp_path / "native"
    assert first.exists()
    mtime = first.stat().st_mtime_ns
    assert native._build() == first
    assert first.stat().st_mtime_ns == mtime
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temporary left


@needs_compiler
def test_a_compiler_error_is_reported(monkeypatch, tmp_path):
    fake = tmp_path / "fake-cxx"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo fake 1.0; exit 0; fi\n"
                    "echo 'rbf.cc:1: error: broken' >&2; exit 3\n")  # fmt: skip
    fake.chmod(0o755)
    monkeypatch.setenv("XNP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", str(fake))
    with pytest.raises(NativeKernelError, match=r"exit 3\)[\s\S]*error: broken"):
        native._build()
    assert not list((tmp_path / "native").iterdir())  # the temporary file is removed


def _attention_inputs(dv, seed=0, nk=301):
    ks = jax.random.split(jax.random.key(seed), 9)
    b, nq, h, d = 2, 70, 2, 16
    q = jax.random.normal(ks[0], (b, nq, h, d))
    k = jax.random.normal(ks[1], (b, nk, h, d))
    v = jax.random.normal(ks[2], (b, nk, h, dv))

    def latlon(key, n):
        k1, k2 = jax.random.split(key)
        lat = jax.random.uniform(k1, (b, n), minval=-89.0, maxval=89.0)
        return jnp.stack([lat, jax.random.uniform(k2, (b, n), minval=-180.0, maxval=180.0)], -1)

    s_q, s_k = latlon(ks[3], nq), latlon(ks[4], nk)
    t_q = jax.random.uniform(ks[5], (b, nq, 1), maxval=72.0)
    t_k = jax.random.uniform(ks[6], (b, nk, 1), maxval=72.0)
    mask = jax.random.uniform(ks[7], (b, nk)) > 0.3
    return q, k, v, s_q, s_k, t_q, t_k, mask


def _random_bias(spatial, temporal, h, seed):
    from flax import nnx

    scale = 1000.0 if spatial == "great_circle" else 20.0
    bias = SpaceTimeBias(h, spatial=spatial, spatial_scale=scale, temporal=temporal)
    for i, rbf in enumerate((bias.space, bias.time)):
        if rbf is not None:  # weights of both signs and a wide range of rates
            rbf.a = nnx.Param(2.0 * jax.random.normal(jax.random.key(seed + i), rbf.a.shape))
    return bias


@needs_compiler
@pytest.mark.parametrize(
    ("spatial", "temporal", "dv", "nk"),
    [("great_circle", True, 32, 301), ("great_circle", False, 16, 37),
     ("euclidean", False, 24, 300), ("none", True, 64, 5)],
)  # fmt: skip
def test_fused_attention_equals_tiled_and_dense(monkeypatch, spatial, temporal, dv, nk):
    from xnp.nn.attention import dense_attention

    q, k, v, s_q, s_k, t_q, t_k, mask = _attention_inputs(dv, seed=dv, nk=nk)
    mask = mask.at[1].set(False)  # a batch element with no valid key at all
    bias = _random_bias(spatial, temporal, q.shape[2], seed=dv)
    qf, kf = bias.features(s_q, t_q), bias.features(s_k, t_k)

    def bsa(q, k, v):
        return biased_scan_attention(
            q, k, v, bias_fn=bias.bind(), q_feats=qf, k_feats=kf, k_mask=mask,
            q_chunk=32, k_chunk=64, bias_bounds=bias.bounds(),
        )  # fmt: skip

    fused = jax.jit(bsa)
    assert "xnp_rbf_attention" in fused.lower(q, k, v).as_text()
    got = fused(q, k, v)
    monkeypatch.setenv("XNP_NATIVE", "0")
    tiled = jax.jit(lambda *a: bsa(*a))(q, k, v)
    dense = dense_attention(q, k, v, bias_fn=bias.bind(), q_feats=qf, k_feats=kf, k_mask=mask)
    # (float32 sums in another order: the kernel's lane count depends on the machine)
    np.testing.assert_allclose(got, tiled, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got, dense, rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(got[1], 0.0)


@needs_compiler
def test_fused_attention_log_sum_exp(monkeypatch):
    """The kernel's lse (which the backward pass reads) is that of the tiled forward."""
    from xnp.nn import attention

    q, k, v, s_q, s_k, t_q, t_k, mask = _attention_inputs(32, seed=5)
    mask = mask.at[0, :].set(False)
    bias = _random_bias("great_circle", True, q.shape[2], seed=7)
    spec, weights = bias.bind().native_rbf
    qf, kf = bias.features(s_q, t_q), bias.features(s_k, t_k)
    out, lse = jax.jit(native.rbf_attention, static_argnums=6)(
        q, k, v, mask, qf, kf, spec, list(weights)
    )
    tiles = (2, 70, 301, 2, 301)
    ref_out, ref_lse = attention._forward_xla(
        (spec.bias, spec.bias), tiles, q, k, v, qf, kf, mask, list(weights), None
    )
    np.testing.assert_allclose(out, ref_out, atol=2e-6)
    assert np.all(np.isinf(lse[0]))
    assert np.all(np.isinf(ref_lse[0]))
    np.testing.assert_allclose(lse[1], ref_lse[1], rtol=1e-6, atol=2e-6)


@needs_compiler
@pytest.mark.parametrize(
    ("spatial", "temporal", "d", "dv", "nk"),
    [("great_circle", True, 16, 16, 301), ("euclidean", False, 32, 32, 56),
     ("none", True, 24, 24, 5), ("great_circle", False, 64, 64, 130),
     ("euclidean", True, 16, 24, 300)],
)  # fmt: skip
def test_fused_backward_equals_the_tiled_backward(monkeypatch, spatial, temporal, d, dv, nk):
    """Cotangents of q, k, v and the bias weights from the native backward kernel."""
    from flax import nnx

    q, k, v, s_q, s_k, t_q, t_k, mask = _attention_inputs(dv, seed=d + dv, nk=nk)
    q = jax.random.normal(jax.random.key(3), (*q.shape[:3], d))  # key dims d, value dims dv
    k = jax.random.normal(jax.random.key(4), (*k.shape[:3], d))
    mask = mask.at[1, nk // 2 :].set(False)  # whole key tiles with no valid key
    bias = _random_bias(spatial, temporal, q.shape[2], seed=d)
    # (70 queries, the default chunks: the kernel's last block of 8 queries is partial)
    graphdef, params = nnx.split(bias)
    weight = jnp.arange(dv, dtype=jnp.float32)[None, None, None, :]

    def loss(params, q, k, v):
        layer = nnx.merge(graphdef, params)
        qf, kf = layer.features(s_q, t_q), layer.features(s_k, t_k)
        out = biased_scan_attention(
            q, k, v, bias_fn=layer.bind(), q_feats=qf, k_feats=kf, k_mask=mask,
            bias_bounds=layer.bounds(),
        )  # fmt: skip
        return jnp.sum(jnp.sin(out) * weight)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
    assert "xnp_rbf_attention_bwd" in grad.lower(params, q, k, v).as_text()
    got = grad(params, q, k, v)
    again = grad(params, q, k, v)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(x, y)  # deterministic
    _assert_tiled_gives(got, loss, (params, q, k, v), monkeypatch)


def _assert_tiled_gives(got, loss, args, monkeypatch):
    """``got`` is the gradient of ``loss`` at ``args`` on the tiled JAX path too."""
    monkeypatch.setenv("XNP_NATIVE", "0")
    ref = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))(*args)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=2e-5 * float(jnp.max(jnp.abs(y))))


@needs_compiler
def test_fused_backward_leaves_feature_gradients_to_the_tiled_path(monkeypatch):
    """With a cotangent wanted for the locations, the tiled backward runs (and agrees)."""
    q, k, v, s_q, s_k, t_q, t_k, mask = _attention_inputs(16, seed=2, nk=40)
    bias = _random_bias("euclidean", False, q.shape[2], seed=2)

    def loss(s_q, q):
        qf, kf = bias.features(s_q, t_q), bias.features(s_k, t_k)
        out = biased_scan_attention(
            q, k, v, bias_fn=bias.bind(), q_feats=qf, k_feats=kf, k_mask=mask
        )
        return jnp.sum(out**2)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    assert "xnp_rbf_attention_bwd" not in grad.lower(s_q, q).as_text()
    got = grad(s_q, q)
    monkeypatch.setenv("XNP_NATIVE", "0")
    ref = jax.jit(jax.grad(loss, argnums=(0, 1)))(s_q, q)
    for x, y in zip(got, ref, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


@needs_compiler
def test_fused_backward_with_uneven_key_chunks(monkeypatch):
    """16 batch x head units split 5 key tiles into chunks of 2, 2 and 1 tiles."""
    from flax import nnx

    kq, kk, kv, ks, km = jax.random.split(jax.random.key(9), 5)
    b, h, nq, nk, d = 4, 4, 12, 520, 16
    q, k, v = (jax.random.normal(x, (b, n, h, d)) for x, n in ((kq, nq), (kk, nk), (kv, nk)))
    s_q = jax.random.uniform(ks, (b, nq, 2), minval=-3.0, maxval=3.0)
    s_k = jax.random.uniform(jax.random.fold_in(ks, 1), (b, nk, 2), minval=-3.0, maxval=3.0)
    mask = (jax.random.uniform(km, (b, nk)) > 0.2).at[2].set(False)  # one with no key
    bias = _random_bias("euclidean", False, h, seed=4)
    graphdef, params = nnx.split(bias)

    def loss(params, q, k, v):
        layer = nnx.merge(graphdef, params)
        qf, kf = layer.features(s_q, None), layer.features(s_k, None)
        out = biased_scan_attention(
            q, k, v, bias_fn=layer.bind(), q_feats=qf, k_feats=kf, k_mask=mask
        )
        return jnp.sum(jnp.cos(out))

    got = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(params, q, k, v)
    _assert_tiled_gives(got, loss, (params, q, k, v), monkeypatch)


@needs_compiler
def test_fused_backward_with_bfloat16_bias_weights(monkeypatch):
    """Weights in bfloat16 with float32 activations: gradients in the weights' dtype."""
    q, k, v, s_q, s_k, t_q, t_k, mask = _attention_inputs(16, seed=3, nk=40)
    bias = _random_bias("great_circle", True, q.shape[2], seed=3)
    spec, weights = bias.bind().native_rbf
    qf, kf = bias.features(s_q, t_q), bias.features(s_k, t_k)

    def loss(weights, q):
        def bias_fn(a, b):
            return spec.bias(a, b, *weights)

        bias_fn.native_rbf = (spec, tuple(weights))
        out = biased_scan_attention(q, k, v, bias_fn=bias_fn, q_feats=qf, k_feats=kf, k_mask=mask)
        return jnp.sum(out**2)

    w16 = [w.astype(jnp.bfloat16) for w in weights]
    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(w16, q)
    assert [g.dtype for g in got[0]] == [jnp.bfloat16] * len(w16)
    monkeypatch.setenv("XNP_NATIVE", "0")
    ref = jax.jit(jax.grad(loss, argnums=(0, 1)))(w16, q)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-4, atol=1e-5)
    for x, y in zip(got[0], ref[0], strict=True):
        np.testing.assert_allclose(x.astype(float), y.astype(float), rtol=2e-2, atol=1e-3)


@needs_compiler
def test_fused_backward_kernel_with_no_keys_and_bad_shapes():
    """No keys at all gives zero cotangents; a wrongly shaped lse is an XLA error."""
    bias = _random_bias("euclidean", False, 2, seed=0)
    spec, weights = bias.bind().native_rbf
    q = jnp.ones((1, 5, 2, 16))
    k = v = jnp.ones((1, 0, 2, 16))
    qf, kf = {"s": jnp.zeros((1, 5, 2))}, {"s": jnp.zeros((1, 0, 2))}
    mask = jnp.ones((1, 0), bool)
    lse, delta = jnp.full((1, 2, 5), jnp.inf), jnp.zeros((1, 2, 5))
    d_out = jnp.ones((1, 5, 2, 16))
    dq, dk, dv, dw = native.rbf_attention_bwd(
        q, k, v, mask, qf, kf, spec, weights, d_out, lse, delta
    )
    np.testing.assert_array_equal(dq, 0.0)
    assert dk.shape == (1, 0, 2, 16)
    assert dv.shape == (1, 0, 2, 16)
    for g in dw:
        np.testing.assert_array_equal(g, 0.0)
    with pytest.raises(Exception, match="lse and delta"):
        native.rbf_attention_bwd(
            q, k, v, mask, qf, kf, spec, weights, d_out, lse.reshape(1, 5, 2), delta
        )

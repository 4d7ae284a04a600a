"""The Pallas GPU kernels of biased attention, in Pallas's interpreter on the CPU.

The kernels (:mod:`xnp.nn.pallas_attention`, :mod:`xnp.nn.pallas_attention_bwd`)
are compared with :func:`xnp.nn.attention.dense_attention` and JAX's autodiff of
it: outputs, log-sum-exp and the cotangents of q, k, v and the RBF weights, with
key masks (a batch element with no valid key at all), sizes that are not
multiples of the blocks, head dimensions below Triton's 16 and several head
groups.  Tolerances: float32 2e-5 of the largest value (the kernels run in full
float32 here, as on a GPU), bfloat16 3e-2 (bfloat16 operands of the dot products,
as in the tiled path, rounded at different points).  The dispatch of
:func:`~xnp.nn.attention.biased_scan_attention` is checked by lowering it for an
NVIDIA GPU (which also runs Pallas's Triton lowering of all three kernels), and
by running its ``cuda`` branch in the interpreter.
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from xnp.errors import ConfigError
from xnp.geo import distance
from xnp.nn import attention_bwd, dispatch, pallas_attention, pallas_attention_bwd
from xnp.nn.attention import biased_scan_attention, dense_attention
from xnp.nn.bias import SpaceTimeBias

B, NQ, NK, H, D = 2, 37, 50, 3, 8  # 37 and 50 points: partial tiles of 16 and 32


def _points(key, n, metric):
    k1, k2, k3 = jax.random.split(key, 3)
    if metric == "great_circle":  # a 120° × 80° region: near and far pairs
        s = jnp.stack(
            [
                jax.random.uniform(k1, (B, n), minval=-60, maxval=60),
                jax.random.uniform(k2, (B, n), minval=-40, maxval=40),
            ],
            -1,
        )
    else:
        s = jax.random.uniform(k1, (B, n, 2), maxval=3.0)
    return s, jax.random.uniform(k3, (B, n, 1), maxval=48.0)


def _problem(metric, temporal, dtype, seed=0):
    ks = jax.random.split(jax.random.key(seed), 8)
    q = jax.random.normal(ks[0], (B, NQ, H, D)).astype(dtype)
    k = jax.random.normal(ks[1], (B, NK, H, D)).astype(dtype)
    v = jax.random.normal(ks[2], (B, NK, H, D)).astype(dtype)
    bias = SpaceTimeBias(H, spatial=metric, spatial_scale=1000.0 if metric == "great_circle"
                         else 1.0, temporal=temporal)  # fmt: skip
    qf = bias.features(*_points(ks[3], NQ, metric))
    kf = bias.features(*_points(ks[4], NK, metric))
    mask = jax.random.bernoulli(ks[5], 0.7, (B, NK)).at[1].set(False)  # b=1: no key at all
    spec, weights = bias.bind().native_rbf
    # weights away from their initial values (a = 1 everywhere), some negative
    weights = [
        w * (1.0 + 0.5 * jax.random.normal(jax.random.fold_in(ks[6], i), w.shape))
        for i, w in enumerate(weights)
    ]
    d_out = jax.random.normal(ks[7], (B, NQ, H, D)).astype(dtype)
    return q, k, v, mask, qf, kf, spec, weights, d_out


def _rel_err(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-30))


CASES = {
    # dtype, metric, temporal, blocks, heads per program, tolerance
    "float32-sphere-time": (jnp.float32, "great_circle", True, 16, None, 2e-5),
    "bfloat16-plane": (jnp.bfloat16, "euclidean", False, 16, 1, 3e-2),
    "float32-time-only": (jnp.float32, "none", True, 32, 1, 2e-5),
}


@pytest.mark.parametrize("case", list(CASES))
def test_kernels_match_dense_attention(case):
    dtype, metric, temporal, block, heads, tol = CASES[case]
    q, k, v, mask, qf, kf, spec, weights, d_out = _problem(metric, temporal, dtype)
    opts = {"block_q": block, "block_k": block, "heads_per_block": heads, "interpret": True}

    @jax.jit
    def kernels(q, k, v, weights):
        out, lse = pallas_attention.rbf_attention(q, k, v, mask, qf, kf, spec, weights, **opts)
        delta = jnp.einsum("bqhd,bqhd->bhq", d_out, out, preferred_element_type=jnp.float32)
        grads = pallas_attention_bwd.rbf_attention_bwd(
            q, k, v, mask, qf, kf, spec, weights, d_out, lse, delta, **opts
        )
        return out, lse, grads

    def dense(q, k, v, weights):
        bias_fn = lambda a, b: spec.bias(a, b, *weights)  # noqa: E731
        return dense_attention(q, k, v, bias_fn=bias_fn, q_feats=qf, k_feats=kf, k_mask=mask)

    out, lse, (dq, dk, dv, dw) = kernels(q, k, v, weights)
    want, vjp = jax.vjp(dense, q, k, v, weights)
    want_dq, want_dk, want_dv, want_dw = vjp(d_out)

    assert out.dtype == dtype
    assert out.shape == want.shape
    assert _rel_err(out, want) < tol
    # log-sum-exp of the biased scores; +inf where no key is valid (b = 1)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32) * D**-0.5
    scores = scores + spec.bias(qf, kf, *weights)
    want_lse = jax.nn.logsumexp(jnp.where(mask[:, None, None, :], scores, -jnp.inf), axis=-1)
    assert lse.shape == (B, H, NQ)
    assert bool(jnp.all(lse[1] == jnp.inf))
    np.testing.assert_allclose(lse[0], want_lse[0], rtol=tol, atol=tol)
    assert bool(jnp.all(out[1] == 0))
    for got, ref in ((dq, want_dq), (dk, want_dk), (dv, want_dv)):
        assert got.shape == ref.shape
        assert bool(jnp.all(jnp.isfinite(got)))
        assert _rel_err(got, ref) < tol
    masked = ~mask[:, :, None, None]  # masked keys get no cotangent
    for got in (dk, dv):
        assert bool(jnp.all(jnp.where(masked, got, 0.0) == 0.0))
    assert len(dw) == len(weights) == 2 * ((metric != "none") + temporal)
    for got, ref in zip(dw, want_dw, strict=True):
        assert got.shape == ref.shape
        assert _rel_err(got, ref) < tol


def test_the_arcsine_polynomial_is_the_one_of_the_distances():
    assert pallas_attention.ASIN_RATIO == distance._ASIN_RATIO


def test_environment_switch_and_no_gpu_here(monkeypatch):
    fns = (None, None, SpaceTimeBias(2).spec())
    x = jnp.zeros((1, 4, 2, 16))
    assert not attention_bwd.on_cuda()  # this machine: no NVIDIA GPU
    assert attention_bwd.pallas_spec(fns, x, x, x) is None  # so the dispatch is unchanged
    monkeypatch.setattr(attention_bwd, "on_cuda", lambda: True)
    assert attention_bwd.pallas_spec(fns, x, x, x) is fns[2]
    assert attention_bwd.pallas_spec(fns, x, x, x.astype(jnp.bfloat16)) is None  # mixed
    assert attention_bwd.pallas_spec(fns, x.astype(jnp.float16)) is None
    assert attention_bwd.pallas_spec((None, None), x) is None  # not an RBF bias
    for mode, on in (("auto", True), ("1", True), ("0", False), (" 0 ", False)):
        monkeypatch.setenv("XNP_PALLAS", mode)
        assert pallas_attention.enabled() is on
        assert (attention_bwd.pallas_spec(fns, x) is not None) is on
    monkeypatch.setenv("XNP_PALLAS", "yes")
    with pytest.raises(ConfigError, match="XNP_PALLAS must be"):
        pallas_attention.enabled()
    monkeypatch.delenv("XNP_PALLAS")
    with pytest.raises(ConfigError, match="powers of two"):
        pallas_attention.rbf_attention(x, x, x, jnp.ones((1, 4), bool), {}, {},
                                       fns[2], [], block_q=48)  # fmt: skip


def test_a_cpu_only_process_traces_only_the_branch_that_can_run(monkeypatch):
    traced = []

    def branch(name):
        def fn(x):
            traced.append(name)
            return x + len(name)

        return fn

    x = jnp.ones(2)
    assert dispatch.cpu_only()  # this machine: the CPU alone
    got = jax.jit(lambda x: dispatch.by_platform(x, cpu=branch("cpu"), default=branch("any")))(x)
    assert traced == ["cpu"]
    assert got.tolist() == [4.0, 4.0]
    traced.clear()
    got = dispatch.by_platform(x, cuda=branch("cuda"), default=branch("any"))
    assert traced == ["any"]
    assert got.tolist() == [4.0, 4.0]
    traced.clear()
    monkeypatch.setattr(dispatch, "cpu_only", lambda: False)  # an accelerator: every branch
    got = jax.jit(lambda x: dispatch.by_platform(x, cpu=branch("cpu"), default=branch("any")))(x)
    assert sorted(traced) == ["any", "cpu"]
    assert got.tolist() == [4.0, 4.0]


def _bsa_loss(params, q, k, v, s, t, mask, *, graphdef, attn, feature_grads):
    layer = nnx.merge(graphdef, params)
    qf, kf = layer.features(s[:, :NQ], t[:, :NQ]), layer.features(s[:, NQ:], t[:, NQ:])
    if not feature_grads:
        qf, kf = jax.lax.stop_gradient((qf, kf))
    out = attn(q, k, v, bias_fn=layer.bind(), q_feats=qf, k_feats=kf, k_mask=mask,
               q_chunk=16, k_chunk=16)  # fmt: skip
    return jnp.sum(jnp.sin(out.astype(jnp.float32)))


def _bsa_problem(metric, temporal):
    q, k, v, mask, *_ = _problem(metric, temporal, jnp.float32, seed=3)
    s, t = _points(jax.random.key(4), NQ + NK, metric)
    layer = SpaceTimeBias(H, spatial=metric, spatial_scale=1.0, temporal=temporal)
    graphdef, params = nnx.split(layer)
    return graphdef, params, (q, k, v, s, t, mask)


def test_dispatch_lowers_the_kernels_for_nvidia_gpus(monkeypatch):
    """Lowered for CUDA, BSA's forward and backward are the three Triton kernels."""
    # as on a GPU machine: the dispatch traces every branch and lowering picks one
    monkeypatch.setattr(attention_bwd, "on_cuda", lambda: True)
    monkeypatch.setattr(dispatch, "cpu_only", lambda: False)
    graphdef, params, data = _bsa_problem("great_circle", True)
    for dtype in (jnp.float32, jnp.bfloat16):
        q, k, v = (x.astype(dtype) for x in data[:3])
        for feature_grads, kernels in ((False, 3), (True, 1)):
            loss = functools.partial(
                _bsa_loss, graphdef=graphdef, attn=biased_scan_attention,
                feature_grads=feature_grads,
            )  # fmt: skip
            grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4, 5)))
            lowered = grad.trace(params, q, k, v, *data[3:])
            text = lowered.lower(lowering_platforms=("cuda",)).as_text()
            names = set(re.findall(r'name = "(xnp_rbf_attention[a-z_]*)"', text))
            want = {"xnp_rbf_attention", "xnp_rbf_attention_dkdv", "xnp_rbf_attention_dq"}
            # with features to differentiate, the tiled backward runs (as on the CPU)
            assert names == (want if kernels == 3 else {"xnp_rbf_attention"})
            cpu = lowered.lower(lowering_platforms=("cpu",)).as_text()
            assert "xla.gpu.triton" not in cpu
    monkeypatch.setenv("XNP_PALLAS", "0")
    q, k, v = data[:3]
    loss = functools.partial(_bsa_loss, graphdef=graphdef, attn=biased_scan_attention,
                             feature_grads=False)  # fmt: skip
    text = jax.jit(jax.grad(loss)).trace(params, q, k, v, *data[3:])
    assert "xla.gpu.triton" not in text.lower(lowering_platforms=("cuda",)).as_text()


def test_the_cuda_branch_of_bsa_in_the_interpreter(monkeypatch):
    """BSA with its ``cuda`` branch taken (kernels interpreted) against dense attention.

    Checks the wiring: arguments, cotangent order and dtypes, and the features'
    cotangents (through the tiled backward) when the points need them.
    """
    monkeypatch.setattr(attention_bwd, "on_cuda", lambda: True)
    monkeypatch.setattr(dispatch, "cpu_only", lambda: False)
    for module, name in ((pallas_attention, "rbf_attention"),
                         (pallas_attention_bwd, "rbf_attention_bwd")):  # fmt: skip
        fn = getattr(module, name)
        monkeypatch.setattr(module, name, functools.partial(fn, interpret=True))
    taken = []

    def platform_dependent(*args, default, **branches):
        taken.append("cuda" in branches)
        return branches.get("cuda", default)(*args)

    monkeypatch.setattr(jax.lax, "platform_dependent", platform_dependent)
    graphdef, params, data = _bsa_problem("euclidean", False)
    for feature_grads in (False, True):
        argnums = (0, 1, 2, 3, 4) if feature_grads else (0, 1, 2, 3)
        got, want = (
            jax.jit(jax.value_and_grad(functools.partial(
                _bsa_loss, graphdef=graphdef, attn=attn, feature_grads=feature_grads,
            ), argnums=argnums))(params, *data)
            for attn in (biased_scan_attention, dense_attention)
        )  # fmt: skip
        for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            assert _rel_err(x, y) < 2e-5
    # forward and backward without feature cotangents; forward only with them
    assert taken.count(True) == 3

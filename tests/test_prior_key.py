"""The learned prior key of attention (issue 28, item 3): gated from zero, exact merge."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from xnp.arrays import Points
from xnp.models.bsa_tnp import BSATNP
from xnp.models.config import BSATNPConfig
from xnp.nn.bias import SpaceTimeBias
from xnp.nn.layers import MultiHeadAttention

H, D = 2, 8


def inputs(nq=13, nk=21, seed=0):
    ks = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(ks[0], (2, nq, 16))
    c = jax.random.normal(ks[1], (2, nk, 16))
    sq = jax.random.uniform(ks[2], (2, nq, 2), minval=-20.0, maxval=20.0)
    sk = jax.random.uniform(ks[3], (2, nk, 2), minval=-20.0, maxval=20.0)
    mask = jnp.ones((2, nk), bool).at[0, ::3].set(False).at[1].set(False)  # [1]: no key
    return x, c, sq, sk, mask


@pytest.mark.parametrize("kind", ["bsa", "dense"])
def test_an_open_prior_is_one_more_key_of_the_softmax(kind):
    x, c, sq, sk, mask = inputs()
    mha = MultiHeadAttention(16, H * D, H, 16, kind=kind, q_chunk=8, k_chunk=8,
                             rngs=nnx.Rngs(0), prior=True)  # fmt: skip
    bias = SpaceTimeBias(H, spatial="great_circle", rngs=nnx.Rngs(1))
    qf, kf = bias.features(sq, None), bias.features(sk, None)
    mha.prior_gate = nnx.Param(jnp.ones((H,)))
    mha.prior_c = nnx.Param(jnp.array([0.5, -1.0]))
    mha.prior_v = nnx.Param(jax.random.normal(jax.random.key(7), (H, D)))
    kv = mha.project_kv(c)
    got = mha(x, kv, bias_fn=bias.bind(), q_feats=qf, k_feats=kf, k_mask=mask)

    # by hand: the keys' biased scores and the prior's logit in one softmax
    q = mha._heads(mha.q(x))
    k, v = kv
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D) + bias.bind()(qf, kf)
    s = jnp.where(mask[:, None, None, :], s, -jnp.inf)
    s_p = jnp.einsum("bqhd,hd->bhq", q, mha.prior_k[...]) / np.sqrt(D)
    s_p = s_p + mha.prior_c[...][None, :, None]
    p = jax.nn.softmax(jnp.concatenate([s, s_p[..., None]], axis=-1), axis=-1)
    o = jnp.einsum("bhqk,bkhd->bqhd", p[..., :-1], v)
    o = o + jnp.einsum("bhq,hd->bqhd", p[..., -1], mha.prior_v[...])
    want = mha.out(o.reshape(*o.shape[:2], -1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # with no valid key at all, a query takes the prior's value
    prior_only = jnp.broadcast_to(mha.prior_v[...].reshape(-1), (13, H * D))
    np.testing.assert_allclose(got[1], mha.out(prior_only), atol=1e-5)


@pytest.mark.slow  # a training run: 55-75 s on CI's 2 cores
def test_a_model_given_the_prior_starts_unchanged_and_learns_it():
    cfg = BSATNPConfig.tiny()
    plain = BSATNP(cfg, rngs=nnx.Rngs(0))
    with_prior = BSATNP(cfg.replace(prior_key=True), rngs=nnx.Rngs(0))
    # copy every shared weight: the prior's own parameters are the only difference
    state = dict(nnx.to_flat_state(nnx.state(with_prior, nnx.Param)))
    for path, value in nnx.to_flat_state(nnx.state(plain, nnx.Param)):
        state[path] = value
    nnx.update(with_prior, nnx.from_flat_state(state))
    ks = jax.random.split(jax.random.key(3), 3)
    ctx = Points.from_arrays(s=jax.random.uniform(ks[0], (2, 9, 2), maxval=10.0),
                             f=jax.random.normal(ks[1], (2, 9, 1)))  # fmt: skip
    tgt = Points.from_arrays(s=jax.random.uniform(ks[2], (2, 5, 2), maxval=10.0))
    for a, b in zip(plain(ctx, tgt), with_prior(ctx, tgt), strict=True):
        np.testing.assert_array_equal(a, b)
    # the gates get a gradient, so training can open them
    y = jnp.ones((2, 5, 1))
    grads = nnx.grad(lambda m: m.loss(ctx, tgt, y))(with_prior)
    gate = grads.blocks[0].attn.prior_gate[...]
    assert bool(jnp.isfinite(gate).all())
    assert float(jnp.abs(gate).sum()) > 0
    assert BSATNPConfig.from_dict(cfg.replace(prior_key=True).to_dict()).prior_key
    assert "prior_key" not in {k for k, v in cfg.to_dict().items() if v}  # off by default

"""A GP bank grown by one point per batch entry (placement's fast path) against refactoring."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import xnp.models.bsa_tnp as bsa_tnp
from xnp.arrays import Points
from xnp.errors import ShapeError
from xnp.geo.distance import latlon_to_xyz
from xnp.infer.predictor import Predictor
from xnp.models.bsa_tnp import BSATNP
from xnp.models.config import BSATNPConfig
from xnp.nn import gp_bank, gp_bank_added
from xnp.nn.gp_bank import condition_bank

# each jitted whole: op-by-op dispatch compiles hundreds of small programs per shape
condition = jax.jit(condition_bank, static_argnums=3)
add_point = jax.jit(gp_bank_added.add_point, static_argnums=3)
predict_bank = jax.jit(gp_bank.predict_bank, static_argnums=2)
predict_added = jax.jit(gp_bank_added.predict_added, static_argnums=2)

MEMBERS = (("matern12", 0.1, 0.02), ("matern32", 0.35, 0.1), ("matern52", 1.2, 0.003),
           ("rbf", 0.5, 0.01))  # fmt: skip


def latlon(b, n, seed):
    rng = np.random.default_rng(seed)
    return np.stack([rng.uniform(50.0, 58.0, (b, n)), rng.uniform(-6.0, 2.0, (b, n))], -1)


def xyz(s):
    return np.asarray(latlon_to_xyz(jnp.asarray(s[..., 0]), jnp.asarray(s[..., 1])), np.float32)


def base_and_union(n=14, pad=4, batch=5, seed=0):
    """A padded base context, one new point per batch entry, and the unions."""
    rng = np.random.default_rng(seed)
    x = np.zeros((1, n + pad, 3), np.float32)
    x[0, :n] = xyz(latlon(1, n, seed))[0]
    y = np.zeros((1, n + pad), np.float32)
    y[0, :n] = rng.normal(size=n)
    mask = np.arange(n + pad)[None] < n
    x_new, y_new = xyz(latlon(1, batch, seed + 1))[0], rng.normal(size=batch).astype(np.float32)
    union = [np.concatenate([np.repeat(a, batch, 0), b[:, None]], 1)
             for a, b in ((x, x_new), (y, y_new), (mask, np.ones(batch, bool)))]  # fmt: skip
    return (x, y, mask), (x_new, y_new), union


def test_grown_bank_matches_conditioning_on_each_union():
    (x, y, mask), (x_new, y_new), (xu, yu, mu) = base_and_union()
    base, _ = condition(jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask), MEMBERS)
    state, feats = add_point(base, jnp.asarray(x_new), jnp.asarray(y_new), MEMBERS)
    ell = jnp.broadcast_to(base.lengthscale, (len(x_new), len(MEMBERS)))
    ref, want = condition(jnp.asarray(xu), jnp.asarray(yu), jnp.asarray(mu), MEMBERS,
                               lengthscale=ell)  # fmt: skip
    # two float32 routes to the same numbers: a member with a long lengthscale and a
    # small nugget (matern52, 1.2, 0.003) is the worst conditioned
    np.testing.assert_allclose(feats, want, atol=1e-3)
    assert not np.asarray(feats[:, 14:18]).any()  # the base's padding stays zero
    shared = np.repeat(xyz(latlon(1, 9, 7)), len(x_new), 0)
    each = xyz(latlon(len(x_new), 9, 8))
    for targets in (shared, each):  # one set for the batch (computed once) or one each
        got = predict_added(state, jnp.asarray(targets), MEMBERS)
        np.testing.assert_allclose(got, predict_bank(ref, jnp.asarray(targets), MEMBERS),
                                   rtol=3e-3, atol=2e-3)  # fmt: skip


def test_holding_the_lengthscale_moves_a_large_context_little():
    (x, y, mask), (x_new, y_new), (xu, yu, mu) = base_and_union(n=200, pad=0, batch=8, seed=3)
    base, _ = condition(jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask), MEMBERS)
    state, _ = add_point(base, jnp.asarray(x_new), jnp.asarray(y_new), MEMBERS)
    true, _ = condition(jnp.asarray(xu), jnp.asarray(yu), jnp.asarray(mu), MEMBERS)
    ratio = np.asarray(true.lengthscale / base.lengthscale)
    assert np.all(np.abs(ratio - 1.0) < 0.01)  # one point in 201 moves the spread < 1 %
    targets = jnp.asarray(np.repeat(xyz(latlon(1, 50, 9)), 8, 0))
    means = [
        np.asarray(p)[..., : len(MEMBERS)]
        for p in (predict_added(state, targets, MEMBERS), predict_bank(true, targets, MEMBERS))
    ]
    assert np.abs(means[0] - means[1]).max() < 0.02  # standardised units (measured: 0.005)


def banked_model():
    return BSATNP(BSATNPConfig.tiny(gp_bank=MEMBERS), rngs=nnx.Rngs(0))


@nnx.jit
def grown(model, base, added, targets):
    """The model's predictions at ``targets`` from ``base`` grown by ``added``."""
    return model.predict(model.condition_added(base, added), targets)


def points_of(s, f=None):
    return Points.from_arrays(s=jnp.asarray(s, jnp.float32),
                              f=None if f is None else jnp.asarray(f, jnp.float32))  # fmt: skip


def test_model_condition_added_is_condition_of_the_unions(monkeypatch):
    model = banked_model()
    rng = np.random.default_rng(1)
    s_base, s_new, s_tgt = latlon(1, 11, 2), latlon(4, 1, 3), latlon(1, 7, 4)
    f_base, f_new = rng.normal(size=(1, 11, 1)), rng.normal(size=(4, 1, 1))
    base, added = points_of(s_base, f_base), points_of(s_new, f_new)
    targets = points_of(np.repeat(s_tgt, 4, 0))
    got = grown(model, base, added, targets)
    # the reference: each union conditioned as a whole, the bank's lengthscale the base's
    held = condition(jnp.asarray(xyz(s_base)), jnp.asarray(f_base[..., 0], jnp.float32),
                          jnp.ones((1, 11), bool), MEMBERS)[0].lengthscale  # fmt: skip
    monkeypatch.setattr(bsa_tnp, "condition_bank", functools.partial(
        condition_bank, lengthscale=jnp.broadcast_to(held, (4, len(MEMBERS)))))  # fmt: skip
    union = points_of(np.concatenate([np.repeat(s_base, 4, 0), s_new], 1),
                      np.concatenate([np.repeat(f_base, 4, 0), f_new], 1))  # fmt: skip
    want = nnx.jit(lambda m, c, t: m.predict(m.condition(c), t))(model, union, targets)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-4)
    with pytest.raises(ShapeError, match="one point per batch entry"):
        model.condition_added(base, points_of(latlon(4, 2, 5), np.zeros((4, 2, 1))))


@pytest.mark.parametrize("bank", [MEMBERS, ()])
def test_predictor_condition_added_pads_the_base_and_agrees(bank):
    model = BSATNP(BSATNPConfig.tiny(gp_bank=bank), rngs=nnx.Rngs(0))
    predictor = Predictor(model, chunk_size=64)
    rng = np.random.default_rng(5)
    base = points_of(latlon(1, 37, 6), rng.normal(size=(1, 37, 1)))  # padded to 64 inside
    added = points_of(latlon(3, 1, 7), rng.normal(size=(3, 1, 1)))
    targets = points_of(np.repeat(latlon(1, 20, 8), 3, 0))
    got = predictor.predict_state(predictor.condition_added(base, added), targets)
    want = grown(model, base, added, targets)
    # the padded base changes the float32 order of the worst-conditioned member's
    # solves (matern52 at 1.2 of the spread, nugget 0.003): close, not bitwise
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-3)
    # the slow reference: each union conditioned whole (the bank with its own lengthscales)
    ref = predictor.predict_state(predictor.condition_added(base, added, refactor=True), targets)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, atol=0.05 if bank else 2e-4)
    with pytest.raises(ShapeError, match="one real point per batch entry"):
        predictor.condition_added(base, points_of(latlon(3, 2, 9), np.zeros((3, 2, 1))))


def test_an_ill_conditioned_member_stays_accurate_in_float32():
    # a smooth member with a small nugget on 200 points (condition number ~4e4): without
    # refining u = A k, the Schur complement s lost its digits (mean error 0.09)
    (x, y, mask), (x_new, y_new), (xu, yu, _) = base_and_union(n=200, pad=0, batch=4, seed=3)
    member = (("matern52", 1.2, 0.003),)
    base, _ = condition(jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask), member)
    state, _ = add_point(base, jnp.asarray(x_new), jnp.asarray(y_new), member)
    targets = np.repeat(xyz(latlon(1, 30, 9)), 4, 0)
    got = np.asarray(predict_added(state, jnp.asarray(targets), member))[..., 0]
    ell = float(base.lengthscale[0, 0])

    def corr(a, b):
        r = np.sqrt(5.0) * np.linalg.norm(a[:, None].astype(np.float64) - b[None], axis=-1) / ell
        return (1.0 + r + r * r / 3.0) * np.exp(-r)

    for b in range(4):
        k = corr(xu[b], xu[b]) + 0.003 * np.eye(len(xu[b]))
        want = corr(targets[b], xu[b]) @ np.linalg.solve(k, yu[b].astype(np.float64))
        np.testing.assert_allclose(got[b], want, atol=0.01)  # measured: 0.0014

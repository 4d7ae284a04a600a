"""The GP bank a BSA-TNP can read (issue 28): exact features, padding, unchanged at zero."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from xnp.arrays import Points
from xnp.errors import ConfigError
from xnp.geo.distance import latlon_to_xyz
from xnp.models.bsa_tnp import BSATNP, with_bank_members, with_zero_inputs
from xnp.models.config import BSATNPConfig
from xnp.nn.gp_bank import KINDS, condition_bank, exact_features, predict_bank

MEMBERS = (("matern12", 0.1, 0.02), ("matern32", 0.35, 0.1), ("matern52", 1.2, 0.003),
           ("rbf", 0.5, 0.01))  # fmt: skip


def points(b, n, seed):
    rng = np.random.default_rng(seed)
    lat, lon = rng.uniform(40.0, 50.0, (b, n)), rng.uniform(-5.0, 5.0, (b, n))
    return np.stack([lat, lon], -1)


def test_features_match_the_float64_reference_with_padding():
    s_c, s_t = points(2, 12, 0), points(2, 5, 1)
    x_c, x_t = (np.asarray(latlon_to_xyz(s[..., 0], s[..., 1])) for s in (s_c, s_t))
    y = np.random.default_rng(2).normal(size=(2, 12)).astype(np.float32)
    mask = np.ones((2, 12), bool)
    mask[1, 7:] = False
    y_padded = np.where(mask, y, 1e3)  # padding values must not matter
    state, ctx = condition_bank(jnp.asarray(x_c), jnp.asarray(y_padded), jnp.asarray(mask),
                                MEMBERS)  # fmt: skip
    tgt = predict_bank(state, jnp.asarray(x_t), MEMBERS)
    assert ctx.shape == (2, 12, 2 * len(MEMBERS))
    assert tgt.shape == (2, 5, 2 * len(MEMBERS))
    for b in range(2):
        m = mask[b]
        want_ctx, want_tgt = exact_features(x_c[b][m], y[b][m], x_t[b], MEMBERS)
        np.testing.assert_allclose(np.asarray(ctx[b])[m], want_ctx, atol=1e-4)
        # float32 against float64: the log std of a member with a small nugget is the
        # least accurate feature (a difference of two numbers near 1)
        np.testing.assert_allclose(np.asarray(tgt[b]), want_tgt, atol=1e-3)
    assert not np.asarray(ctx[1, 7:]).any()  # padding's features are zero


def test_features_do_not_depend_on_the_size_of_the_region():
    s = points(1, 10, 3)
    y = jnp.asarray(np.random.default_rng(4).normal(size=(1, 10)), jnp.float32)
    feats = []
    for shrink in (0.1, 0.02):  # the same layout at the equator, five times smaller
        s_k = (s - np.array([45.0, 0.0])) * shrink
        x = latlon_to_xyz(jnp.asarray(s_k[..., 0]), jnp.asarray(s_k[..., 1]))
        _, f = condition_bank(x, y, jnp.ones((1, 10), bool), MEMBERS)
        feats.append(np.asarray(f))
    np.testing.assert_allclose(feats[0], feats[1], atol=2e-3)


def tiny(bank=()):
    return BSATNPConfig.tiny(gp_bank=bank)


def same_predictions(a, b, seed: int) -> tuple[Points, Points]:
    """Check that models ``a`` and ``b`` predict alike on a random task; return the task."""
    ctx = Points.from_arrays(s=jnp.asarray(points(2, 9, seed + 2), jnp.float32),
                             f=jax.random.normal(jax.random.key(seed), (2, 9, 1)))  # fmt: skip
    tgt = Points.from_arrays(s=jnp.asarray(points(2, 6, seed + 3), jnp.float32))
    for x, y in zip(a(ctx, tgt), b(ctx, tgt), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-6)
    return ctx, tgt


def test_a_model_given_a_bank_at_zero_predicts_as_before_and_learns_it():
    plain = BSATNP(tiny(), rngs=nnx.Rngs(0))
    cfg = tiny(MEMBERS)
    banked = BSATNP(cfg, rngs=nnx.Rngs(0))
    graphdef, _ = nnx.split(banked)
    _, params = nnx.split(plain)
    wide = with_zero_inputs(params, cfg.dim_obs_embed + cfg.dim_x, 2 * len(MEMBERS))
    for a, b in zip(jax.tree.leaves(wide), jax.tree.leaves(with_bank_members(params, (), cfg)),
                    strict=True):  # fmt: skip
        np.testing.assert_array_equal(a, b)  # a first bank is members appended to none
    banked = nnx.merge(graphdef, wide)
    ctx, tgt = same_predictions(plain, banked, seed=3)
    # targets are independent given the context: any chunks give the same values
    state = nnx.jit(lambda m, c: m.condition(c))(banked, ctx)
    predict = nnx.jit(lambda m, st, t: m.predict(st, t))
    whole = predict(banked, state, tgt)
    parts = [predict(banked, state, Points.from_arrays(s=tgt.s[:, i : i + 3])) for i in (0, 3)]
    for k in range(2):
        np.testing.assert_allclose(
            whole[k], jnp.concatenate([p[k] for p in parts], axis=1), atol=1e-6
        )
    # the bank's input rows get a gradient, so training can use them
    grads = nnx.jit(nnx.grad(lambda m: m.loss(ctx, tgt, jnp.ones((2, 6, 1)))))(banked)
    rows = grads.embed.layers[0].kernel[...][cfg.dim_obs_embed : cfg.dim_obs_embed + 8]
    assert bool(jnp.isfinite(rows).all())
    assert float(jnp.abs(rows).sum()) > 0


def test_members_appended_to_a_bank_start_at_zero():
    small = tiny(MEMBERS[:2])
    large = tiny(MEMBERS)
    start = BSATNP(small, rngs=nnx.Rngs(0))
    _, params = nnx.split(start)
    graphdef, _ = nnx.split(BSATNP(large, rngs=nnx.Rngs(1)))
    widened = nnx.merge(graphdef, with_bank_members(params, small.gp_bank, large))
    same_predictions(start, widened, seed=4)
    # the old members' rows are where the larger bank reads them: means, then log stds
    kernel = lambda p: np.asarray(p["embed"]["layers"][0]["kernel"])  # noqa: E731
    old, new = kernel(params), kernel(nnx.split(widened)[1])
    at = small.dim_obs_embed + small.dim_x
    np.testing.assert_array_equal(new[at : at + 2], old[at : at + 2])  # old means
    np.testing.assert_array_equal(new[at + 4 : at + 6], old[at + 2 : at + 4])  # old log stds
    assert not new[at + 2 : at + 4].any()  # new means
    assert not new[at + 6 : at + 8].any()  # new log stds
    assert with_bank_members(params, small.gp_bank, small) is params
    with pytest.raises(ConfigError, match="not the start"):
        with_bank_members(params, MEMBERS[1:3], large)


def test_the_bank_is_configured_checked_and_saved():
    cfg = tiny([["rbf", 1, 0.01]])  # lists, as JSON gives them back
    assert cfg.gp_bank == (("rbf", 1.0, 0.01),)
    assert BSATNPConfig.from_dict(cfg.to_dict()) == cfg
    assert tiny().gp_bank == ()
    # the config's own list of kernels (kept free of jax) is the bank's
    assert tuple(tiny([[kind, 1.0, 0.01]]).gp_bank[0][0] for kind in KINDS) == KINDS
    with pytest.raises(ConfigError, match="gp_bank must be"):
        tiny((("gaussian", 1.0, 0.01),))
    with pytest.raises(ConfigError, match="gp_bank must be"):
        tiny((("rbf", -1.0, 0.01),))
    with pytest.raises(ConfigError, match="gp_bank must be"):
        tiny((("rbf", 1.0),))  # no nugget
    with pytest.raises(ConfigError, match="one output variable"):
        BSATNPConfig.tiny(gp_bank=(("rbf", 1.0, 0.01),), dim_y=2)
    with pytest.raises(ConfigError, match="spatial bias"):
        BSATNPConfig.tiny(gp_bank=(("rbf", 1.0, 0.01),), spatial_bias="none")

"""Fitted GP members (lengthscale, mean and amplitude per context) against the numpy reference."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from xnp.arrays import Points
from xnp.errors import ConfigError
from xnp.geo.distance import latlon_to_xyz
from xnp.infer.predictor import Predictor
from xnp.models.bsa_tnp import BSATNP, with_zero_inputs
from xnp.models.config import BSATNPConfig
from xnp.nn.gp_bank_fit import condition_fitted, exact_fit, grow_fitted, predict_fitted

FITTED = (("matern12", 0.05), ("rbf", 0.01))
FRACTIONS = (0.1, 0.2, 0.4, 0.8, 1.6)


def latlon(b, n, seed):
    rng = np.random.default_rng(seed)
    return np.stack([rng.uniform(50.0, 58.0, (b, n)), rng.uniform(-6.0, 2.0, (b, n))], -1)


def xyz(s):
    return np.asarray(latlon_to_xyz(jnp.asarray(s[..., 0]), jnp.asarray(s[..., 1])), np.float32)


def smooth_values(s, seed):
    """A smooth field with a non-zero mean and amplitude, so that the fit has work to do."""
    rng = np.random.default_rng(seed)
    lat, lon = s[..., 0], s[..., 1]
    return (2.0 + 1.5 * np.sin(lat / 2.0 + rng.uniform()) * np.cos(lon / 3.0)
            + 0.02 * rng.normal(size=lat.shape)).astype(np.float32)  # fmt: skip


def test_fitted_members_match_the_float64_reference_and_ignore_padding():
    n, pad = 30, 6
    s = latlon(1, n, 0)
    y = smooth_values(s, 1)
    x = np.zeros((1, n + pad, 3), np.float32)
    x[0, :n] = xyz(s)[0]
    yy = np.zeros((1, n + pad), np.float32)
    yy[0, :n] = y[0]
    mask = np.arange(n + pad)[None] < n
    xt = xyz(latlon(1, 11, 2))
    state, feats = condition_fitted(jnp.asarray(x), jnp.asarray(yy), jnp.asarray(mask),
                                    FITTED, FRACTIONS)  # fmt: skip
    at_targets = predict_fitted(state, jnp.asarray(xt), FITTED)
    assert not np.asarray(feats[0, n:]).any()  # padding stays zero
    for i, (kind, nugget) in enumerate(FITTED):
        ref = exact_fit(x[0, :n], y[0], xt[0], kind, nugget, FRACTIONS)
        lengthscale = float(state.bank.lengthscale[0, i])
        spread = float(np.sqrt(np.mean(np.sum((x[0, :n] - x[0, :n].mean(0)) ** 2, 1))))
        np.testing.assert_allclose(lengthscale, ref["fraction"] * spread, rtol=1e-4)
        np.testing.assert_allclose(state.shift[0, i], ref["shift"], atol=1e-3)
        np.testing.assert_allclose(state.scale[0, i], ref["scale"], rtol=1e-3)
        np.testing.assert_allclose(state.evidence[0, i], ref["evidence"], atol=2e-3)
        got_c = np.stack([feats[0, :n, i], feats[0, :n, len(FITTED) + i]], -1)
        got_t = np.stack([at_targets[0, :, i], at_targets[0, :, len(FITTED) + i]], -1)
        np.testing.assert_allclose(got_c, ref["context"], atol=2e-3)
        np.testing.assert_allclose(got_t, ref["target"], atol=2e-3)
        np.testing.assert_allclose(at_targets[0, :, 2 * len(FITTED) + i], ref["evidence"],
                                   atol=2e-3)  # fmt: skip
    # the smooth kernel fits the smooth field better than the rough one
    assert float(state.evidence[0, 1]) > float(state.evidence[0, 0])
    # the fit reads the values' mean and amplitude: shifting and scaling the values
    # shifts and scales the predictions
    moved, _ = condition_fitted(jnp.asarray(x), jnp.asarray(3.0 * yy - 5.0), jnp.asarray(mask),
                                FITTED, FRACTIONS)  # fmt: skip
    np.testing.assert_allclose(predict_fitted(moved, jnp.asarray(xt), FITTED)[0, :, :2],
                               3.0 * at_targets[0, :, :2] - 5.0, atol=5e-3)  # fmt: skip


def test_one_observation_keeps_unit_amplitude():
    x = jnp.asarray(xyz(latlon(1, 1, 3)))
    state, feats = condition_fitted(x, jnp.asarray([[0.7]]), jnp.ones((1, 1), bool),
                                    FITTED, FRACTIONS)  # fmt: skip
    np.testing.assert_allclose(state.scale, 1.0, rtol=1e-5)  # the prior's
    np.testing.assert_allclose(state.shift, 0.7, rtol=1e-5)
    assert np.isfinite(np.asarray(feats)).all()


def test_grown_fitted_members_match_conditioning_each_union_with_the_fit_held():
    n, batch = 20, 4
    s = latlon(1, n, 4)
    x, y = jnp.asarray(xyz(s)), jnp.asarray(smooth_values(s, 5))
    mask = jnp.ones((1, n), bool)
    x_new = jnp.asarray(xyz(latlon(1, batch, 6))[0])
    y_new = jnp.asarray(np.random.default_rng(7).normal(2.0, 1.0, batch).astype(np.float32))
    base, _ = condition_fitted(x, y, mask, FITTED, FRACTIONS)
    grown, feats = grow_fitted(base, x_new, y_new, FITTED)
    xt = jnp.asarray(np.repeat(xyz(latlon(1, 7, 8)), batch, 0))
    got = predict_fitted(grown, xt, FITTED)
    # the reference: the members conditioned on each union, their fit the base's
    from xnp.nn.gp_bank import condition_bank, predict_bank

    xu = jnp.concatenate([jnp.repeat(x, batch, 0), x_new[:, None]], 1)
    yu = jnp.concatenate([jnp.repeat(y, batch, 0), y_new[:, None]], 1)
    values = (yu[:, None] - base.shift[..., None]) / base.scale[..., None]
    members = tuple((k, 1.0, g) for k, g in FITTED)
    ell = jnp.broadcast_to(base.bank.lengthscale, (batch, len(FITTED)))
    ref, ref_feats = condition_bank(xu, values, jnp.ones((batch, n + 1), bool), members, ell)
    f = len(FITTED)
    want = predict_bank(ref, xt, members)
    np.testing.assert_allclose(got[..., :f], base.shift[:, None] + base.scale[:, None]
                               * want[..., :f], atol=2e-3)  # fmt: skip
    np.testing.assert_allclose(got[..., f:2 * f], jnp.log(base.scale)[:, None] + want[..., f:],
                               atol=2e-3)  # fmt: skip
    np.testing.assert_allclose(feats[..., :f], base.shift[:, None] + base.scale[:, None]
                               * ref_feats[..., :f], atol=2e-3)  # fmt: skip


def tiny(**kw):
    return BSATNPConfig.tiny(gp_bank=(("matern52", 0.5, 0.01),), **kw)


def points(s, f=None):
    f = np.zeros((*s.shape[:2], 1), np.float32) if f is None else f
    return Points.from_arrays(s=jnp.asarray(s, jnp.float32), f=jnp.asarray(f))


def test_model_with_fitted_members_widens_from_zero_and_grows_like_its_reference():
    rng = np.random.default_rng(9)
    small = BSATNP(tiny(), rngs=nnx.Rngs(0))
    cfg = tiny(gp_fit=FITTED, gp_fit_fractions=FRACTIONS)
    graphdef, params = nnx.split(BSATNP(cfg, rngs=nnx.Rngs(0)))
    _, small_params = nnx.split(small)
    offset = cfg.dim_obs_embed + cfg.dim_x + 2 * len(cfg.gp_bank)
    widened = with_zero_inputs(small_params, offset, 3 * len(FITTED))
    big = nnx.merge(graphdef, widened)
    ctx = points(latlon(2, 25, 10), rng.normal(size=(2, 25, 1)).astype(np.float32))
    tgt = points(latlon(2, 9, 11))
    for a, b in zip(big(ctx, tgt), small(ctx, tgt), strict=True):  # step 0 unchanged
        np.testing.assert_allclose(a, b, atol=1e-5)
    # a trained-looking model (the new rows random) grows its context by one point
    # as conditioning each union with the fit held does (placement's fast path)
    big = nnx.merge(graphdef, params)
    predictor = Predictor(big, chunk_size=64)
    base = points(latlon(1, 37, 12), rng.normal(size=(1, 37, 1)).astype(np.float32))
    added = points(latlon(3, 1, 13), rng.normal(size=(3, 1, 1)).astype(np.float32))
    targets = points(np.repeat(latlon(1, 20, 14), 3, 0))
    fast = predictor.predict_state(predictor.condition_added(base, added), targets)
    slow = predictor.predict_state(predictor.condition_added(base, added, refactor=True), targets)
    for a, b in zip(fast, slow, strict=True):  # refactoring refits: close, not equal
        assert np.isfinite(np.asarray(a)).all()
        np.testing.assert_allclose(a, b, atol=0.05)
    direct = big.predict(big.condition_added(base, added), targets)
    for a, b in zip(fast, direct, strict=True):  # the predictor's padding: float32 order only
        np.testing.assert_allclose(a, b, atol=1e-3)


def test_fitted_members_config_is_checked():
    with pytest.raises(ConfigError, match="gp_fit must be"):
        BSATNPConfig.tiny(gp_fit=(("cubic", 0.1),))
    with pytest.raises(ConfigError, match="gp_fit_fractions"):
        BSATNPConfig.tiny(gp_fit=FITTED, gp_fit_fractions=())
    with pytest.raises(ConfigError, match="gp_fit needs a spatial bias"):
        BSATNPConfig.tiny(gp_fit=FITTED, spatial_bias="none")
    cfg = tiny(gp_fit=FITTED)
    assert BSATNPConfig.from_dict(cfg.to_dict()) == cfg

"""Fitted GP members (lengthscale, mean and amplitude per context) against the numpy reference."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import xnp.models.bsa_tnp as bsa_tnp
from xnp.arrays import Points
from xnp.errors import ConfigError
from xnp.geo.distance import latlon_to_xyz
from xnp.models.bsa_tnp import BSATNP, with_fit_members
from xnp.models.config import BSATNPConfig
from xnp.nn.gp_bank import condition_bank, predict_bank
from xnp.nn.gp_bank_fit import (
    _subset,
    bank_inputs,
    exact_fit,
    fit_context,
    split_features,
)

BANK = (("matern52", 0.5, 0.01),)
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


def both(x, y, mask, xt):
    """Context and target features of BANK and FITTED conditioned together."""
    fit = fit_context(x, y, mask, FITTED, FRACTIONS)
    members, ell, values = bank_inputs(x, y, mask, BANK, FITTED, fit)
    state, feats = condition_bank(x, values, mask, members, ell)
    ctx = split_features(feats, len(BANK), fit, mask)
    return fit, ctx, split_features(predict_bank(state, xt, members), len(BANK), fit)


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
    fit, ctx, tgt = both(jnp.asarray(x), jnp.asarray(yy), jnp.asarray(mask), jnp.asarray(xt))
    assert ctx.shape == (1, n + pad, 2 * len(BANK) + 3 * len(FITTED))
    assert not np.asarray(ctx[0, n:]).any()  # padding stays zero
    # the bank's own features are those of the bank alone
    _, alone = condition_bank(jnp.asarray(x), jnp.asarray(yy), jnp.asarray(mask), BANK)
    np.testing.assert_allclose(ctx[..., : 2 * len(BANK)], alone, atol=1e-5)
    spread = float(np.sqrt(np.mean(np.sum((x[0, :n] - x[0, :n].mean(0)) ** 2, 1))))
    f, off = len(FITTED), 2 * len(BANK)
    for i, (kind, nugget) in enumerate(FITTED):
        ref = exact_fit(x[0, :n], y[0], xt[0], kind, nugget, FRACTIONS)
        np.testing.assert_allclose(fit.lengthscale[0, i], ref["fraction"] * spread, rtol=1e-4)
        np.testing.assert_allclose(fit.shift[0, i], ref["shift"], atol=1e-3)
        np.testing.assert_allclose(fit.scale[0, i], ref["scale"], rtol=1e-3)
        np.testing.assert_allclose(fit.evidence[0, i], ref["evidence"], atol=2e-3)
        for got, want in ((ctx[0, :n], ref["context"]), (tgt[0], ref["target"])):
            pair = np.stack([got[:, off + i], got[:, off + f + i]], -1)
            np.testing.assert_allclose(pair, want, atol=2e-3)
            np.testing.assert_allclose(got[:, off + 2 * f + i], ref["evidence"], atol=2e-3)
    # the smooth kernel fits the smooth field better than the rough one
    assert float(fit.evidence[0, 1]) > float(fit.evidence[0, 0])
    # the fit reads the values' mean and amplitude: shifting and scaling the values
    # shifts and scales the fitted members' predictions
    _, _, moved = both(jnp.asarray(x), jnp.asarray(3.0 * yy - 5.0), jnp.asarray(mask),
                       jnp.asarray(xt))  # fmt: skip
    np.testing.assert_allclose(moved[0, :, off : off + f], 3.0 * tgt[0, :, off : off + f] - 5.0,
                               atol=5e-3)  # fmt: skip


def test_one_observation_keeps_the_prior_amplitude():
    x = jnp.asarray(xyz(latlon(1, 1, 3)))
    fit, ctx, tgt = both(x, jnp.asarray([[0.7]]), jnp.ones((1, 1), bool), x)
    np.testing.assert_allclose(fit.scale, 1.0, rtol=1e-5)
    np.testing.assert_allclose(fit.shift, 0.7, rtol=1e-5)
    assert np.isfinite(np.asarray(ctx)).all()
    assert np.isfinite(np.asarray(tgt)).all()


def test_search_subset_spreads_over_the_context_order():
    n_slots, size = 300, 64
    mask = np.zeros((2, n_slots), bool)
    mask[0, :250] = True  # padded at the end
    mask[1, ::3] = True  # holes (100 real points)
    x = np.broadcast_to(np.arange(n_slots, dtype=np.float32)[None, :, None], (2, n_slots, 3))
    y = np.broadcast_to(np.arange(n_slots, dtype=np.float32)[None], (2, n_slots))
    _xs, ys, keep = _subset(jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask), size)
    assert keep.shape == (2, size)
    assert bool(keep.all())
    picked = np.asarray(ys)
    assert mask[0, picked[0].astype(int)].all()
    assert mask[1, picked[1].astype(int)].all()
    assert picked[0, 0] == 0
    assert picked[0, -1] > 240
    assert picked[1, -1] > 280
    assert len(set(picked[1])) == size
    few = np.arange(n_slots)[None] < 20  # fewer real points than the subset: all of them
    _, ys, keep = _subset(jnp.asarray(x[:1]), jnp.asarray(y[:1]), jnp.asarray(few), size)
    assert int(keep.sum()) == 20
    assert set(np.asarray(ys)[keep]) == set(range(20))


def tiny(**kw):
    return BSATNPConfig.tiny(gp_bank=BANK, **kw)


def points(s, f=None):
    f = np.zeros((*s.shape[:2], 1), np.float32) if f is None else f
    return Points.from_arrays(s=jnp.asarray(s, jnp.float32), f=jnp.asarray(f))


def test_model_with_fitted_members_widens_from_zero_and_grows_like_its_reference(monkeypatch):
    rng = np.random.default_rng(9)
    small = BSATNP(tiny(), rngs=nnx.Rngs(0))
    cfg = tiny(gp_fit=FITTED, gp_fit_fractions=FRACTIONS)
    graphdef, params = nnx.split(BSATNP(cfg, rngs=nnx.Rngs(0)))
    _, small_params = nnx.split(small)
    big = nnx.merge(graphdef, with_fit_members(small_params, cfg))
    with pytest.raises(ConfigError, match="without fitted members"):
        with_fit_members(params, cfg)  # already has them
    ctx = points(latlon(2, 25, 10), rng.normal(size=(2, 25, 1)).astype(np.float32))
    tgt = points(latlon(2, 9, 11))
    # each call jitted whole: op-by-op dispatch would compile hundreds of small programs
    call = nnx.jit(lambda m, c, t: m(c, t))
    # step 0 unchanged (the two programs fuse differently: float32 rounding only)
    for a, b in zip(call(big, ctx, tgt), call(small, ctx, tgt), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)
    # a model whose new rows are not zero grows its context by one point as
    # conditioning each union does with the base's fit and lengthscales held
    big = nnx.merge(graphdef, params)
    base = points(latlon(1, 37, 12), rng.normal(size=(1, 37, 1)).astype(np.float32))
    added = points(latlon(3, 1, 13), rng.normal(size=(3, 1, 1)).astype(np.float32))
    targets = points(np.repeat(latlon(1, 20, 14), 3, 0))
    fast = nnx.jit(lambda m, b, a, t: m.predict(m.condition_added(b, a), t))(
        big, base, added, targets
    )
    held = big.condition(base)
    fit = held.fit
    bank_ell = held.gp.lengthscale[:, : len(BANK)]
    monkeypatch.setattr(bsa_tnp, "fit_context", lambda *a: type(fit)(
        *(jnp.broadcast_to(v, (3, v.shape[1])) for v in
          (fit.lengthscale, fit.shift, fit.scale, fit.evidence))))  # fmt: skip

    def bank_inputs_held(*args):
        members, ell, values = bank_inputs(*args)
        return (
            members,
            ell.at[:, : len(BANK)].set(jnp.broadcast_to(bank_ell, (3, len(BANK)))),
            values,
        )

    monkeypatch.setattr(bsa_tnp, "bank_inputs", bank_inputs_held)
    grow = lambda a, b: np.concatenate([np.repeat(np.asarray(a), 3, 0), np.asarray(b)], 1)  # noqa: E731
    union = points(grow(base.s, added.s), grow(base.f, added.f))
    slow = nnx.jit(lambda m, c, t: m.predict(m.condition(c), t))(big, union, targets)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-3)


def test_fitted_members_config_is_checked():
    with pytest.raises(ConfigError, match="gp_fit must be"):
        BSATNPConfig.tiny(gp_fit=(("cubic", 0.1),))
    with pytest.raises(ConfigError, match="gp_fit_fractions"):
        BSATNPConfig.tiny(gp_fit=FITTED, gp_fit_fractions=())
    with pytest.raises(ConfigError, match="gp_fit needs a spatial bias"):
        BSATNPConfig.tiny(gp_fit=FITTED, spatial_bias="none")
    cfg = tiny(gp_fit=FITTED)
    assert BSATNPConfig.from_dict(cfg.to_dict()) == cfg

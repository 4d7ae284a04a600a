"""Joint samples by autoregressive sampling (issue 30, item 2)."""

import numpy as np
import pytest
import xarray as xr

import xnp
from xnp.errors import ConfigError
from xnp.geo.distance import latlon_to_xyz

LENGTHSCALE_KM, NOISE, STD = 600.0, 0.05, 5.0


@pytest.fixture(scope="module")
def field():
    return make_field()


def make_field():
    """A small GP field (known kernel), 8 context cells and 10 neighbouring targets."""
    ds = xnp.datasets.gp_sphere(n_lat=8, n_lon=8, n_time=1, lat_range=(44, 52),
                                lon_range=(-4, 4), lengthscale_km=LENGTHSCALE_KM,
                                noise=NOISE, std=STD, seed=5).isel(time=0)  # fmt: skip
    lat, lon = np.meshgrid(ds.lat.values, ds.lon.values, indexing="ij")
    s = np.stack([lat.ravel(), lon.ravel()], -1)
    f = ds.field.values.ravel()
    context = np.random.default_rng(0).permutation(len(s))[:8]
    rest = np.setdiff1d(np.arange(len(s)), context)
    targets = rest[np.argsort(np.abs(s[rest, 0] - 48.0) + np.abs(s[rest, 1]))[:10]]
    return s, f, context, targets


def points(s, f, idx, values=True):
    ds = xr.Dataset(coords={"lat": ("p", s[idx, 0]), "lon": ("p", s[idx, 1])})
    if values:
        ds["field"] = ("p", f[idx], {"units": "K"})
    return ds


def posterior_correlation(s, context, targets):
    """Correlation matrix of the exact GP posterior of the (noisy) values at the targets."""
    xyz = np.asarray(latlon_to_xyz(s[:, 0], s[:, 1]), np.float64) * 6371.0

    def k(a, b):
        d2 = ((xyz[a][:, None] - xyz[b][None]) ** 2).sum(-1)
        return np.exp(-d2 / (2 * LENGTHSCALE_KM**2))

    noise = NOISE**2
    k_cc = k(context, context) + noise * np.eye(len(context))
    k_tc = k(targets, context)
    post = k(targets, targets) + noise * np.eye(len(targets))
    post -= k_tc @ np.linalg.solve(k_cc, k_tc.T)
    return post / np.sqrt(np.outer(np.diag(post), np.diag(post)))


def correlation_error(samples, truth):
    """Mean absolute difference of the off-diagonal correlations."""
    emp = np.corrcoef(samples.T)
    off = ~np.eye(len(truth), dtype=bool)
    return float(np.abs(emp - truth)[off].mean())


def test_samples_carry_the_posterior_correlations(field):
    """gp-sphere's joint samples against the exact GP posterior of the generating kernel.

    Tolerance: a mean absolute error of the correlation matrix below 0.2 (the
    posterior's correlations reach ±0.6 here), and below that of independent draws
    from the marginals (one step for all targets), which ignore the correlations.
    200 samples: the Monte Carlo error of one correlation is about 0.07.
    """
    s, f, context, targets = field
    model = xnp.pretrained("gp-sphere")
    truth = posterior_correlation(s, context, targets)
    # the field is a zero-mean GP: no trend, whose shared error would add correlation
    joint = xnp.predict(model, points(s, f, context), points(s, f, targets, False),
                        samples=200, sample_step=1, seed=1, trend="none")  # fmt: skip
    independent = xnp.predict(model, points(s, f, context), points(s, f, targets, False),
                              samples=200, sample_step=len(targets), seed=1,
                              trend="none")  # fmt: skip
    assert joint.field_samples.dims == ("sample", "p")
    assert joint.field_samples.attrs["units"] == "K"
    error = correlation_error(joint.field_samples.values, truth)
    assert error < 0.2
    assert error < correlation_error(independent.field_samples.values, truth) - 0.03


def test_one_step_samples_follow_the_marginals(field):
    s, f, context, targets = field
    model = xnp.pretrained("gp-sphere")
    out = xnp.predict(model, points(s, f, context), points(s, f, targets, False),
                      samples=300, sample_step=len(targets), seed=2, trend="linear")  # fmt: skip
    draws = out.field_samples.values
    std = out.field_std.values
    # 300 draws: the sample mean is within 4 standard errors, the spread within 20 %
    assert np.all(np.abs(draws.mean(0) - out.field_mean.values) < 4 * std / np.sqrt(300))
    np.testing.assert_allclose(draws.std(0), std, rtol=0.2)


def test_samples_are_reproducible_and_checked(field):
    s, f, context, targets = field
    model = xnp.pretrained("gp-sphere")
    ctx, tgt = points(s, f, context), points(s, f, targets, False)
    a = xnp.predict(model, ctx, tgt, samples=3, sample_step=4, seed=7)
    b = xnp.predict(model, ctx, tgt, samples=3, sample_step=4, seed=7)
    np.testing.assert_array_equal(a.field_samples, b.field_samples)
    assert np.isfinite(a.field_samples).all()
    for bad in ({"samples": 0}, {"samples": 2.5}, {"sample_step": 0}, {"seed": -1}):
        with pytest.raises(ConfigError):
            xnp.predict(model, ctx, tgt, **{"samples": 2, **bad})
    with pytest.raises(ConfigError, match="chunks"):
        xnp.predict(model, ctx, tgt, samples=2, chunks={"p": 5})
    with pytest.raises(ConfigError, match="context_radius"):
        xnp.predict(model, ctx, tgt, samples=2, context_radius="2000km")

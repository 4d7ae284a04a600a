"""Synthetic GP tasks for pretraining: regional fields on the sphere."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xnp.data.synthetic import SphereFieldTasks, matern_kernel, sample_sphere_fields
from xnp.errors import ConfigError
from xnp.geo import great_circle_distance
from xnp.geo.distance import latlon_to_xyz

# one compiled sampler per task spec (called eagerly, each of its many small operations
# compiles on its own: 15-25 s a test on two cores)
sample_sphere_fields = jax.jit(
    sample_sphere_fields, static_argnames=("tasks", "batch_size", "return_params")
)


@pytest.fixture(scope="module")
def batch():
    tasks = SphereFieldTasks(n_context=(20, 40), n_target=30, cap_km=(300.0, 300.0))
    return sample_sphere_fields(jax.random.key(1), tasks, batch_size=6)


def test_points_lie_in_a_cap_of_the_drawn_radius(batch):
    ctx, tgt, _ = batch
    for b in range(6):
        s = np.concatenate([np.asarray(ctx.s[b]), np.asarray(tgt.s[b])])
        d = great_circle_distance(s[:, None, 0], s[:, None, 1], s[None, :, 0], s[None, :, 1])
        assert float(jnp.max(d)) <= 2 * 300.0 + 1.0  # diameter of the cap
        assert float(jnp.max(d)) > 300.0  # and it is filled, not a point


def test_context_is_standardised_by_its_own_statistics(batch):
    ctx, _, y = batch
    f, m = np.asarray(ctx.f[..., 0]), np.asarray(ctx.mask)
    assert (m.sum(1) >= 20).all()
    assert (m.sum(1) <= 40).all()
    for b in range(6):
        np.testing.assert_allclose(f[b][m[b]].mean(), 0.0, atol=1e-4)
        np.testing.assert_allclose(f[b][m[b]].std(), 1.0, atol=1e-3)
    assert np.isfinite(np.asarray(y)).all()


def test_kernels_are_correlations_and_positive_definite():
    x = jax.random.normal(jax.random.key(0), (50, 3))
    x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
    for nu in ("matern12", "matern32", "matern52", "rbf"):
        k = matern_kernel(x, x, 0.5, nu)
        np.testing.assert_allclose(np.diag(k), 1.0, atol=1e-5)
        assert float(jnp.linalg.eigvalsh(k).min()) > -1e-4
    with pytest.raises(ConfigError, match="unknown kernel"):
        matern_kernel(x, x, 1.0, "cubic")
    with pytest.raises(ConfigError, match="kernels"):
        SphereFieldTasks(kernels=("cubic",))
    with pytest.raises(ConfigError, match="cap_km"):
        SphereFieldTasks(cap_km=(0.0, 10.0))


@pytest.mark.parametrize("kernel", ["matern12", "rbf"])
def test_fourier_fields_have_the_kernel_covariance(kernel):
    from xnp.data.synthetic import _fourier_field

    tasks = SphereFieldTasks(kernels=(kernel,), method="fourier", n_features=128)
    x = jax.random.normal(jax.random.key(3), (12, 3))
    x = x / jnp.linalg.norm(x, axis=1, keepdims=True)
    ell = jnp.float32(0.6)
    draw = jax.jit(jax.vmap(lambda k: _fourier_field(k, x, ell, jnp.int32(0), tasks)))
    f = draw(jax.random.split(jax.random.key(4), 8_000))
    empirical = f.T @ f / f.shape[0]
    np.testing.assert_allclose(empirical, matern_kernel(x, x, ell, kernel), atol=0.05)


def test_fourier_tasks_sample_like_cholesky_tasks():
    fourier = SphereFieldTasks(n_context=(8, 16), n_target=12, method="fourier", n_features=64)
    ctx, tgt, y = sample_sphere_fields(jax.random.key(0), fourier, batch_size=2)
    assert ctx.s.shape == (2, 16, 2)
    assert tgt.s.shape == (2, 12, 2)
    assert np.isfinite(np.asarray(y)).all()
    with pytest.raises(ConfigError, match="method"):
        SphereFieldTasks(method="spectral")


def test_trend_and_step_are_added_to_the_same_stationary_draw():
    base = SphereFieldTasks(n_context=(60, 60), n_target=40, method="fourier", n_features=64)
    key = jax.random.key(3)

    def noiseless(tasks):  # the field at the targets, in its own units, and the targets
        _, tgt, _, p = sample_sphere_fields(key, tasks, batch_size=4, return_params=True)
        f = np.asarray(p["f_target"] * p["scale"][:, None] + p["mean"][:, None], np.float64)
        return f, np.asarray(latlon_to_xyz(tgt.s[..., 0], tgt.s[..., 1]), np.float64), p

    plain, xyz, p0 = noiseless(base)
    trend, _, p1 = noiseless(dataclasses.replace(base, trend=2.0))
    step, _, _ = noiseless(dataclasses.replace(base, step=1.0))
    # same cap, kernel and lengthscale: the stationary draw is unchanged
    np.testing.assert_array_equal(p0["lengthscale"], p1["lengthscale"])
    np.testing.assert_array_equal(p0["kernel"], p1["kernel"])
    for b in range(4):
        # the trend is linear in the position, and not zero
        added = trend[b] - plain[b]
        coef, *_ = np.linalg.lstsq(xyz[b], added, rcond=None)
        np.testing.assert_allclose(xyz[b] @ coef, added, atol=1e-3 * np.abs(added).max())
        assert np.abs(added).max() > 1e-3
        # the step takes two values (one side of the line, the other)
        assert len(np.unique(np.round(step[b] - plain[b], 4))) <= 2
    with pytest.raises(ConfigError, match="non-negative"):
        SphereFieldTasks(trend=-1.0)


def test_clustered_context_designs_leave_targets_and_the_stationary_draw_alone():
    base = SphereFieldTasks(n_context=(200, 200), n_target=50, cap_km=(1000.0, 1000.0),
                            method="fourier", n_features=64)  # fmt: skip
    key = jax.random.key(5)
    ctx0, tgt0, _, p0 = sample_sphere_fields(key, base, batch_size=8, return_params=True)
    tasks = dataclasses.replace(base, cluster=8.0)
    ctx1, tgt1, _, p1 = sample_sphere_fields(key, tasks, batch_size=8, return_params=True)
    # targets, cap, kernel and lengthscale are the stationary draw's
    np.testing.assert_array_equal(tgt0.s, tgt1.s)
    np.testing.assert_array_equal(p0["lengthscale"], p1["lengthscale"])
    assert not np.array_equal(ctx0.s, ctx1.s)

    def nn_km(ctx, tgt, b):  # distance from each target to its nearest context point
        d = great_circle_distance(tgt.s[b, :, None, 0], tgt.s[b, :, None, 1],
                                  ctx.s[b, None, :, 0], ctx.s[b, None, :, 1])  # fmt: skip
        return np.asarray(d).min(axis=1)

    for b in range(8):
        # every context point stays in the cap (within 2 radii of every target)
        d = great_circle_distance(tgt1.s[b, :, None, 0], tgt1.s[b, :, None, 1],
                                  ctx1.s[b, None, :, 0], ctx1.s[b, None, :, 1])  # fmt: skip
        assert float(np.asarray(d).max()) <= 2000.0 + 1.0
        assert len(np.unique(np.asarray(ctx1.s[b]), axis=0)) == 200  # without replacement
    # clustered designs leave gaps: targets lie farther from the nearest station
    uniform = np.mean([nn_km(ctx0, tgt0, b) for b in range(8)])
    clustered = np.mean([nn_km(ctx1, tgt1, b) for b in range(8)])
    assert clustered > 1.25 * uniform, (clustered, uniform)
    with pytest.raises(ConfigError, match="non-negative"):
        SphereFieldTasks(cluster=float("nan"))


def test_gp_sphere_dataset_checks_its_arguments():
    from xnp.datasets import gp_sphere

    ds = gp_sphere(n_lat=np.int64(4), n_lon=6, n_time=2)  # numpy integers are integers
    assert ds.field.shape == (2, 4, 6)
    for bad, match in (
        ({"lat_range": (80.0, 120.0)}, "lat_range"),
        ({"lon_range": (0.0, 400.0)}, "lon_range"),
        ({"noise": float("nan")}, "noise"),
        ({"lengthscale_km": float("inf")}, "lengthscale_km"),
        ({"n_lat": True}, "n_lat"),
        ({"n_lat": 200, "n_lon": 200}, "at most 10,000 grid points"),  # 40,000² kernel
        ({"n_time": 10_000}, "5,000 times"),
    ):
        with pytest.raises(ConfigError, match=match):
            gp_sphere(**({"n_lat": 4, "n_lon": 6, "n_time": 2} | bad))

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from flax import nnx

from xnp.arrays import Points
from xnp.data.synthetic import GPTasks
from xnp.errors import ConfigError, ShapeError, XnpWarning
from xnp.models.swin_tnp import SwinTNP, SwinTNPConfig
from xnp.nn.layers import count_params
from xnp.testing import (
    Jitted,
    check_beats_trivial_predictor,
    check_chunked_prediction,
    check_context_permutation_invariance,
    check_padding_is_inert,
    random_points,
)

BOX = ((-2.0, 2.0), (-2.0, 2.0))
PLANE = SwinTNPConfig.tiny(geometry="plane", extent=BOX, dim_x=1)
# global 6 × 16 grid: latitude is not a window multiple (padded), longitude wraps
SPHERE = SwinTNPConfig.tiny(grid_shape=(6, 16), embed_t=True)
PLANE_TE = SwinTNPConfig.tiny(
    geometry="plane", extent=BOX, translation_equivariant=True, grid_anchor="context"
)
SPHERE_TE = SPHERE.replace(translation_equivariant=True, embed_t=False)


@pytest.fixture(scope="module")
def plane_model():
    return Jitted(SwinTNP(PLANE, rngs=nnx.Rngs(0)))


@pytest.fixture(scope="module")
def sphere_model():
    return Jitted(SwinTNP(SPHERE, rngs=nnx.Rngs(1)))


def plane_data(key=0):
    ctx = random_points(jax.random.key(key), 2, 60, dim_x=1, mask_frac=0.8, time=True, box=1.5)
    tgt = random_points(jax.random.key(key + 1), 2, 25, dim_x=1, time=True, box=1.5)
    return ctx, tgt


def sphere_data(key=2):
    ctx = random_points(jax.random.key(key), 2, 60, sphere=True, time=True, box=1.5)
    tgt = random_points(jax.random.key(key + 1), 2, 25, sphere=True, time=True, box=1.5)
    return ctx, tgt


def test_paper_configs_have_paper_parameter_counts():
    # paper, Table 3 and Table 12: Swin-TNP PT-GE 32×32 GP 1.32M; stations 64×128
    # 2.29M (the paper embeds lat/lon with 100 spherical harmonics, we use 99
    # Fourier features); Swin-TNP(T) stations 1.20M
    for cfg, paper in (
        (SwinTNPConfig.gp2d(), 1.32e6),
        (SwinTNPConfig(), 2.29e6),
        (SwinTNPConfig(translation_equivariant=True), 1.20e6),
    ):
        n = count_params(nnx.eval_shape(lambda c=cfg: SwinTNP(c, rngs=nnx.Rngs(0))))
        assert abs(n - paper) / paper < 0.04, (cfg.grid_shape, n)


def test_tiny_preset_is_tiny():
    assert 1_000 < count_params(SwinTNP(SwinTNPConfig.tiny(), rngs=nnx.Rngs(0))) < 20_000


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"n_heads": 3}, "divisible"),
        ({"n_layers": 0}, "positive integer"),
        ({"geometry": "torus"}, "geometry"),
        ({"dim_s": 3}, "dim_s"),
        ({"shift": (4, 2)}, "shift"),
        ({"grid_shape": (8, 10)}, "multiple"),
        ({"extent": ((-100.0, 90.0), (-180.0, 180.0))}, "extent"),
        ({"grid_anchor": "context"}, "plane"),
        ({"min_std": 1.5}, "min_std"),
    ],
)
def test_config_validation(changes, match):
    with pytest.raises(ConfigError, match=match):
        SwinTNPConfig.tiny(**changes)


def test_config_json_round_trip():
    cfg = SwinTNPConfig.gp2d(window=(8, 8), shift=(4, 4), embed_hidden=(64, 32))
    assert SwinTNPConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.wrap == (False, False)
    assert SwinTNPConfig().wrap == (False, True)
    with pytest.raises(ConfigError, match="unknown"):
        SwinTNPConfig.from_dict({"n_blocks": 3})


def test_wrong_point_dims_raise(plane_model):
    ctx, tgt = plane_data()
    model = plane_model.merge(plane_model.params)
    with pytest.raises(ShapeError, match="dim_x"):
        model(ctx.replace(x=jnp.zeros((2, 60, 3))), tgt)
    with pytest.raises(ShapeError, match="dim_f"):
        model(ctx.replace(f=jnp.zeros((2, 60, 2))), tgt)


def test_a_chunked_targets_equal_one_shot(sphere_model):
    ctx, tgt = sphere_data()
    mean, std = check_chunked_prediction(sphere_model, ctx, tgt, cuts=range(0, 25, 5))
    assert bool(jnp.isfinite(mean).all())
    assert bool((std > 0).all())
    np.testing.assert_allclose(sphere_model(ctx, tgt)[0], mean, atol=1e-6)


def test_b_padding_changes_nothing_and_gets_no_gradient(plane_model):
    junk = random_points(jax.random.key(9), 2, 20, dim_x=1, time=True, box=1.5)
    check_padding_is_inert(plane_model, *plane_data(), junk.replace(f=junk.f * 100))


def test_c_context_permutation_invariance_and_empty_context(plane_model):
    ctx, tgt = plane_data()
    check_context_permutation_invariance(plane_model, ctx, tgt)
    mean, std = plane_model(ctx.replace(mask=jnp.zeros_like(ctx.mask)), tgt)
    assert bool(jnp.isfinite(mean).all())
    assert bool((std > 0).all())


def test_d_longitude_wraps_across_the_dateline():
    # one Swin layer on a global 6 × 32 grid (11.25° cells): a context point just
    # east of the dateline reaches targets just west of it, but not beyond a few
    # windows (locality)
    cfg = SwinTNPConfig.tiny(grid_shape=(6, 32), n_layers=1)
    model = Jitted(SwinTNP(cfg, rngs=nnx.Rngs(4)))
    ctx = Points.from_arrays(s=jnp.array([[[10.0, 179.0], [-60.0, 0.0]]]), f=jnp.ones((1, 2, 1)))
    tgt = Points.from_arrays(s=jnp.array([[[10.0, -179.0], [10.0, -160.0], [10.0, 0.0]]]))

    def mean(f):
        return model(ctx.replace(f=f), tgt)[0][0, :, 0]

    jac = jnp.abs(jax.jit(jax.jacobian(mean))(ctx.f)[:, 0, :, 0])  # [target, context]
    assert float(jac[0, 0]) > 1e-4  # across the dateline
    assert float(jac[1, 0]) > 1e-4
    assert float(jac[2, 0]) == 0.0  # 180° away


def test_e_equivariant_variant_invariant_to_whole_cell_shifts_plane():
    model = Jitted(SwinTNP(PLANE_TE, rngs=nnx.Rngs(2)))
    ctx = random_points(jax.random.key(3), 2, 60, box=1.5, time=True)
    tgt = random_points(jax.random.key(4), 2, 25, box=1.5, time=True)
    shift = jnp.array([1.5, -1.0])[None, None]  # (3, -2) cells of 0.5
    move = lambda p: p.replace(s=p.s + shift)  # noqa: E731
    mean, std = model(ctx, tgt)
    mean_s, std_s = model(move(ctx), move(tgt))
    np.testing.assert_allclose(mean_s, mean, atol=1e-4)
    np.testing.assert_allclose(std_s, std, atol=1e-4)
    # the non-equivariant model sees absolute positions
    plain = Jitted(SwinTNP(PLANE_TE.replace(translation_equivariant=False), rngs=nnx.Rngs(2)))
    assert float(jnp.abs(plain(move(ctx), move(tgt))[0] - plain(ctx, tgt)[0]).max()) > 1e-3


def test_f_equivariant_variant_invariant_to_whole_cell_longitude_shifts_sphere():
    model = Jitted(SwinTNP(SPHERE_TE, rngs=nnx.Rngs(3)))
    ctx, tgt = sphere_data(11)
    shift = jnp.array([0.0, 4 * 22.5])[None, None]  # 4 cells: a whole window
    move = lambda p: p.replace(s=p.s + shift)  # noqa: E731
    mean, std = model(ctx, tgt)
    mean_s, std_s = model(move(ctx), move(tgt))
    np.testing.assert_allclose(mean_s, mean, atol=1e-4)
    np.testing.assert_allclose(std_s, std, atol=1e-4)


@pytest.mark.slow  # a training run: 55-75 s on CI's 2 cores
def test_g_training_beats_the_trivial_predictor():
    # 2-D GP fields on [-2, 2]², lengthscale ~ Beta(7, 3), 64–128 context points
    tasks = GPTasks(
        dims=2, n_context=(64, 128), n_target=64, domain=(-2.0, 2.0), lengthscale=(7.0, 3.0)
    )
    cfg = SwinTNPConfig.tiny(geometry="plane", extent=BOX)
    check_beats_trivial_predictor(SwinTNP(cfg, rngs=nnx.Rngs(0)), tasks, batch_size=8)


@pytest.mark.slow  # a training run: 55-75 s on CI's 2 cores
def test_preset_grid_fits_regional_data_and_stays_global_for_global_data(tmp_path):
    from strategies import grid_dataset, station_dataset

    import xnp
    from xnp.api.sizes import swin_grid_for
    from xnp.data import SpatialTasks

    base = SwinTNPConfig()
    glat, glon = np.meshgrid(np.arange(-88.0, 90, 4), np.arange(-180.0, 180, 4))
    assert swin_grid_for(base, glat, glon) == base  # global data: the global grid
    # across the date line: kept global (the regional grid does not wrap)
    assert swin_grid_for(base, np.array([10.0, 20.0]), np.array([175.0, -175.0])) == base
    st = station_dataset(n_stations=40, seed=1)
    cfg = swin_grid_for(base, st.lat.values, st.lon.values)
    (lat0, lat1), (lon0, lon1) = cfg.extent
    assert lat0 < st.lat.min()
    assert lat1 > st.lat.max()
    assert lon0 < st.lon.min()
    assert lon1 > st.lon.max()
    assert all(
        n % w == 0 and n <= m
        for n, w, m in zip(cfg.grid_shape, cfg.window, (64, 128), strict=False)
    )
    # through fit (with validation): a preset name gets the data's domain
    ds = grid_dataset(nt=6, ny=6, nx=9)
    model = ds.np.fit(
        "t2m", model="swin-tnp-tiny", tasks=SpatialTasks(), steps=2, batch_size=2,
        progress=False, validation=0.34, config=xnp.TrainConfig(log_every=1, validate_every=2),
    )  # fmt: skip
    assert type(model.config).__name__ == "SwinTNPConfig"
    assert np.isfinite(model.history_.val_nll.values[-1])
    (lat0, lat1), (lon0, lon1) = model.config.extent
    assert lat0 < 50.0
    assert lat1 > 55.0
    assert lon0 < -3.0
    assert lon1 > 5.0
    assert lat1 - lat0 < 10
    out = ds.isel(time=0).np.predict(model)
    assert np.isfinite(out.t2m_mean).all()
    # saved, loaded and predicted lazily: the same numbers
    model.save(tmp_path / "swin")
    lazy = ds.isel(time=0).np.predict(xnp.load(tmp_path / "swin"), chunks={"lat": 4})
    xr.testing.assert_allclose(lazy.compute(), out, atol=1e-4)
    # outside the regional grid there are no pseudo-tokens: refused, not put on edge cells
    far = {"lat": np.array([52.0]), "lon": np.array([0.0, 120.0])}
    with pytest.raises(ConfigError, match="1 of 2 target points lie outside the model's grid"):
        ds.isel(time=0).np.predict(model, far)
    moved = ds.isel(time=0).assign_coords(lon=ds.lon + 100.0)
    mixed = xr.concat([ds.isel(time=0), moved], dim="lon")
    with pytest.warns(XnpWarning, match="context point.*outside the model's grid"):
        inside = mixed.np.predict(model, ds.isel(time=0).drop_vars("t2m"))
    xr.testing.assert_allclose(inside, out, atol=1e-5)


def test_regional_sphere_grid_across_the_antimeridian_takes_either_convention():
    model = SwinTNP(SwinTNPConfig.tiny(extent=((-20.0, 20.0), (160.0, 200.0))), rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    cs = np.stack([rng.uniform(-20, 20, 60), rng.uniform(181, 199, 60)], -1)[None]
    ts = np.stack([rng.uniform(-20, 20, 20), rng.uniform(181, 199, 20)], -1)[None]
    f = rng.normal(size=(1, 60, 1))

    call = jax.jit(lambda c, t: model(c, t))  # one compile for the three runs

    def run(c, t):
        return np.asarray(call(Points.from_arrays(s=c, f=f), Points.from_arrays(s=t))[0])

    east = run(cs, ts)
    np.testing.assert_allclose(run(cs - [0, 360], ts), east, atol=1e-5)
    np.testing.assert_allclose(run(cs, ts - [0, 360]), east, atol=1e-5)

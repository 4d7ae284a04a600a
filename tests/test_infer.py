import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from xnp.arrays import Points
from xnp.errors import ConfigError, EmptyDataError
from xnp.geo import great_circle_distance
from xnp.geo.sphere import unit_vectors
from xnp.infer import Predictor, chunk_size_for_budget, compact_chunks
from xnp.infer.regional import bounding_cap, merge_small_groups
from xnp.models.bsa_tnp import BSATNP
from xnp.models.config import BSATNPConfig
from xnp.units import parse_bytes, parse_distance_km

CFG = BSATNPConfig.tiny(q_chunk=64, k_chunk=64)


def sphere_points(key, n, *, lat=(40.0, 60.0), lon=(-20.0, 20.0), values=True):
    k1, k2, k3 = jax.random.split(jax.random.key(key), 3)
    s = jnp.stack(
        [
            jax.random.uniform(k1, (1, n), minval=lat[0], maxval=lat[1]),
            jax.random.uniform(k2, (1, n), minval=lon[0], maxval=lon[1]),
        ],
        -1,
    )
    f = jax.random.normal(k3, (1, n, 1)) if values else None
    return Points.from_arrays(s=s, f=f)


@pytest.fixture(scope="module")
def model():
    return BSATNP(CFG, rngs=nnx.Rngs(0))


def test_chunked_equals_one_shot_and_compiles_once(model):
    ctx, tgt = sphere_points(0, 150), sphere_points(1, 300, values=False)
    ref_mean, ref_std = jax.jit(lambda c, t: model(c, t))(ctx, tgt)
    pred = Predictor(model, chunk_size=64)
    before = pred._predict._cache_size()
    mean, std = pred.predict(ctx, tgt)
    np.testing.assert_allclose(mean, ref_mean, atol=1e-5)
    np.testing.assert_allclose(std, ref_std, atol=1e-5)
    assert pred._predict._cache_size() - before <= 1  # 5 chunks (last padded), ≤ 1 compile


def test_tight_chunks_pad_to_eight_and_predict_the_same(model):
    ctx, tgt = sphere_points(4, 40), sphere_points(5, 201, values=False)
    pred = Predictor(model, chunk_size=512)
    assert pred._padded_size(201) == 256
    assert pred._padded_size(201, tight=True) == 208
    state = pred.condition(ctx)
    for a, b in zip(pred.predict_state(state, tgt), pred.predict_state(state, tgt, tight=True),
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_huge_radius_regional_equals_exact(model):
    ctx, tgt = sphere_points(2, 120), sphere_points(3, 200, values=False)
    pred = Predictor(model, chunk_size=64)
    exact = pred.predict(ctx, tgt)
    regional = pred.predict(ctx, tgt, context_radius_km="25000km")
    np.testing.assert_allclose(regional[0], exact[0], atol=1e-5)
    np.testing.assert_allclose(regional[1], exact[1], atol=1e-5)


def test_regional_chunks_see_every_context_point_within_radius(model):
    ctx, tgt = sphere_points(4, 400), sphere_points(5, 256, values=False)
    radius = 300.0
    plan = Predictor(model, chunk_size=64).regional_plan(ctx, tgt, radius)
    assert np.array_equal(np.sort(np.concatenate([t for t, _ in plan])), np.arange(tgt.size))
    for t_idx, c_idx in plan:
        d = great_circle_distance(
            tgt.s[0, t_idx, 0][:, None],
            tgt.s[0, t_idx, 1][:, None],
            ctx.s[0, :, 0][None],
            ctx.s[0, :, 1][None],
        )
        needed = set(np.flatnonzero(np.asarray(d.min(0)) <= radius))
        assert needed <= set(c_idx)
        assert c_idx.size < ctx.size  # really regional: a subset


def test_batched_regional_equals_each_chunk_on_its_own(model):
    """The fast path (chunks padded, batched, fused, XLA options for small calls)
    against the slow reference: one unpadded model call per chunk of the plan."""
    ctx, tgt = sphere_points(11, 400), sphere_points(12, 700, values=False)
    pred = Predictor(model, chunk_size=64, regional_points=512)
    mean, std = pred.predict(ctx, tgt, context_radius_km=300)
    plan = pred.regional_plan(ctx, tgt, 300)
    assert len({c.size for _, c in plan}) > 3  # several context sizes, padded and batched
    call = jax.jit(lambda c, t: model(c, t))
    # the reference compiles once per chunk shape: check the smallest and largest
    # context, one between and the short last chunk rather than all eleven
    by_size = sorted(plan, key=lambda tc: (len(tc[0]), tc[1].size))
    picked = {id(tc): tc for tc in (by_size[0], by_size[len(by_size) // 2], by_size[-1])}
    picked |= {id(tc): tc for tc in plan if len(tc[0]) < max(len(t) for t, _ in plan)}
    for t_idx, c_idx in picked.values():
        sub = jax.tree.map(lambda a, i=c_idx: a[:, i], ctx)
        ref_mean, ref_std = call(sub, jax.tree.map(lambda a, i=t_idx: a[:, i], tgt))
        np.testing.assert_allclose(mean[:, t_idx], ref_mean, atol=1e-5)
        np.testing.assert_allclose(std[:, t_idx], ref_std, atol=1e-5)


def test_rare_shapes_join_a_common_one():
    groups = {(128, 128): [0, 1], (192, 128): list(range(2, 80)), (384, 256): [80]}
    merged = merge_small_groups(groups, minimum=64)
    assert sorted(merged) == [(192, 128), (384, 256)]  # nothing is large enough for 384
    assert sorted(merged[(192, 128)]) == list(range(80))


def test_empty_context_and_radius_errors(model):
    tgt = sphere_points(6, 10, values=False)
    empty = sphere_points(7, 5).replace(mask=jnp.zeros((1, 5), bool))
    pred = Predictor(model, chunk_size=16)
    with pytest.raises(EmptyDataError, match="no valid point"):
        pred.predict(empty, tgt)
    far = sphere_points(8, 20, lat=(-60.0, -50.0))
    with pytest.raises(EmptyDataError, match="within 100 km"):
        pred.predict(far, tgt, context_radius_km="100km")


def test_budget_bounds_the_compiled_memory():
    cfg = BSATNPConfig(q_chunk=256, k_chunk=256)
    budget = parse_bytes("256MiB")
    n = chunk_size_for_budget(cfg, budget)
    assert n >= 256
    model = BSATNP(cfg, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    ctx = sphere_points(9, 512)
    state = jax.jit(lambda p, c: nnx.merge(graphdef, p).condition(c))(params, ctx)
    tgt = sphere_points(10, n, values=False)
    fn = jax.jit(lambda p, st, t: nnx.merge(graphdef, p).predict(st, t))
    temp = fn.lower(params, state, tgt).compile().memory_analysis().temp_size_in_bytes
    assert temp <= budget, (n, temp / 2**20)
    with pytest.raises(ConfigError, match="too small"):
        chunk_size_for_budget(cfg, parse_bytes("1MiB"))


def test_parsers():
    assert parse_bytes("2GB") == 2_000_000_000
    assert parse_distance_km("1.5 km") == 1.5
    with pytest.raises(ConfigError, match="memory size"):
        parse_bytes("lots")
    with pytest.raises(ConfigError, match="distance"):
        parse_distance_km("far")
    with pytest.raises(ConfigError, match="positive"):
        parse_distance_km(0.0)
    with pytest.raises(ConfigError, match="memory size"):
        parse_bytes("1.2.3GB")
    with pytest.raises(ConfigError, match="distance"):
        parse_distance_km("1.2.3km")


def test_distances_as_people_write_them():
    # units in capitals, scientific notation and spelt-out units are distances too
    assert parse_distance_km("500 KM") == parse_distance_km("500 kilometres") == 500.0
    assert parse_distance_km("1e6 m") == parse_distance_km("1E3km") == 1000.0
    assert parse_distance_km("250 meters") == 0.25
    assert parse_distance_km(np.int64(3)) == 3.0
    with pytest.raises(ConfigError, match="not True"):  # a flag, not 1 km
        parse_distance_km(True)
    with pytest.raises(ConfigError, match="distance"):
        parse_distance_km("500 miles")


def test_compact_chunks_partition_the_points_into_small_caps():
    rng = np.random.default_rng(0)
    s = np.stack([rng.uniform(-80, 80, 5000), rng.uniform(-180, 180, 5000)], -1)
    unit = unit_vectors(s)
    chunks = compact_chunks(unit, 512)
    np.testing.assert_array_equal(np.sort(np.concatenate(chunks)), np.arange(5000))
    sizes = sorted(len(c) for c in chunks)
    assert sizes[1:] == [512] * (len(chunks) - 1)  # one compiled shape (and one remainder)
    # compact: 512 of 5000 points spread over the globe cover about a tenth of it
    assert max(bounding_cap(unit[c])[1] for c in chunks) < 1.2  # radians; a tenth-area cap is 0.64
    narrow = compact_chunks(unit, 4096, 500.0, min_size=32)
    np.testing.assert_array_equal(np.sort(np.concatenate(narrow)), np.arange(5000))
    for c in narrow:
        assert len(c) <= 32 or bounding_cap(unit[c])[1] * 6371.0 <= 500.0


def test_chunks_are_balanced_not_mostly_padding(model):
    # 300 targets, at most 128 per chunk: three chunks of 100 padded to 128 rather
    # than 128 + 128 + 44 padded to 128; 60 targets fit one chunk of 64
    pred = Predictor(model, chunk_size=128)
    assert pred._padded_size(300) == 128
    assert pred._padded_size(60) == 64
    big = Predictor(model, chunk_size=86_016)
    assert big._padded_size(100_000) == 50_176  # two chunks, 0.4 % padding
    assert big._padded_size(1_000_000) == 83_968  # twelve chunks, none short
    ctx, tgt = sphere_points(0, 150), sphere_points(1, 300, values=False)
    ref_mean, _ = jax.jit(lambda c, t: model(c, t))(ctx, tgt)
    np.testing.assert_allclose(pred.predict(ctx, tgt)[0], ref_mean, atol=1e-5)


def test_regional_plan_edges_padding_and_bad_input(model):
    from xnp.geo.distance import EARTH_RADIUS_KM

    predictor = Predictor(model, chunk_size=64)
    # a context point exactly at the radius is within it (float32 positions, metre accuracy)
    context = Points.from_arrays(s=np.array([[[0.0, -2.7], [0.0, 1.0]]], np.float32),
                                 f=np.ones((1, 2, 1)))  # fmt: skip
    radius = np.deg2rad(np.float64(np.float32(2.7))) * EARTH_RADIUS_KM
    ((_, near),) = predictor.regional_plan(
        context, Points.from_arrays(s=np.zeros((1, 1, 2), np.float32)), radius
    )
    assert near.tolist() == [0, 1]
    # masked (padding) targets take no part: anywhere, they change nothing
    ctx = sphere_points(1, 200)
    real = sphere_points(2, 50, values=False)
    padded = Points.from_arrays(
        s=np.concatenate([np.asarray(real.s), np.zeros((1, 30, 2))], 1),
        mask=np.r_[np.ones(50, bool), np.zeros(30, bool)][None],
    )
    alone = predictor.predict(ctx, real, context_radius_km=300)[0]
    with_pad = predictor.predict(ctx, padded, context_radius_km=300)[0][:, :50]
    np.testing.assert_allclose(with_pad, alone, atol=1e-6)
    # a masked NaN never reaches the outputs; a real one is an xnp error
    f = np.asarray(ctx.f).copy()
    f[0, 7] = np.nan
    mask = np.ones((1, 200), bool)
    mask[0, 7] = False
    clean = predictor.predict(ctx.replace(mask=jnp.asarray(mask)), real)[0]
    hidden = predictor.predict(ctx.replace(f=jnp.asarray(f), mask=jnp.asarray(mask)), real)[0]
    np.testing.assert_allclose(hidden, clean, atol=1e-6)
    with pytest.raises(ConfigError, match="missing"):
        predictor.predict(ctx.replace(f=jnp.asarray(f)), real)
    bad = np.asarray(real.s).copy()
    bad[0, 3, 0] = np.nan
    with pytest.raises(ConfigError, match="missing"):
        predictor.predict(ctx, real.replace(s=jnp.asarray(bad)), context_radius_km=300)
    # a planar model has no great-circle radius
    plane = Predictor(BSATNP(BSATNPConfig.tiny(spatial_bias="euclidean"), rngs=nnx.Rngs(0)))
    with pytest.raises(ConfigError, match="planar"):
        plane.predict(ctx, real, context_radius_km=300)

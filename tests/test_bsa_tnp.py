import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from xnp.data.synthetic import GPTasks
from xnp.errors import ConfigError, ShapeError
from xnp.models.bsa_tnp import BSATNP
from xnp.models.config import BSATNPConfig
from xnp.nn.layers import count_params
from xnp.testing import (
    Jitted,
    check_beats_trivial_predictor,
    check_chunked_prediction,
    check_context_permutation_invariance,
    check_padding_is_inert,
    check_targets_independent,
    random_points,
)

EUCLID = BSATNPConfig.tiny(spatial_bias="euclidean", spatial_scale=1.0)
SPHERE = BSATNPConfig.tiny(spatial_bias="great_circle", temporal_bias=True, dim_x=2)


@pytest.fixture(scope="module")
def euclid_model():
    return Jitted(BSATNP(EUCLID, rngs=nnx.Rngs(0)))


@pytest.fixture(scope="module")
def sphere_model():
    return Jitted(BSATNP(SPHERE, rngs=nnx.Rngs(1)))


@pytest.fixture(scope="module")
def euclid_data():
    ctx = random_points(jax.random.key(0), 2, 40, mask_frac=0.8)
    tgt = random_points(jax.random.key(1), 2, 25)
    return ctx, tgt


def sphere_data(key=2):
    ctx = random_points(jax.random.key(key), 2, 40, sphere=True, dim_x=2, time=True)
    tgt = random_points(jax.random.key(key + 1), 2, 25, sphere=True, dim_x=2, time=True)
    return ctx, tgt


def test_paper_config_has_paper_parameter_count():
    # The reference configuration for the 2-D GP (s not embedded, one output):
    # 475,770 parameters, the paper's "≈478K".
    model = BSATNP(BSATNPConfig(spatial_bias="euclidean"), rngs=nnx.Rngs(0))
    assert count_params(model) == 475_770


def test_tiny_preset_is_tiny():
    assert 1_000 < count_params(BSATNP(BSATNPConfig.tiny(), rngs=nnx.Rngs(0))) < 10_000


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"n_heads": 3}, "divisible"),
        ({"n_blocks": 0}, "positive integer"),
        ({"spatial_bias": "manhattan"}, "spatial_bias"),
        ({"dim_s": 3}, "great-circle"),
        ({"min_std": 1.5}, "min_std"),
        ({"spatial_scale": -1.0}, "positive"),
        ({"attention": "flash"}, "attention"),
    ],
)
def test_config_validation(changes, match):
    with pytest.raises(ConfigError, match=match):
        BSATNPConfig(**changes)


def test_config_json_round_trip():
    import json

    cfg = BSATNPConfig(temporal_bias=True, embed_hidden=(64, 32))
    assert BSATNPConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ConfigError, match="unknown"):
        BSATNPConfig.from_dict({"n_layers": 3})


def test_wrong_point_dims_raise(euclid_model, euclid_data):
    ctx, tgt = euclid_data
    model = euclid_model.merge(euclid_model.params)
    with pytest.raises(ShapeError, match="dim_x"):
        model(ctx.replace(x=jnp.zeros((2, 40, 3))), tgt)
    with pytest.raises(ShapeError, match="dim_s"):
        model(ctx, tgt.replace(s=jnp.zeros((2, 25, 3))))


def test_a_context_permutation_invariance(euclid_model, euclid_data):
    check_context_permutation_invariance(euclid_model, *euclid_data)


def test_b_targets_are_independent(sphere_model):
    check_targets_independent(sphere_model, *sphere_data())


def test_c_padding_changes_nothing_and_gets_no_gradient(sphere_model):
    junk = random_points(jax.random.key(9), 2, 13, sphere=True, dim_x=2, time=True)
    check_padding_is_inert(sphere_model, *sphere_data(), junk.replace(f=junk.f * 100))


def test_d_chunked_prediction_equals_one_shot(sphere_model):
    check_chunked_prediction(sphere_model, *sphere_data(), cuts=(0, 7, 20))


def test_e_translation_invariance_euclidean(euclid_model, euclid_data):
    ctx, tgt = euclid_data
    shift = lambda p: p.replace(s=p.s + 10.0)  # noqa: E731
    np.testing.assert_allclose(
        euclid_model(shift(ctx), shift(tgt))[0], euclid_model(ctx, tgt)[0], atol=1e-4
    )


def test_embedded_coordinates_do_not_depend_on_units():
    # metres instead of kilometres, minutes instead of hours: with the scales changed
    # alike, the model computes the same function (embedded values are scaled too)
    def model(scale, hours):
        cfg = BSATNPConfig.tiny(
            spatial_bias="euclidean", spatial_scale=scale, embed_s=True, embed_t=True,
            temporal_bias=True, temporal_scale=hours,
        )  # fmt: skip
        return BSATNP(cfg, rngs=nnx.Rngs(4))

    ctx = random_points(jax.random.key(5), 2, 30, time=True)
    tgt = random_points(jax.random.key(6), 2, 20, time=True)
    units = lambda p: p.replace(s=p.s * 1000.0, t=p.t * 60.0)  # noqa: E731
    np.testing.assert_allclose(
        jax.jit(model(1000.0, 24.0 * 60.0))(units(ctx), units(tgt))[0],
        jax.jit(model(1.0, 24.0))(ctx, tgt)[0],
        rtol=1e-4, atol=1e-4,
    )  # fmt: skip


def rotate_latlon(s, rotation):
    lat, lon = jnp.deg2rad(s[..., 0]), jnp.deg2rad(s[..., 1])
    xyz = jnp.stack([jnp.cos(lat) * jnp.cos(lon), jnp.cos(lat) * jnp.sin(lon), jnp.sin(lat)], -1)
    r = xyz @ rotation.T
    return jnp.stack(
        [
            jnp.rad2deg(jnp.arcsin(jnp.clip(r[..., 2], -1, 1))),
            jnp.rad2deg(jnp.arctan2(r[..., 1], r[..., 0])),
        ],
        -1,
    )


def test_f_rotation_invariance_great_circle(sphere_model):
    ctx, tgt = sphere_data()
    rotation, _ = jnp.linalg.qr(jax.random.normal(jax.random.key(3), (3, 3)))
    rotation = rotation * jnp.sign(jnp.linalg.det(rotation))  # proper rotation
    rot = lambda p: p.replace(s=rotate_latlon(p.s, rotation))  # noqa: E731
    mean, std = sphere_model(ctx, tgt)
    mean_r, std_r = sphere_model(rot(ctx), rot(tgt))
    assert float(jnp.abs(rot(ctx).s - ctx.s).max()) > 1.0  # the points really moved
    np.testing.assert_allclose(mean_r, mean, atol=2e-4)
    np.testing.assert_allclose(std_r, std, atol=2e-4)


def test_bsa_model_matches_dense_model_values_and_gradients():
    cfg = SPHERE.replace(q_chunk=8, k_chunk=16)
    ctx, tgt = sphere_data(7)
    y = jax.random.normal(jax.random.key(4), (2, 25, 1))
    results = []
    for kind in ("bsa", "dense"):
        model = BSATNP(cfg.replace(attention=kind), rngs=nnx.Rngs(3))
        graphdef, params = nnx.split(model)
        loss, grads = jax.jit(
            jax.value_and_grad(lambda p, gd=graphdef: nnx.merge(gd, p).loss(ctx, tgt, y))
        )(params)
        results.append((loss, jax.tree.leaves(grads)))
    (loss, grads), (loss_ref, grads_ref) = results
    assert float(loss) == pytest.approx(float(loss_ref), rel=1e-5)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        np.testing.assert_allclose(g, g_ref, atol=1e-5 * (1 + float(jnp.abs(g_ref).max())))


@pytest.mark.slow  # (the default run covers learning through fit: test_fit_learns_the_gp_field)
def test_g_training_beats_the_trivial_predictor():
    tasks = GPTasks(dims=1, n_context=(8, 32), n_target=32, lengthscale=(3.0, 7.0))
    cfg = BSATNPConfig.tiny(spatial_bias="euclidean", dim_s=1, spatial_scale=1.0)
    check_beats_trivial_predictor(BSATNP(cfg, rngs=nnx.Rngs(0)), tasks, batch_size=16)


@pytest.mark.parametrize(("b", "nq", "dim"), [(1, 6, 2), (1, 5, 1), (3, 4, 3)])
def test_pairwise_sq_distance_euclidean(b, nq, dim):
    # batch of one: computed in two halves of the queries (odd counts at once);
    # larger batches one element at a time
    from xnp.nn.bias import pairwise_sq_distance

    a = np.random.default_rng(0).normal(size=(b, nq, dim)).astype(np.float32)
    c = np.random.default_rng(1).normal(size=(b, 7, dim)).astype(np.float32)
    want = ((a[:, :, None] - c[:, None]) ** 2).sum(-1)
    got = jax.jit(lambda a, c: pairwise_sq_distance("euclidean", a, c))(a, c)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

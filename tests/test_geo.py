import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xnp.geo import (
    EARTH_RADIUS_KM,
    central_angle_xyz,
    great_circle_distance,
    latlon_to_xyz,
    pairwise_central_angle,
    pairwise_sq_central_angle,
    wrap_longitude,
)

lat = st.floats(-90, 90, allow_nan=False)
lon = st.floats(-180, 180, allow_nan=False)


def haversine64(lat1, lon1, lat2, lon2):
    p1, p2 = np.deg2rad(lat1), np.deg2rad(lat2)
    dp, dl = p2 - p1, np.deg2rad(lon2 - lon1)
    a = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0, 1)))


@given(lat, lon, lat, lon)
def test_symmetric(a, b, c, d):
    # float32: a few ulp (1 ulp is 1 m at 10,000 km)
    assert float(great_circle_distance(a, b, c, d)) == pytest.approx(
        float(great_circle_distance(c, d, a, b)), rel=1e-6, abs=1e-3
    )


@given(lat, lon)
def test_zero_on_diagonal(a, b):
    assert float(great_circle_distance(a, b, a, b)) == 0.0


@given(lat, lon)
def test_antipodes_are_pi_r(a, b):
    d = float(great_circle_distance(a, b, -a, b + 180.0))
    assert d == pytest.approx(math.pi * EARTH_RADIUS_KM, rel=1e-6)


@given(lat, lon, lat, lon, lat, lon)
def test_triangle_inequality(a, b, c, d, e, f):
    ab = float(great_circle_distance(a, b, c, d))
    bc = float(great_circle_distance(c, d, e, f))
    ac = float(great_circle_distance(a, b, e, f))
    assert ac <= ab + bc + 1e-2  # float32 slack, km


@given(lat, lon, lat, lon, st.integers(-3, 3))
def test_longitude_wrapping(a, b, c, d, k):
    base = float(great_circle_distance(a, b, c, d))
    assert float(great_circle_distance(a, b + 360.0 * k, c, d)) == pytest.approx(base, abs=2e-2)


@given(lat, lon, lat, lon)
def test_matches_float64_reference(a, b, c, d):
    got = float(great_circle_distance(a, b, c, d))
    assert got == pytest.approx(haversine64(a, b, c, d), abs=5e-2)


@pytest.mark.parametrize("metres", [0.01, 1.0, 100.0])
def test_tiny_separations_float32(metres):
    # float32 latitudes near 45° resolve ~0.4 m; compare with what the inputs represent
    a = np.float32(45.0)
    b = np.float32(45.0 + metres / 1000.0 / EARTH_RADIUS_KM * 180.0 / math.pi)
    d = float(great_circle_distance(jnp.float32(a), 0.0, jnp.float32(b), 0.0))
    expected = haversine64(np.float64(a), 0.0, np.float64(b), 0.0)
    assert d == pytest.approx(expected, rel=1e-3, abs=1e-6)


def test_near_antipodal_float32_accuracy():
    # 1 km short of antipodal on the equator: arccos-based formulas lose ~100 km here
    dlon = 180.0 - 1.0 / EARTH_RADIUS_KM * 180.0 / math.pi
    d = float(great_circle_distance(0.0, 0.0, 0.0, dlon))
    assert d == pytest.approx(math.pi * EARTH_RADIUS_KM - 1.0, abs=0.05)


def test_known_distance():
    assert float(great_circle_distance(51.5074, -0.1278, 48.8566, 2.3522)) == pytest.approx(
        343.5, abs=1.0
    )


def test_xyz_is_unit_and_angle_matches():
    xyz = latlon_to_xyz(jnp.array([10.0, -80.0]), jnp.array([170.0, -20.0]))
    np.testing.assert_allclose(jnp.linalg.norm(xyz, axis=-1), 1.0, rtol=1e-6)
    angle = float(central_angle_xyz(xyz[0], xyz[1]))
    ref = haversine64(10.0, 170.0, -80.0, -20.0) / EARTH_RADIUS_KM
    assert angle == pytest.approx(ref, rel=1e-5)


@given(st.floats(-1000, 1000, allow_nan=False))
def test_wrap_longitude_range(x):
    w = float(wrap_longitude(jnp.float32(x)))
    assert -180.0 <= w < 180.0 or w == pytest.approx(180.0, abs=1e-3)
    assert math.isclose(math.cos(math.radians(w)), math.cos(math.radians(x)), abs_tol=1e-3)


@given(lat, lon, lat, lon)
def test_pairwise_central_angle_matches_reference(a, b, c, d):
    xa = latlon_to_xyz(jnp.array([[a]]), jnp.array([[b]]))
    xb = latlon_to_xyz(jnp.array([[c]]), jnp.array([[d]]))
    angle = float(pairwise_central_angle(xa, xb)[0, 0, 0])
    assert angle * EARTH_RADIUS_KM == pytest.approx(haversine64(a, b, c, d), abs=5e-2)


@pytest.mark.parametrize("km", [0.001, 1.0, 1000.0, 20015.0, 20014.0])
def test_pairwise_central_angle_tiny_and_antipodal(km):
    theta = km / EARTH_RADIUS_KM
    xa = latlon_to_xyz(jnp.zeros((1, 1)), jnp.zeros((1, 1)))
    xb = latlon_to_xyz(jnp.zeros((1, 1)), jnp.full((1, 1), np.rad2deg(theta)))
    got = float(pairwise_central_angle(xa, xb)[0, 0, 0]) * EARTH_RADIUS_KM
    assert got == pytest.approx(min(km, math.pi * EARTH_RADIUS_KM), abs=2e-3 + 1e-6 * km)


@given(lat, lon, lat, lon)
def test_pairwise_sq_central_angle_matches_reference(a, b, c, d):
    xa = latlon_to_xyz(jnp.array([[a]]), jnp.array([[b]]))
    xb = latlon_to_xyz(jnp.array([[c]]), jnp.array([[d]]))
    theta2 = float(pairwise_sq_central_angle(xa, xb)[0, 0, 0])
    ref = haversine64(a, b, c, d) / EARTH_RADIUS_KM
    assert theta2 == pytest.approx(ref * ref, rel=2e-5, abs=1e-9)


@pytest.mark.parametrize(
    "km", [0.001, 1.0, 1000.0, 9000.0, 10007.5, 10008.0, 11000.0, 20014.0, 20015.0]
)
def test_pairwise_sq_central_angle_every_separation(km):
    """Tiny, around the 90° switch between the two chords, and antipodal."""
    theta = km / EARTH_RADIUS_KM
    xa = latlon_to_xyz(jnp.zeros((1, 1)), jnp.zeros((1, 1)))
    xb = latlon_to_xyz(jnp.zeros((1, 1)), jnp.full((1, 1), np.rad2deg(theta)))
    ref = min(theta, math.pi)
    got = float(pairwise_sq_central_angle(xa, xb)[0, 0, 0])
    assert math.sqrt(got) == pytest.approx(ref, rel=1e-6, abs=3e-10)
    angle = float(pairwise_central_angle(xa, xb)[0, 0, 0])
    assert angle == pytest.approx(ref, rel=1e-6, abs=3e-10)


def test_pairwise_sq_central_angle_gradients_are_finite():
    import jax

    s = jnp.array([[[10.0, 20.0], [10.0, 20.0], [-10.0, -160.0], [0.0, 0.0]]])

    def total(s):
        xyz = latlon_to_xyz(s[..., 0], s[..., 1])
        return jnp.sum(pairwise_sq_central_angle(xyz, xyz))

    grad = jax.grad(total)(s)
    assert bool(jnp.isfinite(grad).all())


def test_pairwise_central_angle_gradients_are_finite():
    import jax

    s = jnp.array([[[10.0, 20.0], [10.0, 20.0], [-10.0, -160.0], [0.0, 0.0]]])

    def total(s):
        xyz = latlon_to_xyz(s[..., 0], s[..., 1])
        return jnp.sum(pairwise_central_angle(xyz, xyz) ** 2)

    grad = jax.grad(total)(s)
    assert bool(jnp.isfinite(grad).all())

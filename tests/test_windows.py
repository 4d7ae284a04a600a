import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xnp.errors import ConfigError, ShapeError
from xnp.nn.attention import dense_attention
from xnp.nn.windows import (
    cell_index,
    crop_grid,
    local_attention,
    neighbour_cells,
    node_position,
    pad_grid,
    padded_shape,
    relative_offsets,
    relative_position_index,
    shift_grid,
    window_merge,
    window_pair_mask,
    window_partition,
)

windows = st.tuples(st.integers(1, 4), st.integers(1, 4))


@st.composite
def grids(draw, multiple=True):
    """A window and a grid shape: a multiple of the window, or anything."""
    win = draw(windows)
    if multiple:
        shape = (win[0] * draw(st.integers(1, 3)), win[1] * draw(st.integers(1, 3)))
    else:
        shape = (draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    return win, shape


def arange_grid(shape, batch=2, channels=3):
    return np.arange(batch * shape[0] * shape[1] * channels).reshape(batch, *shape, channels)


@given(grids())
def test_partition_and_merge_are_inverses(case):
    win, shape = case
    x = arange_grid(shape)
    w = window_partition(x, win)
    assert w.shape == (2 * (shape[0] // win[0]) * (shape[1] // win[1]), win[0] * win[1], 3)
    np.testing.assert_array_equal(window_merge(w, shape, win), x)
    # every window holds a contiguous w0 × w1 block of the grid
    first = w[0, :, 0].reshape(win)
    np.testing.assert_array_equal(first, x[0, : win[0], : win[1], 0])


@given(grids(multiple=False))
def test_pad_and_crop_handle_grids_that_are_not_window_multiples(case):
    win, shape = case
    x = arange_grid(shape) + 1
    p = pad_grid(x, win)
    assert p.shape[1:3] == padded_shape(shape, win)
    assert p.shape[1] % win[0] == 0
    assert p.shape[2] % win[1] == 0
    np.testing.assert_array_equal(crop_grid(p, shape), x)
    assert p.sum() == x.sum()  # the padding is zeros
    merged = window_merge(window_partition(p, win), p.shape[1:3], win)
    np.testing.assert_array_equal(crop_grid(merged, shape), x)


def test_a_wrapping_axis_must_be_a_window_multiple():
    with pytest.raises(ConfigError, match="multiple"):
        pad_grid(np.zeros((1, 4, 10, 1)), (4, 4), wrap=(False, True))
    with pytest.raises(ShapeError, match="pad"):
        window_partition(np.zeros((1, 5, 4, 1)), (4, 4))


@given(grids(), st.integers(0, 3), st.integers(0, 3))
def test_shift_and_unshift_are_inverses_and_wrap(case, s0, s1):
    _, shape = case
    x = arange_grid(shape)
    shift = (s0 % shape[0], s1 % shape[1])
    rolled = shift_grid(x, shift)
    np.testing.assert_array_equal(shift_grid(rolled, shift, inverse=True), x)
    # rolled position p holds the original node (p + shift) mod n: the last column of
    # the grid is followed by the first one (longitude wrap)
    i, j = shape[0] - 1, shape[1] - 1
    np.testing.assert_array_equal(
        rolled[:, i, j], x[:, (i + shift[0]) % shape[0], (j + shift[1]) % shape[1]]
    )


@pytest.mark.parametrize("shift", [(0, 0), (1, 3), (2, 2)])
def test_shift_grid_is_the_same_for_jax_and_numpy(shift):
    x = arange_grid((4, 8))
    rolled = shift_grid(jnp.asarray(x), shift)
    np.testing.assert_array_equal(rolled, shift_grid(x, shift))
    np.testing.assert_array_equal(shift_grid(rolled, shift, inverse=True), x)


def reference_pair_mask(shape, win, shift, wrap):
    """Brute force: two slots may attend iff the key is real and, on bounded axes, no
    seam of the roll lies between them (offsets are the same before and after it)."""
    p = padded_shape(shape, win)
    pos = np.stack(np.meshgrid(np.arange(p[0]), np.arange(p[1]), indexing="ij"), -1)
    orig = (pos + np.asarray(shift)) % np.asarray(p)
    pw = window_partition(pos[None], win)  # rolled-frame positions per slot
    ow = window_partition(orig[None], win)  # original positions per slot
    out = np.zeros((pw.shape[0], pw.shape[1], pw.shape[1]), bool)
    for w, a, b in itertools.product(range(pw.shape[0]), range(pw.shape[1]), range(pw.shape[1])):
        real = ow[w, b, 0] < shape[0] and ow[w, b, 1] < shape[1]
        same_side = all(
            wrap[ax] or (pw[w, a, ax] - pw[w, b, ax]) == (ow[w, a, ax] - ow[w, b, ax])
            for ax in (0, 1)
        )
        out[w, a, b] = real and same_side
    return out


@given(grids(multiple=False), st.booleans(), st.booleans())
def test_window_pair_mask_matches_brute_force(case, shifted, wrap_lon):
    win, shape = case
    if wrap_lon:
        shape = (shape[0], padded_shape(shape, win)[1])
    shift = (win[0] // 2, win[1] // 2) if shifted else (0, 0)
    wrap = (False, wrap_lon)
    got = window_pair_mask(shape, win, shift, wrap=wrap)
    np.testing.assert_array_equal(got, reference_pair_mask(shape, win, shift, wrap))


def test_shifted_windows_join_the_dateline_only_on_a_global_grid():
    shape, win, shift = (4, 8), (4, 4), (2, 2)
    ids = np.arange(32).reshape(1, 4, 8, 1)
    slots = window_partition(shift_grid(ids, shift), win)[..., 0]  # [W, S] node ids
    for wrap, joined in (((False, True), True), ((False, False), False)):
        mask = window_pair_mask(shape, win, shift, wrap=wrap)
        # node (2, 7) (east edge) and node (2, 0) (west edge) share the last window
        w = int(np.flatnonzero((slots == 2 * 8 + 7).any(1))[0])
        a, b = list(slots[w]).index(2 * 8 + 7), list(slots[w]).index(2 * 8 + 0)
        assert bool(mask[w, a, b]) is joined


def test_relative_position_index_depends_only_on_the_offset():
    win = (3, 4)
    idx = relative_position_index(win)
    pos = [(i, j) for i in range(win[0]) for j in range(win[1])]
    for a, b, c, d in itertools.product(range(12), repeat=4):
        same = (pos[a][0] - pos[b][0], pos[a][1] - pos[b][1]) == (
            pos[c][0] - pos[d][0],
            pos[c][1] - pos[d][1],
        )
        assert (idx[a, b] == idx[c, d]) == same
    assert idx.max() + 1 == (2 * win[0] - 1) * (2 * win[1] - 1)


@given(st.integers(0, 2**32 - 1))
def test_cell_index_is_the_nearest_node_with_longitude_wrap(seed):
    shape, spacing = (6, 12), (30.0, 30.0)
    origin = jnp.array([[-90.0, -180.0]])
    rng = np.random.default_rng(seed)
    s = np.stack([rng.uniform(-89.9, 89.9, 20), rng.uniform(-540, 540, 20)], -1)
    s = s + 1e-3 * (np.abs(s / 30.0 - np.round(s / 30.0)) < 1e-4)  # off cell boundaries
    s = jnp.asarray(s, jnp.float32)
    idx = np.asarray(cell_index(s, origin, spacing, shape, (False, True)))
    grid = jnp.stack(jnp.meshgrid(jnp.arange(6), jnp.arange(12), indexing="ij"), -1)
    nodes = node_position(grid.reshape(-1, 2), origin, spacing)
    d_lat = np.abs(np.asarray(s[:, None, 0] - nodes[None, :, 0]))
    d_lon = np.abs((np.asarray(s[:, None, 1] - nodes[None, :, 1]) + 180) % 360 - 180)
    dist = np.maximum(d_lat, d_lon)  # the cell containing a point is the closest in L∞
    np.testing.assert_array_equal(idx[:, 0] * 12 + idx[:, 1], dist.argmin(1))
    np.testing.assert_array_equal(
        cell_index(s + jnp.array([[0.0, 360.0]]), origin, spacing, shape, (False, True)), idx
    )


def test_neighbour_cells_clamp_latitude_and_wrap_longitude():
    shape, spacing, origin = (4, 8), (45.0, 45.0), jnp.array([[-90.0, -180.0]])
    s = jnp.array([[-80.0, 170.0], [10.0, 0.0]])
    idx, valid = neighbour_cells(s, origin, spacing, shape, (False, True))
    # near the south pole: the row below is off the grid; at 170°E the eastern
    # neighbours wrap to the first column
    got = {tuple(map(int, i)) for i, ok in zip(idx[0], valid[0], strict=True) if ok}
    assert got == {(r, c) for r in (0, 1) for c in (6, 7, 0)}
    assert bool(valid[1].all())
    assert len({tuple(map(int, i)) for i in idx[1]}) == 9
    _, bounded_valid = neighbour_cells(s, origin, spacing, shape, (False, False))
    assert int(bounded_valid[0].sum()) == 4  # corner: 2 × 2 on the grid


def test_relative_offsets():
    s = jnp.array([[1.0, 2.0]])
    v = jnp.array([[0.5, 3.0]])
    np.testing.assert_allclose(relative_offsets(s, v, (0.5, 2.0), "plane"), [[1.0, -0.5]])
    off = relative_offsets(jnp.array([[0.0, 1.0]]), jnp.array([[0.0, 0.0]]), (1.0, 1.0), "sphere")
    np.testing.assert_allclose(off, [[0.0, 1.0, 1.0]], atol=1e-5)  # 1° along the equator


def test_local_attention_matches_dense_attention():
    ks = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(ks[0], (2, 5, 3, 4))
    k = jax.random.normal(ks[1], (2, 7, 3, 4))
    v = jax.random.normal(ks[2], (2, 7, 3, 4))
    mask = jax.random.bernoulli(ks[3], 0.6, (2, 7)).at[1].set(False)  # batch 1: no key
    bias = jax.random.normal(ks[0], (2, 3, 5, 7))

    @jax.jit
    def both(q, k, v, mask, bias):
        return (
            dense_attention(q, k, v, k_mask=mask),
            local_attention(q, k, v, mask=mask[:, None, None, :]),
            dense_attention(q, k, v, bias_fn=lambda a, b: bias, q_feats=q, k_feats=k),
            local_attention(q, k, v, bias=bias),
        )

    ref, got, ref_bias, got_bias = both(q, k, v, mask, bias)
    np.testing.assert_allclose(got, ref, atol=1e-5)
    np.testing.assert_array_equal(got[1], 0.0)
    np.testing.assert_allclose(got_bias, ref_bias, atol=1e-5)

"""Grids of tokens: Swin windows, shifted windows and grid neighbourhoods.

A grid of tokens is an array ``[B, n0, n1, C]``: axis 0 is latitude (or the first
planar coordinate), axis 1 longitude (or the second).  Its nodes are *cell
centres*: node ``i`` of an axis with lower edge ``lo`` and spacing ``Δ`` sits at
``lo + (i + ½) Δ``, so a global longitude axis of ``n`` nodes with ``n Δ = 360°``
wraps exactly (the last node is one ``Δ`` west of the first).

Swin windows (Liu et al. 2021, as used by the gridded TNP of Ashman et al. 2025):

* :func:`pad_grid` pads bounded axes at the end to a multiple of the window; the
  padded nodes are masked as keys (:func:`window_pair_mask`).  A wrapping
  (global longitude) axis must already be a multiple of the window.
* :func:`window_partition` / :func:`window_merge` move between the grid and
  ``[B · windows, w0 · w1, C]``; they are exact inverses.
* :func:`shift_grid` rolls the grid by ``-shift`` (``inverse=True`` rolls back).
  After the roll, a window at the end of a bounded axis holds nodes from both ends
  of the grid; :func:`window_pair_mask` keeps them from attending to each other.
  On a wrapping axis those nodes are neighbours, so no mask is needed: that is
  the longitude wrap of a global grid.
* :func:`relative_position_index` indexes a learned table of biases by the
  offset between two slots of a window (Swin's relative-position bias).

Neighbourhoods: :func:`cell_index` gives each point its nearest node by index
arithmetic (O(N)); :func:`neighbour_cells` gives the ``(2r+1)²`` nodes around it,
clamped (and masked) on bounded axes and wrapped on longitude;
:func:`relative_offsets` measures point-to-node offsets in grid cells (and the
great-circle distance on the sphere) for relative-position biases.
:func:`local_attention` is dense multi-head attention over such small key sets.
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from xnp.errors import ConfigError, ShapeError
from xnp.geo.distance import central_angle_xyz, latlon_to_xyz

__all__ = [
    "cell_index",
    "crop_grid",
    "flat_index",
    "local_attention",
    "neighbour_cells",
    "node_position",
    "pad_grid",
    "padded_shape",
    "relative_offsets",
    "relative_position_index",
    "shift_grid",
    "window_merge",
    "window_pair_mask",
    "window_partition",
]

Pair = tuple[int, int]
Geometry = Literal["sphere", "plane"]


def padded_shape(shape: Pair, window: Pair) -> Pair:
    """Grid shape rounded up to a multiple of the window on each axis.

    Examples
    --------
    >>> padded_shape((10, 16), (4, 4))
    (12, 16)
    """
    return (-(-shape[0] // window[0]) * window[0], -(-shape[1] // window[1]) * window[1])


def pad_grid(x: Any, window: Pair, *, wrap: tuple[bool, bool] = (False, False)) -> Any:
    """Pad a grid ``[B, n0, n1, C]`` with zeros at the end of each axis to window multiples.

    A wrapping axis cannot be padded (padding would sit between its two ends):
    it must already be a multiple of the window, else :class:`ConfigError`.

    Examples
    --------
    >>> pad_grid(jnp.ones((1, 5, 8, 2)), (4, 4)).shape
    (1, 8, 8, 2)
    """
    n = x.shape[1:3]
    p = padded_shape(n, window)
    for axis in (0, 1):
        if wrap[axis] and p[axis] != n[axis]:
            raise ConfigError(
                f"a wrapping (global longitude) axis of {n[axis]} nodes must be a multiple "
                f"of the window {window[axis]}."
            )
    widths = [(0, 0), (0, p[0] - n[0]), (0, p[1] - n[1])] + [(0, 0)] * (x.ndim - 3)
    return (np if isinstance(x, np.ndarray) else jnp).pad(x, widths)


def crop_grid(x: Any, shape: Pair) -> Any:
    """Inverse of :func:`pad_grid`: keep the first ``shape`` nodes of axes 1 and 2."""
    return x[:, : shape[0], : shape[1]]


def window_partition(x: Any, window: Pair) -> Any:
    """Split a grid ``[B, p0, p1, C]`` into windows ``[B · p0/w0 · p1/w1, w0 · w1, C]``.

    Windows are ordered batch-major, then row-major over the grid of windows;
    slots inside a window are row-major.  Works on JAX and NumPy arrays.

    Examples
    --------
    >>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)
    >>> window_partition(x, (2, 2))[1, :, 0]
    Array([2., 3., 6., 7.], dtype=float32)
    """
    b, p0, p1 = x.shape[:3]
    w0, w1 = window
    if p0 % w0 or p1 % w1:
        raise ShapeError(f"grid {(p0, p1)} is not a multiple of the window {window}; pad it.")
    rest = x.shape[3:]
    x = x.reshape(b, p0 // w0, w0, p1 // w1, w1, *rest)
    x = x.transpose(0, 1, 3, 2, 4, *range(5, x.ndim))
    return x.reshape(b * (p0 // w0) * (p1 // w1), w0 * w1, *rest)


def window_merge(windows: Any, shape: Pair, window: Pair) -> Any:
    """Inverse of :func:`window_partition`: windows back to a grid ``[B, p0, p1, C]``.

    Examples
    --------
    >>> x = jnp.arange(32.0).reshape(2, 4, 4, 1)
    >>> bool((window_merge(window_partition(x, (2, 2)), (4, 4), (2, 2)) == x).all())
    True
    """
    p0, p1 = shape
    w0, w1 = window
    rest = windows.shape[2:]
    x = windows.reshape(-1, p0 // w0, p1 // w1, w0, w1, *rest)
    x = x.transpose(0, 1, 3, 2, 4, *range(5, x.ndim))
    return x.reshape(-1, p0, p1, *rest)


def shift_grid(x: Any, shift: Pair, *, inverse: bool = False) -> Any:
    """Cyclically roll a grid ``[B, p0, p1, ...]`` by ``-shift`` (``+shift`` if ``inverse``).

    Examples
    --------
    >>> x = jnp.arange(4.0).reshape(1, 1, 4)
    >>> shift_grid(x, (0, 1))
    Array([[[1., 2., 3., 0.]]], dtype=float32)
    >>> shift_grid(shift_grid(x, (0, 1)), (0, 1), inverse=True)
    Array([[[0., 1., 2., 3.]]], dtype=float32)
    """
    sign = 1 if inverse else -1
    roll = np.roll if isinstance(x, np.ndarray) else jnp.roll
    return roll(x, (sign * shift[0], sign * shift[1]), axis=(1, 2))


def window_pair_mask(
    shape: Pair, window: Pair, shift: Pair, *, wrap: tuple[bool, bool] = (False, False)
) -> np.ndarray:
    """Which slots of each window may attend to which: ``[windows, w0·w1, w0·w1]`` bool.

    For the grid ``shape`` padded to the window (see :func:`pad_grid`) and rolled
    by ``shift`` (all zeros: the unshifted pass).  A key is allowed when it is a
    real node (not padding) and, on every bounded axis, it came from the same side
    of the roll's seam as the query.  Wrapping axes have no seam.  Computed in
    NumPy: the mask is a compile-time constant.

    Examples
    --------
    >>> m = window_pair_mask((4, 4), (2, 2), (1, 1))
    >>> m.shape, bool(m[0].all()), int(m[-1].sum())
    ((4, 4, 4), True, 4)
    """
    p = padded_shape(shape, window)
    valid = np.zeros(p, bool)
    valid[: shape[0], : shape[1]] = True
    valid = shift_grid(valid[None], shift)[0]
    group = np.zeros(p, np.int32)
    for axis in (0, 1):
        if shift[axis] and not wrap[axis]:
            seam = (np.arange(p[axis]) + shift[axis]) >= p[axis]  # came from the start
            group = group * 2 + np.expand_dims(seam, 1 - axis).astype(np.int32)
    g = window_partition(group[None, :, :, None], window)[..., 0]  # [W, S]
    v = window_partition(valid[None, :, :, None], window)[..., 0]
    return (g[:, :, None] == g[:, None, :]) & v[:, None, :]


def relative_position_index(window: Pair) -> np.ndarray:
    """Index ``[S, S]`` (``S = w0·w1``) into a ``(2w0-1)(2w1-1)`` table of offsets.

    Entry ``[i, j]`` identifies the offset from slot ``j`` to slot ``i``; pairs
    with the same offset share an index.

    Examples
    --------
    >>> idx = relative_position_index((2, 2))
    >>> idx.shape, int(idx.max()) + 1, int(idx[0, 0]) == int(idx[3, 3])
    ((4, 4), 9, True)
    """
    w0, w1 = window
    r0, r1 = np.meshgrid(np.arange(w0), np.arange(w1), indexing="ij")
    r0, r1 = r0.ravel(), r1.ravel()
    d0 = r0[:, None] - r0[None, :] + w0 - 1
    d1 = r1[:, None] - r1[None, :] + w1 - 1
    return (d0 * (2 * w1 - 1) + d1).astype(np.int32)


def _step(spacing: Pair, like: jax.Array) -> jax.Array:
    """The spacing as an array of the rank and dtype of ``like`` (no rank promotion)."""
    return jnp.asarray(spacing, like.dtype).reshape((1,) * (like.ndim - 1) + (2,))


def cell_index(
    s: jax.Array,
    origin: jax.Array,
    spacing: Pair,
    shape: Pair,
    wrap: tuple[bool, bool],
    *,
    periodic_lon: bool = False,
) -> jax.Array:
    """Nearest node ``[..., 2]`` (int32) of points ``s`` ``[..., 2]`` on a cell-centred grid.

    ``origin`` ``[..., 2]`` (same rank as ``s``) is the grid's lower edge.  The
    nearest node is the cell containing the point: ``floor((s - origin) / Δ)``,
    clamped on bounded axes and taken modulo the node count on wrapping ones.
    With ``periodic_lon`` (a regional grid on the sphere) the second coordinate
    is a longitude: its offset from the origin is first reduced modulo 360° into
    the window centred on the grid, so either longitude convention finds the
    same cell.

    Examples
    --------
    >>> s = jnp.array([[10.0, 179.0], [-95.0, -181.0]])
    >>> cell_index(s, jnp.array([[-90.0, -180.0]]), (45.0, 90.0), (4, 4), (False, True))
    Array([[2, 3],
           [0, 3]], dtype=int32)
    """
    d = s - origin
    if periodic_lon:
        lo = 0.5 * spacing[1] * shape[1] - 180.0  # 360° window centred on the grid
        d = d.at[..., 1].set(jnp.mod(d[..., 1] - lo, 360.0) + lo)
    u = jnp.floor(d / _step(spacing, s)).astype(jnp.int32)
    cols = []
    for axis in (0, 1):
        i = u[..., axis]
        cols.append(i % shape[axis] if wrap[axis] else jnp.clip(i, 0, shape[axis] - 1))
    return jnp.stack(cols, axis=-1)


def flat_index(idx: jax.Array, shape: Pair) -> jax.Array:
    """Row-major flat node number of ``idx`` ``[..., 2]``."""
    return idx[..., 0] * shape[1] + idx[..., 1]


def neighbour_cells(
    s: jax.Array,
    origin: jax.Array,
    spacing: Pair,
    shape: Pair,
    wrap: tuple[bool, bool],
    *,
    radius: int = 1,
    periodic_lon: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """The ``K = (2r+1)²`` nodes around each point's nearest node.

    Returns ``(idx [..., K, 2], valid [..., K])``.  On a bounded axis, neighbours
    beyond the edge are clamped onto it and marked invalid (so none is counted
    twice); on a wrapping axis they wrap around.  ``periodic_lon`` as for
    :func:`cell_index`.

    Examples
    --------
    >>> idx, ok = neighbour_cells(
    ...     jnp.array([[0.5, 0.5]]), jnp.zeros((1, 2)), (1.0, 1.0), (4, 4), (False, False)
    ... )
    >>> idx.shape, int(ok.sum())  # a corner node: 2 × 2 of the 3 × 3 are on the grid
    ((1, 9, 2), 4)
    """
    centre = cell_index(s, origin, spacing, shape, wrap, periodic_lon=periodic_lon)
    offsets = np.arange(-radius, radius + 1)
    o0, o1 = (a.ravel() for a in np.meshgrid(offsets, offsets, indexing="ij"))
    cols, valid = [], jnp.ones((*s.shape[:-1], o0.size), bool)
    for axis, off in ((0, o0), (1, o1)):
        j = centre[..., axis, None] + jnp.asarray(off, jnp.int32).reshape(
            (1,) * (centre.ndim - 1) + (off.size,)
        )
        n = shape[axis]
        if wrap[axis]:
            cols.append(j % n)
        else:
            valid = valid & (j >= 0) & (j < n)
            cols.append(jnp.clip(j, 0, n - 1))
    return jnp.stack(cols, axis=-1), valid


def node_position(idx: jax.Array, origin: jax.Array, spacing: Pair) -> jax.Array:
    """Coordinates ``[..., 2]`` of nodes ``idx`` ``[..., 2]``: ``origin + (idx + ½) Δ``.

    ``origin`` must have the rank of ``idx``.
    """
    return origin + (idx.astype(origin.dtype) + 0.5) * _step(spacing, origin)


def relative_offsets(
    s: jax.Array, nodes: jax.Array, spacing: Pair, geometry: Geometry
) -> jax.Array:
    """Offsets from nodes to points, in grid cells: the input of relative-position biases.

    Plane: ``(s - node) / Δ`` (2 features).  Sphere: latitude and wrapped
    longitude differences in cells, and the great-circle distance in latitude
    cells (3 features).  ``s`` and ``nodes`` have the same rank.

    Examples
    --------
    >>> s, v = jnp.array([[0.0, 179.0]]), jnp.array([[0.0, -179.0]])
    >>> relative_offsets(s, v, (1.0, 1.0), "sphere").round(3)
    Array([[ 0., -2.,  2.]], dtype=float32)
    """
    if geometry == "plane":
        return (s - nodes) / _step(spacing, s)
    d_lat = (s[..., 0] - nodes[..., 0]) / spacing[0]
    d_lon = ((s[..., 1] - nodes[..., 1] + 180.0) % 360.0 - 180.0) / spacing[1]
    angle = central_angle_xyz(
        latlon_to_xyz(s[..., 0], s[..., 1]), latlon_to_xyz(nodes[..., 0], nodes[..., 1])
    )
    return jnp.stack([d_lat, d_lon, jnp.rad2deg(angle) / spacing[0]], axis=-1)


def local_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
) -> jax.Array:
    """Dense multi-head attention over small key sets (windows, neighbourhoods).

    ``q`` ``[..., Nq, H, D]``, ``k`` and ``v`` ``[..., Nk, H, D]`` share their
    leading axes; ``bias`` and ``mask`` have the rank of the scores
    ``[..., H, Nq, Nk]`` (size-1 axes broadcast).  A query without any allowed key
    gets a zero output.  Softmax statistics are float32.

    Examples
    --------
    >>> q = k = v = jnp.ones((3, 2, 1, 4))
    >>> mask = jnp.array([True, False])[None, None, None, :]
    >>> local_attention(q, k, v, mask=mask).shape
    (3, 2, 1, 4)
    """
    scale = q.shape[-1] ** -0.5
    s = jnp.einsum("...qhd,...khd->...hqk", q * scale, k, preferred_element_type=jnp.float32)
    if bias is not None:
        s = s + bias.astype(jnp.float32)
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
        any_key = jnp.any(mask, axis=-1, keepdims=True)
        p = jax.nn.softmax(jnp.where(any_key, s, 0.0), axis=-1)
        p = jnp.where(mask & any_key, p, 0.0)
    else:
        p = jax.nn.softmax(s, axis=-1)
    out = jnp.einsum("...hqk,...khd->...qhd", p.astype(v.dtype), v)
    return out.astype(v.dtype)

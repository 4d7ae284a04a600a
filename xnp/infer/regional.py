"""The regional plan: compact target chunks, each with the context near it.

With ``context_radius_km`` targets are cut by a balanced k-d split into compact
chunks of one size, no wider than the radius (:func:`compact_chunks`); each chunk
is conditioned only on the context points within the radius of the chunk's
bounding cap.  Chunks of the same padded sizes are stacked and run as one call;
rare shapes join a common one (:func:`merge_small_groups`), since every shape
costs a compilation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xnp.geo.distance import EARTH_RADIUS_KM

__all__ = ["REGIONAL_CHUNK", "bounding_cap", "compact_chunks", "merge_small_groups", "scatter"]

REGIONAL_CHUNK = 256


def bounding_cap(xyz: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre (unit vector) and angular radius of a cap holding the points ``xyz``."""
    centre = xyz.mean(0)
    centre = centre / max(float(np.linalg.norm(centre)), 1e-12)
    return centre, float(np.max(np.arccos(np.clip(xyz @ centre, -1.0, 1.0))))


def compact_chunks(
    xyz: np.ndarray, chunk_size: int, radius_km: float | None = None, *, min_size: int = 64
) -> list[np.ndarray]:
    """Split points (unit vectors ``[N, 3]``) into spatially compact chunks.

    A balanced k-d split: a set larger than ``chunk_size`` is cut at the
    ``chunk_size``-multiple nearest its median along its widest axis, so all
    chunks but one hold exactly ``chunk_size`` points (one compiled shape).
    With ``radius_km``, chunks wider than the radius are halved further (down to
    ``min_size`` points), so a chunk's context (its cap widened by the radius)
    stays regional where targets are sparse.

    Examples
    --------
    >>> from xnp.geo.sphere import unit_vectors
    >>> lat = np.linspace(50.0, 58.0, 1000)
    >>> xyz = unit_vectors(np.stack([lat, np.zeros_like(lat)], -1))
    >>> [len(c) for c in compact_chunks(xyz, 256)]
    [256, 256, 256, 232]
    >>> max(bounding_cap(xyz[c])[1] for c in compact_chunks(xyz, 1000, 300.0)) * 6371 < 300
    True
    """
    limit = None if radius_km is None else radius_km / EARTH_RADIUS_KM
    chunks, todo = [], [np.arange(len(xyz))]
    while todo:
        idx = todo.pop()
        pts = xyz[idx]
        too_wide = limit is not None and idx.size > min_size and bounding_cap(pts)[1] > limit
        if idx.size <= chunk_size and not too_wide:
            chunks.append(idx)
            continue
        axis = int(np.argmax(pts.max(0) - pts.min(0)))
        if idx.size > chunk_size:
            left = (-(-idx.size // chunk_size) // 2) * chunk_size
        else:
            left = idx.size // 2
        part = np.argpartition(pts[:, axis], left - 1)
        todo += [idx[part[left:]], idx[part[:left]]]
    return chunks


def merge_small_groups(
    groups: dict[tuple[int, int], list[int]], minimum: int = 64
) -> dict[tuple[int, int], list[int]]:
    """Move the chunks of rare padded shapes into the nearest larger common shape.

    Every (context, target) shape costs a compilation (seconds for a paper-size
    model), far more than padding a few dozen chunks a little further.  A group
    of fewer than ``minimum`` chunks joins the smallest group at least as large in
    both sizes that has ``minimum`` or more; if there is none it stays.

    Examples
    --------
    >>> merge_small_groups({(128, 128): [0], (192, 128): list(range(1, 70))}).keys()
    dict_keys([(192, 128)])
    """
    common = sorted(k for k, v in groups.items() if len(v) >= minimum)
    merged: dict[tuple[int, int], list[int]] = {k: list(groups[k]) for k in common}
    for key, members in groups.items():
        if key in merged:
            continue
        larger = [k for k in common if k[0] >= key[0] and k[1] >= key[1]]
        target = min(larger, key=lambda k: k[0] * k[1]) if larger else key
        merged.setdefault(target, []).extend(members)
    return merged


def scatter(mean: np.ndarray, std: np.ndarray, index: np.ndarray, m: Any, s: Any) -> None:
    """Write ``[G, n, Dy]`` outputs to rows ``index`` (padding goes to the dummy last row)."""
    mean[index.ravel()] = np.asarray(m).reshape(index.size, -1)
    std[index.ravel()] = np.asarray(s).reshape(index.size, -1)

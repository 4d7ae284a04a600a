"""The sphere on the host (numpy, float64): unit vectors, great-circle km, longitude frames.

:mod:`xnp.geo.distance` holds the JAX functions the models trace (float32-safe);
this module holds their float64 numpy counterparts for the host-side work around
them: KD-trees of context points, distances to the nearest observation, trends
and baselines, and the longitude window a map or a demo grid is drawn in.
"""

from __future__ import annotations

import numpy as np

from xnp.geo.distance import EARTH_RADIUS_KM

__all__ = ["great_circle_km", "into_frame", "longitude_frame", "unit_vectors"]


def unit_vectors(s: np.ndarray) -> np.ndarray:
    """Unit vectors (float64: distances to the metre) of latitude/longitude ``[..., 2]``.

    Examples
    --------
    >>> unit_vectors(np.array([[0.0, 90.0]])).round(12).tolist()
    [[0.0, 1.0, 0.0]]
    """
    s = np.asarray(s, np.float64)
    lat, lon = np.deg2rad(s[..., 0]), np.deg2rad(s[..., 1])
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], -1)


def great_circle_km(chord: np.ndarray) -> np.ndarray:
    """Great-circle distance (km) of chord lengths between unit vectors of :func:`unit_vectors`.

    Examples
    --------
    >>> round(float(great_circle_km(2.0)), 1)  # antipodes: half the circumference
    20015.1
    """
    return 2.0 * EARTH_RADIUS_KM * np.arcsin(np.minimum(0.5 * np.asarray(chord), 1.0))


def longitude_frame(*lons: np.ndarray) -> tuple[float, float]:
    """``(start, central)``: the 360° window ``[start, start + 360)`` to draw ``lons`` in.

    ``start`` is −180 (the usual −180…180 frame) unless the points are a region that
    crosses the antimeridian, e.g. around Fiji: then the window starts at the
    region's western edge (east of the widest gap between the points, put in
    [−180, 180)), so the map shows one region, with longitudes beyond 180°E, rather
    than two slivers at both edges of a −180…180 axis.  Data spanning more than half
    the globe keep the usual frame.  ``central`` is the centre of cartopy axes: 0 in
    the usual frame, else the middle of the region.

    Examples
    --------
    >>> longitude_frame(np.array([170.0, 179.0, -175.0]))
    (170.0, 177.5)
    >>> longitude_frame(np.array([-10.0, 20.0]))
    (-180.0, 0.0)
    """
    lon = np.concatenate([np.ravel(x) for x in lons]) if lons else np.zeros(0)
    lon = np.unique(np.mod(lon[np.isfinite(lon)], 360.0))
    if lon.size < 2:
        return -180.0, 0.0
    gaps = np.diff(np.append(lon, lon[0] + 360.0))
    widest = int(np.argmax(gaps))
    span = 360.0 - gaps[widest]
    usual = np.mod(lon + 180.0, 360.0) - 180.0
    if span >= 180.0 or usual.max() - usual.min() <= span + 1e-9:
        return -180.0, 0.0
    start = float(np.mod(lon[(widest + 1) % lon.size] + 180.0, 360.0) - 180.0)
    return start, start + 0.5 * float(span)


def into_frame(lon: np.ndarray, start: float) -> np.ndarray:
    """Longitudes in degrees moved into ``[start, start + 360)`` (float64).

    Examples
    --------
    >>> into_frame(np.array([-175.0, 170.0]), 170.0).tolist()
    [185.0, 170.0]
    """
    return start + np.mod(np.asarray(lon, np.float64) - start, 360.0)

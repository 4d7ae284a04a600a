"""Geometry: great-circle, Euclidean and temporal distances, unit-sphere coordinates.

``distance`` holds the JAX functions the models trace (float32-safe);
``sphere`` their float64 numpy counterparts for the host (KD-trees, distances
to the nearest observation, the longitude frame of a map).  This package sits
just above the bottom: it imports only numpy and JAX.
"""

from xnp.geo.distance import (
    EARTH_RADIUS_KM,
    central_angle_xyz,
    euclidean_distance,
    great_circle_distance,
    latlon_to_xyz,
    pairwise_central_angle,
    pairwise_sq_central_angle,
    squared_euclidean_distance,
    temporal_distance,
    wrap_longitude,
)

__all__ = [
    "EARTH_RADIUS_KM",
    "central_angle_xyz",
    "euclidean_distance",
    "great_circle_distance",
    "latlon_to_xyz",
    "pairwise_central_angle",
    "pairwise_sq_central_angle",
    "squared_euclidean_distance",
    "temporal_distance",
    "wrap_longitude",
]

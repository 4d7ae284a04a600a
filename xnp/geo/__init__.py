"""Geometry: great-circle, Euclidean and temporal distances, unit-sphere coordinates."""

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

"""Strict test configuration: two fake CPU devices, JAX rank promotion raises."""

from __future__ import annotations

import os

import jax
from hypothesis import HealthCheck, settings

# Must happen before any JAX backend is initialised.
jax.config.update("jax_num_cpu_devices", 2)
jax.config.update("jax_numpy_rank_promotion", "raise")

settings.register_profile(
    "ci",
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

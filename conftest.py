"""Strict test configuration: two fake CPU devices, JAX rank promotion raises."""

from __future__ import annotations

import os

import jax
from hypothesis import HealthCheck, settings

# Must happen before any JAX backend is initialised.
# The tests run tiny shapes, so compiling costs them far more than running: XLA's
# CPU backend without its LLVM optimisations compiles a small BSA-TNP training step
# in 2.9 s instead of 6.3 s (2-core AMD EPYC).  Speed is measured by the benchmark
# scripts, with the default level; XLA_FLAGS set by the caller are kept.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    os.environ["XLA_FLAGS"] = flags.strip()
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

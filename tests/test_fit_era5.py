"""A short fit on the real ERA5 UK 2 m temperature file (slow; skipped when the file is absent)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from strategies import open_real, requires_data

from xnp.data import ForecastTasks
from xnp.train import TrainConfig

pytestmark = [requires_data, pytest.mark.slow]


def test_short_era5_forecast_fit_beats_climatology(tmp_path):
    era5 = open_real("era5_t2m_uk_2019-03-01_21.nc")
    start = time.perf_counter()
    model = era5.np.fit(
        "t2m", model="bsa-tnp-tiny", covariates=["hour_of_day"],
        tasks=ForecastTasks(frames=4, step=6.0, lead=6.0, max_context=256, max_targets=256),
        steps=400, learning_rate=3e-3, progress=False,
        config=TrainConfig(log_every=50, validate_every=100, validation_batches=8),
    )  # fmt: skip
    seconds = time.perf_counter() - start
    best = model.history_.sel(step=model.training["best_step"])
    std = model.normaliser.stats["t2m"].std
    climatology_nll = 0.5 * math.log(2 * math.pi) + 0.5  # N(train mean, train std): ≈ 1.42
    print(
        f"ERA5 UK, 400 steps in {seconds:.0f} s: validation NLL {float(best.val_nll):.3f}, "
        f"RMSE {float(best.val_rmse):.3f} K (field std {std:.2f} K), "
        f"95% coverage {float(best.val_coverage):.3f}"
    )
    assert float(best.val_nll) < climatology_nll - 0.5
    assert float(best.val_rmse) < 0.5 * std
    assert np.isfinite(model.history_.train_nll).all()
    assert model.load(model.save(tmp_path / "era5")).config == model.config

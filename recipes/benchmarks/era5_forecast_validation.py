"""Score ERA5 forecast models on the validation days (issue 27): where settings are chosen.

The forecasts of ``era5_forecast.py`` (the full 33 × 49 frame 6 h ahead from 4
context frames 6 h apart, all cells or a random 10 % of each frame), but valid on
days 17–18 (16 forecasts initialised every 3 h), the days the fits validate on and
never test on.  Each MODEL directory (a saved xnp model) is scored with the same
code as the benchmark's test table, with the baselines beside it, so that a
setting can be chosen here before the test days are looked at.

    python recipes/benchmarks/era5_forecast_validation.py --case "100 %" MODEL [MODEL ...]
        [--subsets K]

``--subsets K`` also scores, for each model that conditions on a random subset of the
context (``max_context``), the equal mixture of its forecasts from K subsets (seeds
0 to K − 1) beside the forecast from one.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import open_era5
from era5_forecast import (
    CASES,
    Autoregressive,
    DiurnalPersistence,
    conditioned_points,
    score,
    validation_forecasts,
)

import xnp
from xnp.prediction.mixture import mixture_moments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="saved model directories")
    parser.add_argument("--case", choices=tuple(CASES), default="100 %")
    parser.add_argument("--subsets", type=int, default=1, help="context subsets mixed (1)")
    args = parser.parse_args()
    fraction = CASES[args.case][0]
    era5 = open_era5()
    inits, truth, history, context = validation_forecasts(era5, fraction)
    rows = {}
    for path in args.models:
        model = xnp.load(path)
        cap = conditioned_points(model)
        xnp.predict(model, context, time=inits[:1], max_context=cap)  # compile
        t0 = time.perf_counter()
        pred = xnp.predict(model, context, time=inits, max_context=cap)
        sec = (time.perf_counter() - t0) / inits.size
        run = model.training
        if isinstance(model, xnp.Ensemble):
            best = " + ".join(str(b) for b in run["best_steps"])
        else:
            best = run.get("best_step") or run["step"]
        rows[f"{path} (step {best})"] = (pred, sec)
        if args.subsets > 1 and cap is not None:
            preds = [pred] + [xnp.predict(model, context, time=inits, max_context=cap, seed=seed)
                              for seed in range(1, args.subsets)]  # fmt: skip
            mixed = mixture_moments(preds, list(model.variables))
            rows[f"{path} (step {best}), mixture of {args.subsets} subsets"] = (mixed, math.nan)
    diurnal = DiurnalPersistence(era5, fraction)
    rows["persistence + mean diurnal change"] = (diurnal.predict(history, inits, era5), 0.0)
    regression = Autoregressive(era5, fraction, diurnal)
    rows["autoregressive (per init hour)"] = (regression.predict(history, inits, era5), 0.0)
    print(f"{args.case}, {inits.size} validation forecasts valid on days 17–18")
    print("| model | RMSE | CRPS | NLL | 90 % cov | mean error | s / forecast |")
    print("|---|---|---|---|---|---|---|")
    for name, (pred, sec) in rows.items():
        s = score(pred, truth)
        print(f"| {name} | {s[0][0]:.3f} | {s[2][0]:.3f} | {s[3][0]:.3f} | {s[4][0]:.3f} "
              f"| {s[6][0]:+.3f} | {sec:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()

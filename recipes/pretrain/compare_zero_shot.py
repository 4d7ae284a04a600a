"""Compare zero-shot models on validation data first, then on the test data.

    python recipes/pretrain/compare_zero_shot.py MODEL [MODEL ...] [--baselines]

Each MODEL is a pretrained name (``gp-sphere``) or a saved model directory (e.g. a
candidate written by ``train_gp_sphere.py --out``).  For each, with and without
``trend="linear"``, and each of those with and without ``calibrate=True``:

* **validation** (what a candidate is chosen on): ERA5 UK 2 m temperature at the
  8 six-hourly frames of days 17–18, the 218 HadISD station cells as context and
  the other 1,399 cells as targets (``zero_shot_trend.era5_task``); RMSE, NLL,
  CRPS, 90 % and 95 % coverage, and the 95 % coverage of the targets more than
  120 km from a station (where a model must know it is far from the data);
  and the held-out synthetic fields of ``evaluate_zero_shot.py`` (NLL);
* **test** (reported, never used to choose): the same ERA5 task at the 12 frames
  of days 19–21, the same frames with one random 10 % of the cells as context
  (``finetune_era5.random_cells_task``), and the Texas stations (leave-one-out and 2°
  block CV).

``--baselines`` adds ordinary kriging and the exact Matérn GP to the ERA5 rows.
Prints markdown tables; ``--write`` also writes them (validation and test) to the
``compare_zero_shot`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import xnp
from xnp.baselines import GaussianProcess, OrdinaryKriging
from xnp.scoring.cross_validation import BlockKFold, LeaveOneOut, cross_validate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import stations
from _report import machine, write_section
from evaluate_zero_shot import CASES
from finetune_era5 import random_cells_task
from zero_shot_trend import era5_task

VALIDATION = np.arange(16 * 24, 18 * 24, 6)  # days 17–18
TEST = np.arange(18 * 24, 21 * 24, 6)  # days 19–21
FAR_KM = 120.0
METRICS = ("rmse", "nll", "crps", "coverage_90", "coverage_95")


def load(name: str) -> xnp.NeuralProcess:
    """A pretrained model by name, or a saved one (a candidate gets gp-sphere's working size)."""
    if name in xnp.available_pretrained():
        return xnp.pretrained(name)
    model = xnp.load(name)
    if "context_rms_km" not in (model.training or {}):
        # a checkpoint of train_gp_sphere.py: its final save records the same working
        # size and distance limit as the shipped model's
        shipped = xnp.pretrained("gp-sphere").training
        keys = ("context_rms_km", "max_distance_km")
        model.training = {**(model.training or {}), **{k: shipped[k] for k in keys}}
    return model


def predictors(models: dict[str, xnp.NeuralProcess], baselines: bool) -> dict:
    """Each model with and without ``trend="linear"``, each also with ``calibrate=True``."""
    out = {}
    for name, model in models.items():
        for trend in ("none", "linear"):
            for calibrate in (False, True):
                label = name + (f", trend='{trend}'" if trend != "none" else "")
                label += ", calibrate=True" if calibrate else ""
                out[label] = lambda c, t, m=model, tr=trend, ca=calibrate: xnp.predict(
                    m, c, t, trend=tr, calibrate=ca
                )
    if baselines:
        out["ordinary kriging (spherical)"] = OrdinaryKriging("spherical").predict
        out["exact GP, Matérn-5/2"] = GaussianProcess("matern52").predict
    return out


def era5_rows(methods: dict, frames: np.ndarray, task=era5_task) -> str:
    context, truth, targets = task(frames)
    far = np.flatnonzero(stations.nearest_km(context, targets) >= FAR_KM)
    lines = []
    for name, predict in methods.items():
        pred = predict(context, targets)
        s = xnp.evaluate(pred, truth, dim="cell")
        scores = [float(s[f"t2m_{m}"].mean()) for m in METRICS]
        if far.size:
            s_far = xnp.evaluate(pred.isel(cell=far), truth.isel(cell=far), dim="cell")
            scores.append(float(s_far.t2m_coverage_95.mean()))
        cells = [f"{v:.3f}" for v in scores] + ([] if far.size else ["–"])
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    head = (
        "| method | RMSE (K) | NLL | CRPS (K) | 90 % cov. | 95 % cov. | 95 % cov. beyond "
        f"{FAR_KM:.0f} km ({far.size} cells) |\n|---|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(lines)


def field_rows(variants: dict, n_fields: int) -> str:
    """NLL on held-out synthetic fields of each method ``(context, targets) → prediction``."""
    lines = []
    for ell, box in CASES:
        cells = []
        for predict in variants.values():
            nll = []
            for seed in range(1, n_fields + 1):
                ds = xnp.datasets.gp_sphere(
                    n_lat=24, n_lon=24, lat_range=(45 - box, 45 + box), lon_range=(-box, box),
                    lengthscale_km=ell, n_time=1, noise=0.05, seed=seed,
                ).isel(time=0)  # fmt: skip
                mask = np.random.default_rng(seed).random((24, 24)) < 0.2
                mask = ds.field.copy(data=mask).astype(bool)
                pred = predict(ds[["field"]].where(mask), ds.drop_vars("field"))
                s = xnp.evaluate(pred.where(~mask), ds.where(~mask))
                nll.append(float(s.field_nll))
            cells.append(f"{np.mean(nll):.3f}")
        lines.append(f"| {ell} km / {2 * box}° | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    return (
        "| field lengthscale / box | " + " | ".join(variants) + " |\n|---|"
        + "---|" * len(variants) + "\n" + "\n".join(lines)
    )  # fmt: skip


def texas_rows(methods: dict) -> str:
    data = stations.open_texas()
    cvs = {"leave-one-out": LeaveOneOut(), "block CV (2°)": BlockKFold(2.0, n_splits=5)}
    lines = []
    for cv_name, cv in cvs.items():
        for name, predict in methods.items():
            pooled = cross_validate(predict, data, "air_temperature", cv).sel(fold="pooled")
            scores = [
                float(pooled[f"air_temperature_{m}"])
                for m in ("rmse", "nll", "crps", "coverage_95")
            ]
            lines.append(
                f"| {cv_name} | {name} | " + " | ".join(f"{v:.3f}" for v in scores) + " |"
            )
            print(lines[-1], flush=True)
    head = "| CV | method | RMSE (°C) | NLL | CRPS (°C) | 95 % cov. |\n|---|---|---|---|---|---|\n"
    return head + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="pretrained names or model directories")
    parser.add_argument("--baselines", action="store_true", help="kriging and the GP too")
    parser.add_argument("--fields", type=int, default=4, help="synthetic fields per case (4)")
    parser.add_argument("--no-test", action="store_true", help="validation only")
    parser.add_argument(
        "--write", action="store_true",
        help="write the tables to the compare_zero_shot section of docs/benchmarks.md",
    )  # fmt: skip
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    names = [f"{Path(m).parent.name}/{Path(m).name}" if Path(m).exists() else m
             for m in args.models]  # fmt: skip
    if len(set(names)) < len(names):
        parser.error(f"the models' names repeat: {names}")
    models = {name: load(m) for name, m in zip(names, args.models, strict=True)}
    methods = predictors(models, args.baselines)
    start = time.perf_counter()
    parts = []

    def part(title: str, table: str) -> None:
        print(f"## {title}\n\n{table}\n")
        parts.append(f"**{title}**\n\n{table}\n")

    part("Validation: ERA5 days 17–18 at the station cells", era5_rows(methods, VALIDATION))
    part(
        "Validation: held-out synthetic fields (NLL)",
        field_rows(predictors(models, False), args.fields),
    )
    if args.no_test:
        return
    part("Test: ERA5 days 19–21 at the station cells", era5_rows(methods, TEST))
    part(
        "Test: ERA5 days 19–21, a random 10 % of the cells as context (those of "
        "`finetune_era5.py`)",
        era5_rows(methods, TEST, random_cells_task),
    )
    part("Test: Texas", texas_rows(predictors(models, args.baselines)))
    if args.write:
        command = " ".join(["python recipes/pretrain/compare_zero_shot.py", *sys.argv[1:]])
        text = (
            f"## Zero-shot models side by side (`{command}`, issue 28)\n\n"
            f"Machine: {machine()}; {(time.perf_counter() - start) / 60:.1f} min.  Each "
            "model with no trend and with `trend='linear'`, each with and without "
            "`calibrate=True`.  The validation tables (ERA5 days 17–18; synthetic fields "
            "of `evaluate_zero_shot.py`'s protocol, seeds 1–"
            f"{args.fields}) are where a model and its settings are chosen; the test tables "
            "(ERA5 days 19–21, the 12 six-hourly frames; Texas, 186 stations of one day) "
            "are reported after that choice.\n\n" + "\n".join(parts)
        )
        write_section("compare_zero_shot", text)
        print("wrote the compare_zero_shot section of docs/benchmarks.md")


if __name__ == "__main__":
    main()

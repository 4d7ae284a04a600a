"""Whether ``gp-sphere-bank`` still needs the zero-shot knobs (issue 28, item 4).

Two heuristics were added for the first zero-shot model, ``gp-sphere``, before the
bank of exact GPs existed:

* the **working size**: every context's distances are rescaled so that its points'
  rms radius is the model's ``training["context_rms_km"]`` (450 km), because the
  attention bias resolves some distances better than others;
* the **GLS trend's fixed covariance**: ``trend="linear"`` fits the plane by
  generalised least squares under an exponential correlation of range 0.5 × the
  points' rms radius plus a nugget of 0.05 (``xnp.data.trend``), which down-weights
  clustered stations as kriging's mean does.

The bank's members take their lengthscales as fractions of each context's own rms
radius, so the bank alone is scale-free and might make the working size
unnecessary; and its members' exact posterior means might make a plain
least-squares plane (no correlation at all) good enough.  This study measures both
with the shipped defaults otherwise (``trend="linear"``, ``calibrate=True``), and
with no trend, where only the working size matters:

* ``shipped``: as the package predicts;
* ``no working size``: the model sees the context's distances as they are;
* ``OLS plane``: the plane fitted by ordinary least squares (the GLS correlation
  replaced by the identity);
* ``neither``: both simplifications.

**The rule, written before the first run (2026-12-03):** a knob is removed if
removing it, with the shipped defaults otherwise, raises the validation NLL by at
most 0.01 and the validation RMSE by at most 1 % on each validation table: ERA5 UK
days 17–18 at the 218 station cells, the same 8 frames with a random 10 % of the cells
as context, and NLL on each box of the held-out synthetic fields (seeds 1–4 of
``evaluate_zero_shot.py``'s protocol).  Otherwise it stays, and the tables say what it
earns.  ``--test`` then scores the same variants on the test data (ERA5 days 19–21
with both contexts; Texas leave-one-out and 2° block CV) for the record; the test
data choose nothing.

    python recipes/pretrain/bank_knobs.py [--test] [--model gp-sphere-bank]

About 2 minutes on two cores for the validation tables, 11 with ``--test``.

**Outcome** (2026-12-03, AMD EPYC, 2 cores; ``gp-sphere-bank``).  NLL (RMSE in K) with
``trend="linear"`` and ``calibrate=True``; validation:

| variant | ERA5 station cells | ERA5 random 10 % | synthetic 300 / 1000 / 3000 km |
|---|---|---|---|
| shipped | 0.767 (0.617) | 0.619 (0.512) | 0.332 / 0.311 / 0.289 |
| no working size | 0.776 (0.615) | 0.620 (0.512) | 0.332 / 0.348 / 0.334 |
| OLS plane | 0.883 (0.985) | 0.589 (0.498) | 0.342 / 0.318 / 0.294 |
| neither | 0.898 (0.998) | 0.592 (0.499) | 0.341 / 0.359 / 0.331 |

With no trend, the working size is worth more still on the largest fields (0.297 against
0.405 nats at 3000 km).  By the rule **both knobs stay**: without the working size the
synthetic NLL rises by 0.037 and 0.045 nats at 1000 and 3000 km (the bank is
scale-free, the attention biases are not); without the GLS correlation the plane
follows the dense clusters of the station network and the RMSE at the station cells
rises from 0.617 to 0.985 K (on a uniform random design the plain plane is a little
better: 0.498 against 0.512 K).  For the record, the test data, which chose nothing
(``--test``): ERA5 days 19–21 at the station cells 0.843 (0.574) shipped, 0.851 (0.577)
without the working size, 0.914 (0.777) with the OLS plane; with a random 10 % 0.646
(0.546), 0.645 (0.545), 0.625 (0.531); Texas leave-one-out 1.930 (1.530), 1.920 (1.518),
1.912 (1.502), neither 1.900 (1.493); 2° block CV 1.991 (1.575), 1.988 (1.569), 1.968
(1.555), neither 1.965 (1.552).  Texas and the uniform design would prefer the simpler
variants; the clustered ERA5 stations and the large synthetic fields need the knobs.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import xnp
import xnp.data.trend as trend_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_zero_shot import TEST, VALIDATION, era5_rows, field_rows, load, texas_rows
from finetune_era5 import random_cells_task

#: The GLS range factor that turns the trend's fit into ordinary least squares: the
#: exponential correlation of any two distinct points is exp(-d / r) = 0.
OLS_RANGE = 1e-9


def without_working_size(model: xnp.NeuralProcess) -> xnp.NeuralProcess:
    """A shallow copy of ``model`` that sees every context at its own size."""
    out = copy.copy(model)
    out.training = {k: v for k, v in (model.training or {}).items() if k != "context_rms_km"}
    return out


@contextlib.contextmanager
def gls_range(factor: float) -> Iterator[None]:
    """Fit the trend under an exponential correlation of range ``factor`` × rms radius."""
    saved = trend_module._RANGE
    trend_module._RANGE = factor
    try:
        yield
    finally:
        trend_module._RANGE = saved


class Variant:
    """One setting of the knobs: a model and the GLS range its trend is fitted with."""

    def __init__(self, model: xnp.NeuralProcess, range_factor: float) -> None:
        self.model, self.range_factor = model, range_factor

    def predictor(self, trend: str):
        def predict(context, targets):
            with gls_range(self.range_factor):
                return xnp.predict(self.model, context, targets, trend=trend, calibrate=True)

        return predict


def variants(model: xnp.NeuralProcess) -> dict[str, Variant]:
    shipped = trend_module._RANGE
    plain = without_working_size(model)
    return {
        "shipped": Variant(model, shipped),
        "no working size": Variant(plain, shipped),
        "OLS plane": Variant(model, OLS_RANGE),
        "neither": Variant(plain, OLS_RANGE),
    }


def methods(knobs: dict[str, Variant]) -> dict:
    """Each variant with ``trend='linear'`` (the default) and, for the working size, none."""
    out = {f"{name}, trend='linear'": v.predictor("linear") for name, v in knobs.items()}
    for name in ("shipped", "no working size"):
        out[f"{name}, trend='none'"] = knobs[name].predictor("none")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gp-sphere-bank")
    parser.add_argument("--fields", type=int, default=4, help="synthetic fields per box (4)")
    parser.add_argument("--test", action="store_true", help="also score the test data")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    meths = methods(variants(load(args.model)))
    start = time.perf_counter()
    tables = [
        ("Validation: ERA5 days 17–18 at the station cells", lambda: era5_rows(meths, VALIDATION)),
        ("Validation: ERA5 days 17–18, a random 10 % of the cells",
         lambda: era5_rows(meths, VALIDATION, random_cells_task)),
        ("Validation: held-out synthetic fields (NLL)", lambda: field_rows(meths, args.fields)),
    ]  # fmt: skip
    if args.test:
        tables += [
            ("Test: ERA5 days 19–21 at the station cells", lambda: era5_rows(meths, TEST)),
            ("Test: ERA5 days 19–21, a random 10 % of the cells",
             lambda: era5_rows(meths, TEST, random_cells_task)),
            ("Test: Texas", lambda: texas_rows(meths)),
        ]  # fmt: skip
    for title, table in tables:
        print(f"## {title}\n", flush=True)
        print(table() + "\n", flush=True)
    print(f"{(time.perf_counter() - start) / 60:.1f} min")


if __name__ == "__main__":
    main()

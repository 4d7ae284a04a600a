"""The zero-shot trend's GLS covariance fitted per context (REML) against the fixed one.

A check on the validation frames only (ERA5 UK days 17–18, six-hourly, the 218
HadISD station cells as context and the other 1,399 cells as targets): for each
frame, the exponential range (as a multiple of the points' rms radius) and nugget
that maximise the restricted likelihood of the plane's residuals, then the shipped
``gp-sphere`` with ``trend="linear"`` under them, against the fixed covariance the
package uses (range 0.5, nugget 0.05).  The result is in the docstring of
``train_gp_sphere.py`` (not kept: RMSE a little lower, NLL and CRPS higher).

    python recipes/pretrain/trend_reml.py

About a minute on two cores.  Prints a line per frame and the means.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import scipy.linalg
import scipy.optimize

import xnp
import xnp.data.trend as trend_module
from xnp.geo.sphere import unit_vectors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from zero_shot_trend import era5_task

METRICS = ("rmse", "nll", "crps", "coverage_95")
FIXED = (trend_module._RANGE, trend_module._NUGGET)


def reml(xyz: np.ndarray, y: np.ndarray, design: np.ndarray) -> tuple[float, float]:
    """Range factor and nugget of the trend's covariance (:func:`gls_covariance`) by REML."""
    n, p = design.shape

    def loss(theta: np.ndarray) -> float:
        r, nugget = np.exp(theta)
        cov = trend_module.gls_covariance(xyz, r, nugget)
        try:
            factor = scipy.linalg.cho_factor(cov, lower=True)
        except np.linalg.LinAlgError:
            return 1e10
        ca = scipy.linalg.cho_solve(factor, design)
        normal = design.T @ ca
        resid = y - design @ np.linalg.solve(normal, ca.T @ y)
        sill = resid @ scipy.linalg.cho_solve(factor, resid) / (n - p)
        logdet = 2.0 * np.sum(np.log(np.diag(factor[0])))
        return 0.5 * ((n - p) * np.log(sill) + logdet + np.linalg.slogdet(normal)[1])

    bounds = [(np.log(0.02), np.log(10.0)), (np.log(1e-3), np.log(2.0))]
    starts = ([0.5, 0.05], [2.0, 0.2], [0.1, 0.01])
    fits = [scipy.optimize.minimize(loss, np.log(x0), method="L-BFGS-B", bounds=bounds)
            for x0 in starts]  # fmt: skip
    r, nugget = np.exp(min(fits, key=lambda f: f.fun).x)
    return float(r), float(nugget)


def main() -> None:
    warnings.simplefilter("ignore")
    model = xnp.pretrained("gp-sphere")
    context, truth, targets = era5_task(np.arange(16 * 24, 18 * 24, 6))
    s = np.stack([context.latitude.values, context.longitude.values], -1)
    xyz = unit_vectors(s)
    design = np.c_[np.ones(len(s)), s - s.mean(0)]
    rows: dict[str, list[list[float]]] = {"fixed": [], "REML": []}
    try:
        for i in range(context.sizes["time"]):
            frame = context.isel(time=i)
            fitted = reml(xyz, frame.t2m.values.astype(np.float64), design)
            for name, (r, nugget) in {"fixed": FIXED, "REML": fitted}.items():
                trend_module._RANGE, trend_module._NUGGET = r, nugget
                pred = xnp.predict(model, frame, targets, trend="linear")
                scores = xnp.evaluate(pred, truth.isel(time=i), dim="cell")
                rows[name].append([float(scores[f"t2m_{m}"]) for m in METRICS])
            print(f"frame {i}: range {fitted[0]:.3f}, nugget {fitted[1]:.3f}; "
                  f"fixed {np.round(rows['fixed'][-1], 3)}, REML {np.round(rows['REML'][-1], 3)}",
                  flush=True)  # fmt: skip
    finally:
        trend_module._RANGE, trend_module._NUGGET = FIXED
    for name, values in rows.items():
        print(f"{name}: " + ", ".join(f"{m} {v:.3f}" for m, v in
                                      zip(METRICS, np.mean(values, 0), strict=True)))  # fmt: skip


if __name__ == "__main__":
    main()

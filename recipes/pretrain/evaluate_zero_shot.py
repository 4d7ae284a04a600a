"""Zero-shot check of a pretrained model against IDW and the exact GP on synthetic fields.

For three lengthscales, a GP field on a 24 × 24 grid (``xnp.datasets.gp_sphere``) is
observed at 20 % of its cells; the rest is predicted by the model (no fitting), by
inverse-distance weighting and by the exact GP with hyperparameters fitted to the context.

    python recipes/pretrain/evaluate_zero_shot.py [MODEL_DIR]   # default: the shipped gp-sphere
"""

from __future__ import annotations

import sys

import numpy as np
import xarray as xr

import xnp


def main() -> None:
    model = xnp.load(sys.argv[1]) if len(sys.argv) > 1 else xnp.pretrained("gp-sphere")
    print("| field lengthscale / box | xnp zero-shot RMSE / NLL / 95 % cov. | IDW RMSE / NLL "
          "| exact GP (fitted) RMSE / NLL |\n|---|---|---|---|")  # fmt: skip
    for ell, box in ((300, 5), (1000, 15), (3000, 40)):
        ds = xnp.datasets.gp_sphere(
            n_lat=24, n_lon=24, lat_range=(45 - box, 45 + box), lon_range=(-box, box),
            lengthscale_km=ell, n_time=1, noise=0.05, seed=1,
        ).isel(time=0)  # fmt: skip
        mask = xr.DataArray(np.random.default_rng(0).random((24, 24)) < 0.2, dims=("lat", "lon"))
        context, truth, grid = ds[["field"]].where(mask), ds.where(~mask), ds.drop_vars("field")
        scores = [
            xnp.evaluate(p.where(~mask), truth)
            for p in (
                xnp.predict(model, context, grid),
                xnp.baselines.InverseDistanceWeighting().predict(context, grid),
                xnp.baselines.GaussianProcess().predict(context, grid),
            )
        ]
        np_, idw, gp = scores
        print(f"| {ell} km / {2 * box}° | {float(np_.field_rmse):.3f} / {float(np_.field_nll):.3f}"
              f" / {float(np_.field_coverage_95):.2f} | {float(idw.field_rmse):.3f} / "
              f"{float(idw.field_nll):.3f} | {float(gp.field_rmse):.3f} / "
              f"{float(gp.field_nll):.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()

"""Worked example: ten new stations for the Texas network (issue 30).

    python recipes/benchmarks/placement_texas.py [--sites 10] [--no-write] [--quick]

The 186 Texas ASOS stations (daily mean air temperature, 2018-02-26) are the
context of the zero-shot ``gp-sphere``; the candidates and the region to be mapped
are a 0.5° grid over the network's bounding box, restricted to cells within 150 km
of a station (inside the network's footprint).  Ten sites are chosen three ways:

* **greedy** (:func:`xnp.placement.place_sensors`, ``acquisition="mean_std"``);
* **space-filling**: each new site the candidate farthest from the stations and the
  sites before it (greedy maximin);
* **random**: 5 random draws of the candidates.

Each design is scored the same way: its sites join the context with the model's
mean there (their true values are unknown), the grid is predicted with
``xnp.predict``, and the mean predictive std over the region is reported after 1, 5
and 10 sites.  Writes the ``placement_texas`` section of docs/benchmarks.md and a
map.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import xarray as xr

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stations
from _report import machine, write_section
from placement_era5 import space_filling

import xnp
from xnp.geo.sphere import great_circle_km, unit_vectors
from xnp.placement import place_sensors
from xnp.plot import plot_placement

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "docs" / "images" / "placement_texas.png"
COMMAND = "python recipes/benchmarks/placement_texas.py"
VAR = "air_temperature"


def candidate_grid(obs: xr.Dataset, step: float = 0.5, within_km: float = 150.0):
    """Points of a ``step``° grid over the stations' box within ``within_km`` of one."""
    lat = np.arange(np.floor(obs.lat.min()), np.ceil(obs.lat.max()) + step / 2, step)
    lon = np.arange(np.floor(obs.lon.min()), np.ceil(obs.lon.max()) + step / 2, step)
    glat, glon = (a.ravel() for a in np.meshgrid(lat, lon, indexing="ij"))
    s = np.stack([glat, glon], -1)
    st = np.stack([obs.lat.values, obs.lon.values], -1)
    chord = np.linalg.norm(unit_vectors(s)[:, None] - unit_vectors(st)[None], axis=-1)
    near = great_circle_km(chord).min(axis=1) <= within_km
    s = s[near]
    return xr.Dataset(coords={"lat": ("point", s[:, 0]), "lon": ("point", s[:, 1])}), s


def mean_std_after(model, obs: xr.Dataset, grid: xr.Dataset, sites: np.ndarray) -> float:
    """Mean predictive std over ``grid`` with ``sites`` added at the model's mean."""
    if len(sites):
        pred = xnp.predict(model, obs, grid.isel(point=sites), trend="none", calibrate=False)
        extra = xr.Dataset(
            {VAR: ("station", pred[f"{VAR}_mean"].values, obs[VAR].attrs)},
            coords={"station": [f"new{i}" for i in range(len(sites))],
                    "lat": ("station", grid.lat.values[sites]),
                    "lon": ("station", grid.lon.values[sites])},
        )  # fmt: skip
        obs = xr.concat([obs, extra], "station")
    return float(xnp.predict(model, obs, grid, trend="none", calibrate=False)[f"{VAR}_std"].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=10)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--quick", action="store_true", help="2 sites; no docs")
    args = parser.parse_args()
    n_sites = 2 if args.quick else args.sites
    counts = [c for c in (1, 5, 10) if c <= n_sites]
    warnings.simplefilter("ignore")
    obs = stations.open_texas()
    model = xnp.pretrained("gp-sphere")
    grid, s = candidate_grid(obs)
    t0 = time.perf_counter()
    greedy = place_sensors(model, obs, grid, grid, n_sites, progress=False)
    per_step = (time.perf_counter() - t0) / n_sites
    st = np.stack([obs.lat.values, obs.lon.values], -1)
    all_s = np.concatenate([st, s])
    fill = space_filling(np.arange(len(st)), np.arange(len(st), len(all_s)), all_s, n_sites)
    designs = {
        "greedy (model std)": [greedy.site_index.values],
        "space-filling (maximin distance)": [np.asarray(fill) - len(st)],
        "random (mean of 5 draws)": [np.random.default_rng(k).choice(len(s), n_sites, False)
                                     for k in range(5)],
    }  # fmt: skip
    before = mean_std_after(model, obs, grid, np.array([], int))
    rows = {name: [np.mean([mean_std_after(model, obs, grid, d[:c]) for d in draws])
                   for c in counts] for name, draws in designs.items()}  # fmt: skip
    for name, vals in rows.items():
        print(name, np.round(vals, 4), flush=True)
    table = ("| design | " + " | ".join(f"{c} site{'s' if c > 1 else ''}" for c in counts)
             + " |\n|---|" + "---|" * len(counts) + "\n"
             + "\n".join(f"| {n} | " + " | ".join(f"{v:.3f}" for v in vals) + " |"
                         for n, vals in rows.items()))  # fmt: skip
    where = zip(greedy.site_lat.values, greedy.site_lon.values, strict=True)
    sites = ", ".join(f"({a:.1f}° N, {-b:.1f}° W)" for a, b in where)
    text = (
        f"## Ten new stations for the Texas network (`{COMMAND}`, issue 30)\n\n"
        f"Machine: {machine()}.\n\n"
        "The zero-shot `gp-sphere` conditioned on the 186 Texas stations (2018-02-26 daily "
        f"mean air temperature); candidates and region: the {len(s)} points of a 0.5° grid "
        "within 150 km of a station. Mean predictive std over the region (°C), each "
        "design's sites added with the model's mean there, the grid predicted with "
        f"`xnp.predict`; the stations alone: {before:.3f} °C. Greedy: {per_step:.1f} s per "
        f"step over {len(s)} candidates.\n\n"
        + table
        + f"\n\nThe greedy sites, in order: {sites}.\n\n"
        + f"![The first greedy step's acquisition map](images/{IMAGE.name})\n"
    )
    print(text)
    if not (args.no_write or args.quick):
        plot_placement(greedy, coastlines=False).savefig(IMAGE, dpi=110, bbox_inches="tight")
        write_section("placement_texas", text)


if __name__ == "__main__":
    main()

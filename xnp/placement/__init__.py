"""Sensor placement: where new observations would most improve a map (greedy).

:func:`place_sensors` chooses new sites one at a time.  At each step every
remaining candidate is tried: it joins the context with a value, the model
predicts the region to be mapped, and an acquisition scores the result; the best
candidate is kept and the next step starts from the context with it.  Candidates
are tried in batches along the batch axis of one conditioning pass, so thousands
of them per step stay fast.  A model with a GP bank (``gp-sphere-bank``,
``gp-sphere-cluster-bank``) does not refactor its bank for every candidate: the bank
is conditioned on the context once per batch and grown by a block update of its inverses
(:meth:`xnp.models.bsa_tnp.BSATNP.condition_added`), the bank's lengthscales held at
the context's (one site moves the context's spread by about ``1 / N`` of itself), so
a candidate costs the network's pass and ``O(N (N + M))`` for the bank instead of
``O(N² M)`` over ``M`` region points.

The context is read and normalised once, from the current observations (for a
zero-shot model: its standardisation and working size), and kept as sites are tried
and added, so every candidate is scored on the same footing.

Sites usually serve for years, not for one map.  A context of several times (the
past days' maps at the stations, say) designs for them all: each time's context is
read on its own, a candidate's score is the mean of its scores over the times, and a
chosen site joins every time's context with that time's value (as DeepSensor's
greedy algorithm averages over its tasks).  One time's design can follow that time's
weather; on ERA5 the design over past days placed the better sites
(``docs/benchmarks.md``).

With ``lazy=True`` the steps after the first try candidates in the order of the
improvement they offered at the step before, a batch at a time, and stop as soon as
no untried candidate's earlier improvement could beat the best one found (Minoux's
lazy greedy).  The choice is the exhaustive greedy's whenever adding a site never
makes another candidate more useful than it was (submodularity: a Gaussian
process's variance reduction nearly has it, a neural process's is not guaranteed
to); ``docs/benchmarks.md`` compares the two.  It pays when sites are many: most
steps then try one or two batches instead of every candidate.

A new site's value is unknown before it is built.  As DeepSensor does, it is taken
to be the model's predictive mean at the site (given the context so far); only an
*oracle* acquisition, for evaluation when the truth is known, uses the true value.

By default the scores are the network's alone (``trend="none"``), without the
context's trend that a zero-shot model such as ``gp-sphere`` removes by default when
it maps.  ``trend=None`` (the model's own) or ``"constant"`` / ``"linear"`` score the
map :func:`xnp.predict` makes with that ``trend=``: the network sees the residuals of
the context's GLS trend (:class:`xnp.data.trend.Trend`), and the map's predictive
variance is the network's plus the share of the trend estimate's variance it leaves
(:meth:`~xnp.data.trend.Trend.add_to`).  A new site makes the trend better known too,
most where the map extrapolates it, far from the stations: each candidate is scored
with the trend variance that its own addition leaves
(:meth:`~xnp.data.trend.Trend.covariance_with`, exact for the fixed GLS weights), while
the trend itself stays the one fitted to the current observations (a site added with
the map's mean hardly moves it; for the oracles, which add true values, that is an
approximation).  On the ERA5 validation days the network's std chose the better
sites (``docs/benchmarks.md``, section "Sensor placement on ERA5 UK"), hence the
default.

Acquisitions (lower is better, except ``"std"``):

``"mean_std"``
    the mean predictive standard deviation over the region;
``"mean_variance"``
    the mean predictive variance over the region;
``"std"``
    the predictive standard deviation at the candidate itself (before adding it:
    the most uncertain place; higher is better, and no region pass is needed);
``"oracle_rmse"``, ``"oracle_nll"``
    the RMSE or Gaussian NLL of the map over the region against ``truth``, after
    adding the candidate with its true value.

Examples
--------
>>> import numpy as np
>>> import xnp
>>> field = xnp.datasets.gp_sphere(
...     n_lat=6, n_lon=8, n_time=1, lat_range=(48, 54), lon_range=(-6, 2), lengthscale_km=400.0
... ).isel(time=0)
>>> obs = field.where((field.lat < 50) & (field.lon < -2))  # observed in one corner
>>> out = place_sensors(
...     xnp.pretrained("gp-sphere"),
...     obs,
...     field.drop_vars("field"),
...     field.drop_vars("field"),
...     n_sites=2,
...     progress=False,
... )
>>> out.sizes["step"], bool(out.acquisition[1] < out.acquisition_before)
(2, True)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import xarray as xr
from tqdm.auto import tqdm

from xnp.api.sizes import inner_task
from xnp.data.tasks import ForecastTasks, check_count
from xnp.errors import ConfigError
from xnp.placement.per_time import Frame, frames_of, truth_of
from xnp.placement.reading import points_of, shares
from xnp.placement.scoring import lazily
from xnp.prediction.core import check_model, resolve_trend, with_context
from xnp.shipped import resolve_model

__all__ = ["ACQUISITIONS", "place_sensors"]

#: The acquisitions, and whether a higher score is better.
ACQUISITIONS = {
    "mean_std": False,
    "mean_variance": False,
    "std": True,
    "oracle_rmse": False,
    "oracle_nll": False,
}


def place_sensors(
    model: Any,
    context: xr.Dataset | xr.DataArray,
    candidates: xr.Dataset | xr.DataArray,
    region: xr.Dataset | xr.DataArray,
    n_sites: int,
    *,
    acquisition: str = "mean_std",
    trend: str | None = "none",
    truth: xr.Dataset | xr.DataArray | None = None,
    weights: xr.DataArray | None = None,
    batch_size: int = 64,
    lazy: bool = False,
    progress: bool = True,
) -> xr.Dataset:
    """Choose ``n_sites`` new observation sites greedily from ``candidates``.

    Parameters
    ----------
    model : NeuralProcess, path or str
        An interpolation model (fitted, fine-tuned or zero-shot).
    context : Dataset or DataArray
        The current observations: one time, or several along a time dimension (for
        instance the past days' maps at the stations), when the new sites should
        serve many maps: each time's context is read and normalised on its own,
        every candidate's score is the mean of its scores over the times, and a
        chosen site joins every time's context (with that time's value).
    candidates : Dataset or DataArray
        Where a site may go: the points of a grid or station table (their
        coordinates; data variables other than the model's covariates are
        ignored), or a boolean DataArray whose True cells are allowed.
    region : Dataset or DataArray
        The targets whose prediction the sites should improve (e.g. the whole
        grid).
    n_sites : int
        How many sites to choose (at most the number of candidates).
    acquisition : str
        What a site should improve (see the module): ``"mean_std"`` (default),
        ``"mean_variance"``, ``"std"``, ``"oracle_rmse"`` or ``"oracle_nll"``.
    trend : {"none", None, "constant", "linear"}
        ``"none"`` (default) scores the network alone; otherwise the map
        :func:`xnp.predict` makes with this ``trend=`` (None: the model's own,
        ``"linear"`` for ``gp-sphere``), with the variance its estimate keeps once a
        candidate is added (see the module).
    truth : Dataset or DataArray, optional
        The true field at the candidates and the region (same coordinates), for
        the oracle acquisitions.
    weights : DataArray, optional
        How much each region point counts in the region acquisitions (finite, at
        least 0, not all 0; on the region's coordinates, e.g. ``cos(lat)`` for area,
        or the error a map of the current network made in the past): the means over
        the region become weighted means.  None: every point counts the same.
    batch_size : int
        Candidates tried per conditioning pass.
    lazy : bool
        Lazy greedy (see the module): after the first step, retry candidates in
        order of their last improvement and stop when no other can beat the best.
        For ``"mean_std"`` and ``"mean_variance"``.  ``acquisition_map`` is then
        NaN for the candidates a step did not retry.
    progress : bool
        Show a progress bar over the steps.

    Returns
    -------
    xr.Dataset
        Along ``step``: ``site_lat``, ``site_lon``, ``site_index`` (into the
        candidates), ``site_value`` (the value the site was added with, in the
        variable's units; along ``time`` too for a context of several times) and
        ``acquisition`` (the score after adding it); along
        ``(step, candidate)``: ``acquisition_map`` (each candidate's score at each
        step; NaN for sites already chosen, and with ``lazy`` for candidates not
        retried); ``acquisition_before`` (the score of the context alone; for
        ``"std"``, the largest std at a candidate); ``tried`` along ``step``, the
        candidates each step scored.
    """
    if acquisition not in ACQUISITIONS:
        raise ConfigError(f"acquisition must be one of {list(ACQUISITIONS)}; got {acquisition!r}.")
    check_count(n_sites=n_sites, batch_size=batch_size)
    if lazy and acquisition not in ("mean_std", "mean_variance"):
        raise ConfigError(
            f"lazy=True is for the region acquisitions 'mean_std' and 'mean_variance' "
            f"(their improvements shrink as sites are added); got {acquisition!r}. Use "
            "lazy=False."
        )
    oracle = acquisition.startswith("oracle")
    if weights is not None and acquisition == "std":
        raise ConfigError(
            "weights= weighs the region acquisitions; acquisition='std' scores the "
            "candidate alone. Use 'mean_std' or 'mean_variance', or drop weights."
        )
    if oracle and truth is None:
        raise ConfigError(f"acquisition={acquisition!r} scores against the truth; pass truth=.")
    model = check_model(resolve_model(model) if isinstance(model, str | os.PathLike) else model)
    trend = resolve_trend(model, trend)
    task = getattr(model, "task", None)
    if task is not None and isinstance(inner_task(task), ForecastTasks):
        raise ConfigError(
            "sensor placement maps one time; this model forecasts. Use an "
            "interpolation model (fitted with SpatialTasks, or zero-shot)."
        )
    model, data = with_context(model, context, "context")
    time, datas = frames_of(model, data)
    cand_ps = points_of(candidates, datas[0], model, "candidates")
    region_ps = points_of(region, datas[0], model, "region")
    if n_sites > len(cand_ps):
        raise ConfigError(
            f"n_sites={n_sites} is more than the {len(cand_ps)} candidates; ask "
            "for fewer sites or give more candidates."
        )
    share = shares(weights, region_ps, model)  # the same at every time: read once
    frames = [Frame.read(model, d, trend, cand_ps, region_ps, truth_of(truth if oracle else None,
                         time, d), share) for d in datas]  # fmt: skip
    best_is_high = ACQUISITIONS[acquisition]
    remaining = np.ones(len(cand_ps), bool)
    scores = np.full((n_sites, len(cand_ps)), np.nan)
    chosen, values, tried = [], [], []
    before = None
    gains = np.full(len(cand_ps), np.inf)  # each candidate's last improvement (lazy)
    for step in tqdm(range(n_sites), desc="placing", disable=not progress):
        for f in frames:
            f.condition()
        if acquisition == "std":
            score = np.mean([f.candidate_std() for f in frames], axis=0)
            if step == 0:
                before = float(score.max())
        else:
            if step == 0 or lazy:  # the score without a new site (lazy: every step's)
                now = float(np.mean([f.region_score(acquisition) for f in frames]))
                before = now if step == 0 else before

            def attempt(which):
                return np.mean([f.attempt(which, acquisition, batch_size) for f in frames], 0)

            if lazy and step > 0:
                score = lazily(attempt, np.flatnonzero(remaining), gains, now, batch_size)
            else:
                score = attempt(np.flatnonzero(remaining))
            if lazy:
                fresh = np.isfinite(score)
                gains[fresh] = now - score[fresh]
        score = np.where(remaining, score, np.nan)
        tried.append(int(np.isfinite(score).sum()))
        scores[step] = score
        pick = int(np.nanargmax(score) if best_is_high else np.nanargmin(score))
        chosen.append(pick)
        values.append([f.add(pick) for f in frames])
        remaining[pick] = False
    idx = np.asarray(chosen)
    values = np.asarray(values, np.float64)  # [step, frame, variable]
    if time is None:
        site_value = (("step", "variable"), values[:, 0])
    else:
        site_value = (("step", time, "variable"), values)
    out = xr.Dataset(
        {
            "site_lat": ("step", cand_ps.s[idx, 0]),
            "site_lon": ("step", cand_ps.s[idx, 1]),
            "site_index": ("step", idx),
            "site_value": site_value,
            "acquisition": ("step", scores[np.arange(n_sites), idx]),
            "acquisition_map": (("step", "candidate"), scores),
            "acquisition_before": ((), float(before)),
            "tried": ("step", np.asarray(tried)),
        },
        coords={
            "step": np.arange(1, n_sites + 1),
            "variable": list(model.variables),
            "candidate_lat": ("candidate", cand_ps.s[:, 0]),
            "candidate_lon": ("candidate", cand_ps.s[:, 1]),
            **({} if time is None else {time: data[time].values}),
        },
        attrs={
            "acquisition": acquisition,
            "site values": (
                "the true values (oracle)"
                if oracle
                else "the model's predictive mean at the site given the context so far"
            ),
        },
    )
    return out

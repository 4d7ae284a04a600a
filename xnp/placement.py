"""Sensor placement: where new observations would most improve a map (greedy).

:func:`place_sensors` chooses new sites one at a time.  At each step every
remaining candidate is tried: it joins the context with a value, the model
predicts the region to be mapped, and an acquisition scores the result; the best
candidate is kept and the next step starts from the context with it.  Candidates
are tried in batches along the batch axis of one conditioning pass, so thousands
of them per step stay fast.

The context is read and normalised once, from the current observations (for a
zero-shot model: its standardisation and working size), and kept as sites are tried
and added, so every candidate is scored on the same footing.

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
from scipy.spatial import cKDTree
from tqdm.auto import tqdm

from xnp.api.sizes import inner_task
from xnp.arrays import Points
from xnp.data.flatten import PointSet, to_points
from xnp.data.tasks import ForecastTasks, check_count
from xnp.errors import ConfigError, EmptyDataError
from xnp.geo.sphere import unit_vectors
from xnp.infer.chunks import real_points
from xnp.prediction.context import Options, build_context, coord_names, model_points, prior_std
from xnp.prediction.core import check_model, with_context
from xnp.prediction.guards import outside_grid
from xnp.prediction.templates import template_of
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
        The current observations (one time).
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
        variable's units) and ``acquisition`` (the score after adding it); along
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
    task = getattr(model, "task", None)
    if task is not None and isinstance(inner_task(task), ForecastTasks):
        raise ConfigError(
            "sensor placement maps one time; this model forecasts. Use an "
            "interpolation model (fitted with SpatialTasks, or zero-shot)."
        )
    model, data = with_context(model, context, "context")
    ctx = build_context(model, data, Options(None, {}, "1GiB", False))
    model = ctx.model
    cand_ps = _points_of(candidates, data, model, "candidates")
    region_ps = _points_of(region, data, model, "region")
    if n_sites > len(cand_ps):
        raise ConfigError(
            f"n_sites={n_sites} is more than the {len(cand_ps)} candidates; ask "
            "for fewer sites or give more candidates."
        )
    # (all real points: to_points keeps only those with the model's covariates)
    cand = real_points(model_points(cand_ps, model, values=False))
    reg = real_points(model_points(region_ps, model, values=False))
    truth_c = truth_r = None
    if oracle:
        truth_c, truth_r = (_truth_at(truth, ps, model) for ps in (cand_ps, region_ps))
    share = _shares(weights, region_ps, model)
    scale = prior_std(model)  # normalised std → the variables' units
    true_fill = None  # the oracles add each site with its true value (normalised)
    if truth_c is not None:
        true_fill = model.normaliser.transform(truth_c, list(model.variables))
    grown = {k: v[None] for k, v in real_points(ctx.points).items()}  # [1, N, .]
    cand_points = Points.from_arrays(**{k: cand[k][None] for k in ("s", "t", "x")},
                                     dim_y=len(scale))  # fmt: skip
    best_is_high = ACQUISITIONS[acquisition]
    remaining = np.ones(len(cand_ps), bool)
    scores = np.full((n_sites, len(cand_ps)), np.nan)
    chosen, values, tried = [], [], []
    before = None
    gains = np.full(len(cand_ps), np.inf)  # each candidate's last improvement (lazy)
    for step in tqdm(range(n_sites), desc="placing", disable=not progress):
        state = ctx.predictor.condition(Points.from_arrays(**grown))
        mean_c, std_c = (a[0] for a in ctx.predictor.predict_state(state, cand_points))
        fill = mean_c if true_fill is None else true_fill
        if acquisition == "std":
            score = (std_c * scale).mean(-1)
            if step == 0:
                before = float(score.max())
        else:
            if step == 0 or lazy:  # the score without a new site (lazy: every step's)
                now = _score_region(ctx, state, reg, acquisition, (truth_r, share), scale, 1)[0]
                before = now if step == 0 else before

            def attempt(which, grown=grown, fill=fill):
                return _try_candidates(ctx, grown, cand, fill, reg, acquisition,
                                       (truth_r, share), scale, which, batch_size)  # fmt: skip

            if lazy and step > 0:
                score = _lazily(attempt, np.flatnonzero(remaining), gains, now, batch_size)
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
        values.append(model.denormalise(fill[pick][None, None], std_c[pick][None, None])[0][0, 0])
        remaining[pick] = False
        new = {k: cand[k][pick] for k in ("s", "t", "x")}
        new["f"] = np.asarray(fill[pick], np.float32)
        grown = {k: np.concatenate([grown[k], new[k][None, None]], axis=1) for k in grown}
    idx = np.asarray(chosen)
    out = xr.Dataset(
        {
            "site_lat": ("step", cand_ps.s[idx, 0]),
            "site_lon": ("step", cand_ps.s[idx, 1]),
            "site_index": ("step", idx),
            "site_value": (("step", "variable"), np.asarray(values, np.float64)),
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


def _points_of(obj: Any, data: xr.Dataset, model: Any, what: str) -> PointSet:
    """The points of ``obj`` (a template, or a boolean mask: its True cells)."""
    allowed = None
    if isinstance(obj, xr.DataArray) and obj.dtype == bool:
        allowed = obj
        obj = obj.to_dataset(name="_allowed").drop_vars("_allowed")
    template = template_of(obj, data, tuple(model.covariates), getattr(model, "coords", None))
    ps = to_points(
        template.points, None, covariates=model.covariates, **coord_names(model, template.points)
    )
    if allowed is not None:
        keep = np.asarray(allowed.transpose(*ps.dims).values).ravel()[ps.index]
        ps = ps.take(keep)
    if not len(ps):
        raise EmptyDataError(
            f"the {what} hold no point (with the model's covariates); give at least one."
        )
    outside = outside_grid(model, ps.s)
    if outside is not None and outside.any():
        raise ConfigError(
            f"{int(outside.sum())} of the {what} lie outside the model's grid; "
            "select points inside it."
        )
    return ps


def _truth_at(truth: Any, ps: PointSet, model: Any) -> np.ndarray:
    """The true values ``[N, Dy]`` at the points ``ps`` (the nearest truth point, same place)."""
    if isinstance(truth, xr.DataArray):
        truth = truth.to_dataset(name=truth.name or model.variables[0])
    missing = [v for v in model.variables if v not in truth.data_vars]
    if missing:
        raise ConfigError(f"truth holds no {missing}; it needs the model's variables.")
    return _values_at(truth, list(model.variables), ps, model, "truth")


def _values_at(data: xr.Dataset, names: list[str], ps: PointSet, model: Any, what: str):
    """``data``'s variables ``names`` ``[N, len(names)]`` at the points ``ps`` (same places)."""
    tp = to_points(data, names, **coord_names(model, data))
    dist, nearest = cKDTree(unit_vectors(tp.s)).query(unit_vectors(ps.s))
    if np.any(dist > 1e-6):
        raise ConfigError(
            f"{what} does not cover every candidate and region point; give it on "
            "the same coordinates."
        )
    return tp.f[nearest]


def _shares(weights: Any, region: PointSet, model: Any) -> np.ndarray | None:
    """Each region point's share ``[R]`` of the region acquisitions (summing to 1), or None."""
    if weights is None:
        return None
    if not isinstance(weights, xr.DataArray):
        raise ConfigError(
            "weights must be a DataArray on the region's coordinates; got "
            f"{type(weights).__name__}."
        )
    # a missing weight is marked -1 (read as points, NaN would look like a missing point)
    marked = weights.fillna(-1.0).to_dataset(name="_weight")
    w = _values_at(marked, ["_weight"], region, model, "weights")
    w = w[:, 0].astype(np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        raise ConfigError(
            "weights must be finite (not NaN) and at least 0 at every region point, and not "
            "all 0; "
            "fill gaps (e.g. weights.fillna(0)) or drop those points from the region."
        )
    return w / w.sum()


def _score_region(ctx, state, reg, acquisition, known, scale, batch) -> np.ndarray:
    """Scores ``[batch]`` of the region predicted against a conditioned ``state``.

    ``known`` is ``(truth at the region or None, the region's shares or None)``.
    """
    tiled = Points.from_arrays(
        **{k: np.repeat(reg[k][None], batch, 0) for k in ("s", "t", "x")},
        dim_y=len(scale),
    )
    mean, std = ctx.predictor.predict_state(state, tiled)
    return _score(ctx, mean, std, acquisition, known, scale)


def _region_mean(x: np.ndarray, share: np.ndarray | None) -> np.ndarray:
    """The mean of ``x`` ``[B, R, Dy]`` over the region (weighted by ``share``) and variables."""
    if share is None:
        return x.mean(axis=(1, 2))
    return np.einsum("brd,r->bd", x, share).mean(-1)


def _score(ctx, mean, std, acquisition, known, scale) -> np.ndarray:
    truth_r, share = known
    if acquisition == "mean_std":
        return _region_mean(std * scale, share)
    if acquisition == "mean_variance":
        return _region_mean((std * scale) ** 2, share)
    mean, std = ctx.model.denormalise(mean, std)
    err = mean - truth_r[None]
    if acquisition == "oracle_rmse":
        return np.sqrt(_region_mean(err**2, share))
    return _region_mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * (err / std) ** 2, share)


def _lazily(attempt, which: np.ndarray, gains: np.ndarray, now: float, batch_size: int):
    """Scores of the candidates lazy greedy retries (NaN for the others).

    ``which`` are the remaining candidates, ``gains`` their improvements at the
    step each was last tried (upper bounds of today's if improvements only
    shrink), ``now`` the score without a new site (lower is better).
    """
    order = which[np.argsort(-gains[which], kind="stable")]
    score = np.full(gains.size, np.nan)
    for start in range(0, order.size, batch_size):
        part = order[start : start + batch_size]
        score[part] = attempt(part)[part]
        best = now - np.nanmin(score)
        following = start + batch_size
        if following >= order.size or best >= gains[order[following]]:
            break
    return score


def _try_candidates(ctx, grown, cand, fill, reg, acquisition, known, scale, which, batch_size):
    """Each candidate in ``which`` added to the context in turn: its score (NaN elsewhere)."""
    score = np.full(len(cand["s"]), np.nan)
    for start in range(0, which.size, batch_size):
        part = which[start : start + batch_size]
        real = part.size
        # a short last batch repeats its last candidate: one compiled shape for every pass
        part = np.concatenate([part, np.repeat(part[-1:], batch_size - real)])
        b = part.size
        batch = {
            k: np.concatenate(
                [
                    np.repeat(grown[k], b, 0),
                    (cand[k] if k != "f" else fill)[part][:, None],
                ],
                axis=1,
            )
            for k in ("s", "t", "x", "f")
        }
        state = ctx.predictor.condition(Points.from_arrays(**batch))
        score[part[:real]] = _score_region(ctx, state, reg, acquisition, known, scale, b)[:real]
    return score

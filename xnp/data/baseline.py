"""Forecast baselines: what a forecast model predicts the change from.

A forecast model fitted with ``ForecastTasks(baseline=...)`` learns the *change*
from a baseline rather than the field itself (the predictive std stays the
model's):

* ``"persistence"``: the last observed value at (or nearest to) the target
  point;
* ``"persistence+diurnal"``: that value plus the mean change over the lead time
  for the target's place and the initialisation's hour of day, learned from the
  training times (:class:`ForecastBaseline`, stored with the model);
* ``"autoregressive"``: persistence plus a regression of the change on the
  changes since the earlier context frames and the mean diurnal change, fitted per
  lead and initialisation hour on the training times (:mod:`xnp.data.lagged`);
* ``"autoregressive+spatial"``: the same regression with what the neighbours know
  as well: the lagged changes averaged over the neighbourhood at two scales and the
  place's anomaly from its surroundings (:mod:`xnp.data.neighbours`);
* ``"autoregressive+gradient"``: the spatial regression with the local gradient
  (east and north) of the last frame at three scales and of its change since the
  frame before: weather moves, and with coefficients per hour of the training
  period the regression learns how the field's slopes carry into the next hours
  (the mean advection).

The rules, where a baseline cannot be formed exactly:

* **Persistence** takes, for each variable, the nearest (great-circle) observation
  in the most recent context frame that has one of that variable; with no
  observation of it in any context frame a task has no baseline (training skips
  it; prediction raises :class:`~xnp.errors.EmptyDataError`).
* **The diurnal change** is kept per lead, hour of day and place (the training
  data's grid cells or stations, at most :data:`MAX_SITES` of them, evenly
  thinned beyond); a target takes the nearest place's.  A place never observed at
  some hour takes that hour's mean over the places; an hour the training data
  never held is interpolated (circularly) between the nearest hours it held, and a
  lead between trained leads linearly between them (beyond them, the nearest).
  The regression's coefficients follow the same rules; an hour with too few
  training rows persists with the diurnal change, and a context frame missing at
  a lag counts as no change since it.

Examples
--------
>>> import xarray as xr
>>> t = np.arange(48) * np.timedelta64(1, "h") + np.datetime64("2020-01-01")
>>> hour = (np.arange(48) % 24).astype(float)
>>> ds = xr.Dataset(
...     {"v": (("time", "lat", "lon"), np.broadcast_to(hour[:, None, None], (48, 2, 2)).copy())},
...     coords={"time": t, "lat": [0.0, 1.0], "lon": [0.0, 1.0]},
... )
>>> from xnp.data.coords import find_coords
>>> base = ForecastBaseline.fit("persistence+diurnal", ds, find_coords(ds, "v"), ["v"], [6.0])
>>> base.change_at(np.array([[0.0, 0.0]]), hour=20.0, lead=6.0)  # 20h -> 2h: 2 - 20
array([[-18.]], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr
from scipy.spatial import cKDTree

from xnp.data.climatology import fill_places, interpolate
from xnp.data.coords import Layout, latlon
from xnp.data.lagged import features, fit_coefficients, n_spatial, nearest_in_frame
from xnp.data.neighbours import at_targets, gradient_scales_km, scales_km
from xnp.data.tasks import BASELINES, check_baseline
from xnp.data.times import match_hours, time_hours
from xnp.errors import CheckpointError, ConfigError, EmptyDataError
from xnp.geo.sphere import unit_vectors

__all__ = ["BASELINES", "MAX_SITES", "ForecastBaseline", "check_baseline", "persistence"]

#: Most places a diurnal climatology keeps (evenly thinned beyond).
MAX_SITES = 16_384
#: The kinds whose regression also reads the neighbourhood (:mod:`xnp.data.neighbours`).
SPATIAL_KINDS = ("autoregressive+spatial", "autoregressive+gradient")


def persistence(
    s: np.ndarray, t: np.ndarray, f: np.ndarray, targets: np.ndarray
) -> np.ndarray | None:
    """The last observed value nearest to each target, per variable.

    Parameters
    ----------
    s : ndarray ``[N, 2]``
        Latitude and longitude of the context points (degrees).
    t : ndarray ``[N]``
        Their times, relative to the initialisation time (0 is the last frame).
    f : ndarray ``[N, Dy]``
        Their values (NaN where a variable is not observed).
    targets : ndarray ``[M, 2]``
        Latitude and longitude of the targets.

    Returns
    -------
    ndarray ``[M, Dy]`` or None
        The values; None when some variable has no observation at all.

    Examples
    --------
    >>> s = np.array([[0.0, 0.0], [0.0, 10.0], [0.0, 0.0]])
    >>> persistence(
    ...     s,
    ...     np.array([-6.0, 0.0, 0.0]),
    ...     np.array([[1.0], [2.0], [3.0]]),
    ...     np.array([[0.0, 1.0], [0.0, 9.0]]),
    ... )
    array([[3.],
           [2.]])
    """
    f = np.asarray(f, np.float64)
    out = np.empty((len(targets), f.shape[1]), np.float64)
    query = unit_vectors(np.asarray(targets, np.float64))
    for j in range(f.shape[1]):
        seen = np.isfinite(f[:, j])
        if not seen.any():
            return None
        latest = seen & (t == t[seen].max())
        _, nearest = cKDTree(unit_vectors(np.asarray(s, np.float64)[latest])).query(query)
        out[:, j] = f[latest, j][nearest]
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class ForecastBaseline:
    """A forecast baseline, with its diurnal climatology when it has one.

    Attributes
    ----------
    kind : str
        The baseline, one of :data:`BASELINES`.
    variables : tuple of str
        The variables, in the order of the last axis of ``change``.
    leads : ndarray ``[L]``
        Lead times (hours) of the climatology.
    hours : ndarray ``[H]``
        Hours of day (0-23) the training data held initialisation times at.
    sites : ndarray ``[S, 2]``
        Latitude and longitude of the climatology's places.
    change : ndarray ``[L, H, S, Dy]``
        Mean change over the lead from an initialisation at that hour and place
        (float32); empty for plain persistence.
    lags : ndarray ``[K]``
        Hours of the earlier context frames relative to the last (negative) whose
        changes the autoregressive baseline regresses on.
    coef : ndarray ``[L, H, F, Dy]``
        The autoregressive coefficients (intercept, one per lag, diurnal change, and
        for the spatial kind the neighbourhood's: ``F = K + 2 + 2K + 1``, and for the
        gradient kind 2 per gradient scale more; :func:`xnp.data.lagged.n_spatial`);
        empty for the other kinds.
    neighbourhood : tuple of float or None
        The kernel scales (km) of the spatial kind: the smoothings', then the
        anomaly's (:func:`xnp.data.neighbours.scales_km`); None for the others.
    gradients : tuple of float or None
        The gradient kind's scales (km): the last frame's, then its last change's
        (:func:`xnp.data.neighbours.gradient_scales_km`); None for the others.
    scale : ndarray ``[Dy]`` or None
        The RMS error of the baseline over the training times, in the variables'
        units: the model predicts the change divided by it, so that its outputs
        are of order one (None, or 0 for a variable the baseline matched exactly:
        the variable's own spread, as for the field).
    """

    kind: str
    variables: tuple[str, ...]
    leads: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    hours: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    sites: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 2)))
    change: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0, 0, 0)))
    scale: np.ndarray | None = None
    lags: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    coef: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0, 0, 0)))
    neighbourhood: tuple[float, ...] | None = None
    gradients: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        check_baseline(self.kind)
        if self.kind is None:
            raise ConfigError("a ForecastBaseline needs a kind; got None.")

    def __repr__(self) -> str:
        if not self.diurnal:
            return f"ForecastBaseline({self.kind!r}, variables={list(self.variables)})"
        lags = f", lags={self.lags.tolist()}" if self.regressive else ""
        return (
            f"ForecastBaseline({self.kind!r}, variables={list(self.variables)}, "
            f"leads={self.leads.tolist()}{lags}, {self.hours.size} hours, "
            f"{len(self.sites)} places)"
        )

    def change_scale(self, field_std: np.ndarray) -> np.ndarray:
        """The unit ``[Dy]`` of the model's change in the variables' units.

        :attr:`scale`, or the variable's spread ``field_std`` where it has none
        (plain field units, as without a baseline).
        """
        field_std = np.asarray(field_std, np.float64)
        if self.scale is None:
            return field_std
        scale = np.asarray(self.scale, np.float64)
        return np.where(np.isfinite(scale) & (scale > 0), scale, field_std)

    def ratio(self, field_std: np.ndarray) -> np.ndarray:
        """``scale / field_std`` ``[Dy]``: the unit of the model's change in normalised units."""
        return self.change_scale(field_std) / np.asarray(field_std, np.float64)

    @functools.cached_property
    def _sites_tree(self) -> cKDTree:
        """The search tree of the climatology's places (built once, on first use)."""
        return cKDTree(unit_vectors(self.sites))

    @property
    def diurnal(self) -> bool:
        """Whether the baseline adds a diurnal climatology to persistence."""
        return self.kind != "persistence"

    @property
    def regressive(self) -> bool:
        """Whether the baseline regresses on the changes since earlier frames."""
        return self.kind.startswith("autoregressive")

    @property
    def spatial(self) -> bool:
        """Whether the regression also reads the neighbourhood (:mod:`xnp.data.neighbours`)."""
        return self.kind in SPATIAL_KINDS

    @property
    def gradient(self) -> bool:
        """Whether the regression also reads the local gradients (the gradient kind)."""
        return self.kind == "autoregressive+gradient"

    @classmethod
    def fit(
        cls,
        kind: str,
        data: xr.Dataset,
        layout: Layout,
        variables: Sequence[str],
        leads: Sequence[float],
        end: int | None = None,
        *,
        lags: Sequence[float] = (),
        fraction: float = 1.0,
    ) -> ForecastBaseline:
        """The baseline of ``kind``, its climatology learned from ``data``'s first ``end`` times.

        ``data`` holds ``variables`` on ``(time, *layout.point_dims)``; only pairs of
        times that both lie before ``end`` (the start of the held-out period) count.
        ``lags`` (hours before the last context frame, negative) and ``fraction``
        (the share of each context frame the tasks keep) shape the autoregressive
        baseline's regression (:func:`xnp.data.lagged.fit_coefficients`).
        """
        check_baseline(kind)
        variables = tuple(variables)
        diurnal = kind != "persistence"
        if layout.time_dim is None:
            raise ConfigError("a forecast baseline needs data with a time dimension.")
        dims = (layout.time_dim, *layout.point_dims)
        for v in variables:
            extra = [d for d in data[v].dims if d not in dims]
            if extra and diurnal:
                raise ConfigError(
                    f"{v!r} has dimension(s) {extra} besides time and space: a diurnal "
                    "baseline is kept per place; select or stack them first, or use "
                    "baseline='persistence'."
                )
            dims = dims + tuple(d for d in extra if d not in dims)  # (persistence: any place)
        hours = time_hours(data[layout.time].values)
        end = hours.size if end is None else int(end)
        lat, lon = latlon(data, layout)  # over layout.point_dims, as the arrays below
        sites = np.stack([np.ravel(lat), np.ravel(lon)], -1)
        columns = [data[v].transpose(*dims).data.reshape(hours.size, -1)[:end] for v in variables]
        keep = np.arange(columns[0].shape[1])
        if keep.size > MAX_SITES:
            keep = np.unique(np.linspace(0, keep.size - 1, MAX_SITES).round().astype(np.int64))
        arrays = [x[:, keep] for x in columns]
        hod = np.round(np.mod(hours[:end], 24.0)).astype(np.int64) % 24
        seen_hours: set[int] = set()
        per_lead = []
        for lead in leads:
            j = match_hours(hours[:end], hours[:end] + float(lead))
            i = np.flatnonzero(j >= 0)
            if i.size == 0:
                raise EmptyDataError(
                    f"no two training times are {lead:g} h apart, so the change over that "
                    "lead cannot be learned; give training data spanning it, or no baseline."
                )
            seen_hours.update(hod[i].tolist())
            per_lead.append((i, j[i]))
        hour_list = np.array(sorted(seen_hours), np.int64)
        change = np.full((len(leads), hour_list.size, keep.size, len(variables)), np.nan)
        squares, counts = np.zeros(len(variables)), np.zeros(len(variables))
        for a, (i, j) in enumerate(per_lead):
            for b, h in enumerate(hour_list):
                at = hod[i] == h
                if not at.any():
                    continue
                for c, x in enumerate(arrays):
                    diff = np.asarray(x[j[at]], np.float64) - np.asarray(x[i[at]], np.float64)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)  # never observed: NaN
                        change[a, b, :, c] = np.nanmean(diff, axis=0)
                    error = diff - change[a, b, :, c] if diurnal else diff
                    ok = np.isfinite(error)
                    squares[c] += float(np.sum(error[ok] ** 2))
                    counts[c] += int(ok.sum())
        if not (counts > 0).all():
            raise EmptyDataError(
                f"some of {list(variables)} is never observed at two training times a lead "
                "apart: there is no change to learn; give training data spanning the lead."
            )
        scale = np.sqrt(squares / counts)  # 0 where the baseline is exact: see ratio()
        if not diurnal:
            return cls(kind, variables, scale=scale)
        change = fill_places(change)
        lags = np.asarray(sorted(float(x) for x in lags), np.float64)
        coef = np.zeros((0, 0, 0, 0))
        scales = scales_km(sites[keep], fraction) if kind in SPATIAL_KINDS else None
        gradients = None
        if kind == "autoregressive+gradient":
            gradients = gradient_scales_km(sites[keep], fraction)
        if kind.startswith("autoregressive"):
            if (lags >= 0).any():
                raise ConfigError(f"lags must be negative hours; got {lags.tolist()}.")
            coef, sq, n = fit_coefficients(arrays, hours[:end], sites[keep], leads, lags,
                                           hour_list, change, fraction=fraction,
                                           scales=scales, gradients=gradients)  # fmt: skip
            scale = np.where(n > 0, np.sqrt(sq / np.maximum(n, 1)), scale)
        return cls(kind, variables, np.asarray(leads, np.float64), hour_list.astype(np.float64),
                   sites[keep], change.astype(np.float32), scale, lags,
                   coef.astype(np.float32), scales, gradients)  # fmt: skip

    def change_at(self, targets: np.ndarray, *, hour: float, lead: float) -> np.ndarray:
        """The mean change ``[M, Dy]`` at ``targets`` for an initialisation at ``hour`` (UTC)."""
        if not self.diurnal:
            return np.zeros((len(targets), len(self.variables)), np.float32)
        _, site = self._sites_tree.query(unit_vectors(np.asarray(targets)))
        by_lead = self.change[:, :, site]  # [L, H, M, Dy]
        by_hour = interpolate(by_lead, self.leads, float(lead), circular=False)
        return interpolate(by_hour, self.hours, float(hour) % 24.0, circular=True)

    def at(
        self,
        context: tuple[np.ndarray, np.ndarray, np.ndarray],
        targets: np.ndarray,
        *,
        reference: float,
        lead: float,
    ) -> np.ndarray | None:
        """The baseline ``[M, Dy]`` at ``targets``: persistence, plus the diurnal change.

        ``context`` is ``(s, t, f)`` of the target source's context points (``t``
        relative to the initialisation time ``reference``, hours since 1970), raw
        values; None when persistence cannot be formed (see :func:`persistence`).
        Each distinct place is computed once (context frames on one grid repeat them).
        """
        targets = np.asarray(targets, np.float64)
        places, inverse = np.unique(targets, axis=0, return_inverse=True)
        if len(places) < len(targets):
            base = self.at(context, places, reference=reference, lead=lead)
            return None if base is None else base[inverse.ravel()]
        last = persistence(*context, targets)
        if last is None:
            return None
        change = self.change_at(targets, hour=reference % 24.0, lead=lead)
        if not self.regressive:
            return last + change
        s, t, f = context
        latest = float(np.max(np.asarray(t)[np.isfinite(np.asarray(f, np.float64)).any(1)]))
        lagged = [nearest_in_frame(s, t, f, targets, time=latest + lag) for lag in self.lags]
        by_lead = interpolate(self.coef, self.leads, float(lead), circular=False)
        coef = interpolate(by_lead, self.hours, reference % 24.0, circular=True)  # [F, Dy]
        extra = []
        if self.spatial:  # the last frame's nearest at each context point, as in the fit
            before = persistence(s, t, f, s)
            extra = at_targets(context, targets, last=last, before=before, latest=latest,
                               lags=self.lags, scales=self.neighbourhood,
                               gradients=self.gradients)  # fmt: skip
        x = features(last, lagged, np.asarray(change, np.float64), extra)  # [M, Dy, F]
        return last + np.einsum("mdf,fd->md", x, coef.astype(np.float64))

    # -- saving -----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The JSON part of the baseline (the arrays go to :meth:`arrays`)."""
        return {
            "kind": self.kind,
            "variables": list(self.variables),
            "leads": [float(x) for x in self.leads],
            "hours": [float(x) for x in self.hours],
            "scale": None if self.scale is None else [float(x) for x in self.scale],
            "lags": [float(x) for x in self.lags],
            "neighbourhood_km": None if self.neighbourhood is None else list(self.neighbourhood),
            **({"gradient_km": list(self.gradients)} if self.gradients is not None else {}),
        }

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays of the climatology (empty for plain persistence)."""
        if not self.diurnal:
            return {}
        out = {"sites": np.asarray(self.sites, np.float64), "change": self.change}
        if self.regressive:
            out["coef"] = self.coef
        return out

    @classmethod
    def from_saved(
        cls, blob: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
    ) -> ForecastBaseline:
        """Inverse of :meth:`to_json` and :meth:`arrays` (a mismatch raises CheckpointError)."""
        try:
            kind, variables = blob["kind"], tuple(blob["variables"])
            leads = np.asarray(blob.get("leads", []), np.float64)
            hours = np.asarray(blob.get("hours", []), np.float64)
            scale = blob.get("scale")
            scale = None if scale is None else np.asarray(scale, np.float64)
            if scale is not None and (scale.shape != (len(variables),) or not (scale >= 0).all()):
                raise ValueError(f"scale {blob.get('scale')!r} is not one number ≥ 0 per variable")
            check_baseline(kind)
            if kind == "persistence":
                return cls(kind, variables, scale=scale)
            sites = np.asarray(arrays["sites"], np.float64)
            change = np.asarray(arrays["change"], np.float32)
            lags = np.asarray(blob.get("lags", []), np.float64)
            regressive = kind.startswith("autoregressive")
            coef = np.asarray(arrays["coef"], np.float32) if regressive else None
            scales, gradients = blob.get("neighbourhood_km"), blob.get("gradient_km")
            spatial = kind in SPATIAL_KINDS
            if spatial:
                scales = tuple(float(x) for x in scales)
                if len(scales) < 2 or not all(x > 0 for x in scales):
                    raise ValueError(f"neighbourhood_km {scales!r} are not two or more scales > 0")
            if kind == "autoregressive+gradient":
                gradients = tuple(float(x) for x in gradients)
                if len(gradients) < 2 or not all(x > 0 for x in gradients):
                    raise ValueError(f"gradient_km {gradients!r} are not two or more scales > 0")
            else:
                gradients = None
        except (KeyError, TypeError, ValueError, ConfigError) as err:
            raise CheckpointError(f"the model's forecast baseline is malformed: {err!r}.") from err
        expected = (leads.size, hours.size, len(sites), len(variables))
        if change.shape != expected or sites.shape[1:] != (2,) or not np.isfinite(change).all():
            raise CheckpointError(
                f"the model's diurnal climatology has shape {change.shape} (expected "
                f"{expected}, finite): the baseline file does not match its record."
            )
        if coef is None:
            return cls(kind, variables, leads, hours, sites, change, scale)
        n_coef = lags.size + 2 + (n_spatial(lags.size, scales, gradients) if spatial else 0)
        want = (leads.size, hours.size, n_coef, len(variables))
        if coef.shape != want or not np.isfinite(coef).all():
            raise CheckpointError(
                f"the model's autoregressive coefficients have shape {coef.shape} (expected "
                f"{want}, finite): the baseline file does not match its record."
            )
        scales = scales if spatial else None
        return cls(
            kind, variables, leads, hours, sites, change, scale, lags, coef, scales, gradients
        )

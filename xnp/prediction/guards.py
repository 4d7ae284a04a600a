"""Guards: refuse or warn before a prediction that would be wrong or meaningless.

Targets outside a regional model's grid, targets farther from the context than
the model was trained for, and targets with no context point within
``context_radius`` are found up front, so that the answer does not depend on how
the targets are chunked and a lazy computation cannot fail half-way.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.spatial
import xarray as xr

from xnp.arrays import Points
from xnp.data.flatten import PointSet
from xnp.errors import (
    EmptyDataError,
    XnpWarning,
)
from xnp.geo.sphere import great_circle_km, unit_vectors
from xnp.infer import is_planar

__all__ = [
    "FAR_OUTSIDE_TRAINING",
    "check_in_training_range",
    "check_informative",
    "check_units_given",
    "check_within_radius",
    "extent_text",
    "outside_grid",
    "warn_far_targets",
]


def outside_grid(model: Any, s: np.ndarray) -> np.ndarray | None:
    """Which points ``[N, 2]`` (lat, lon) lie outside a regional pseudo-token grid.

    None for models without a grid (BSA-TNP).  Without this
    check a Swin-TNP would put such points on its edge cells, silently.
    """
    cfg = getattr(model, "config", None)
    if getattr(cfg, "geometry", None) != "sphere" or not len(s):
        return None
    (lat0, lat1), (lon0, lon1) = cfg.extent
    outside = (s[:, 0] < lat0) | (s[:, 0] > lat1)
    if not cfg.wrap[1]:
        outside |= (s[:, 1] - lon0) % 360.0 > lon1 - lon0  # either longitude convention
    return outside


def extent_text(model: Any) -> str:
    """The extent of a regional model's grid, for messages."""
    (lat0, lat1), (lon0, lon1) = model.config.extent
    return f"latitude {lat0:.2f} to {lat1:.2f}, longitude {lon0:.2f} to {lon1:.2f}"


#: Targets checked against ``max_distance_km`` (a regular subsample beyond this many).
_FAR_CHECK_POINTS = 20_000


def _nearest_context_km(context: Points, s: np.ndarray) -> np.ndarray:
    """Great-circle distance (km) from each lat/lon in ``s`` to the nearest valid context point."""
    mask = np.asarray(context.mask[0], bool)
    tree = scipy.spatial.cKDTree(unit_vectors(np.asarray(context.s[0])[mask]))
    chord, _ = tree.query(unit_vectors(s), k=1)
    return great_circle_km(chord)


def warn_far_targets(model: Any, context: Points, targets: PointSet) -> None:
    """Warn when targets lie farther from the context than the model was trained for.

    A model may record ``training["max_distance_km"]``: the largest distance from a
    target to the context points in its training tasks (the pretrained zero-shot
    models do).  Beyond it the model extrapolates, and its uncertainty is not to
    be trusted (it does not grow to the field's variance as a GP's would).
    """
    limit = (getattr(model, "training", None) or {}).get("max_distance_km")
    if not limit or not len(targets):
        return
    n = len(targets)
    stride = -(-n // _FAR_CHECK_POINTS)  # a regular subsample of large target sets
    km = _nearest_context_km(context, targets.s[::stride])
    far = int(np.sum(km > limit))
    if far:
        share = f"{far} of {n}" if stride == 1 else f"about {far / km.size:.0%} of the {n:,}"
        warnings.warn(
            f"{share} target points lie more than {limit:,.0f} km from every "
            f"context point (farthest {km.max():,.0f} km), farther than this model was "
            "trained to predict: there it extrapolates and its standard deviation is too "
            "small. Restrict the targets to the observed region or fit a model.",
            XnpWarning,
            stacklevel=4,
        )


def check_within_radius(model: Any, context: Points, targets: PointSet, radius_km: float
                         ) -> None:  # fmt: skip
    """Refuse, before any work, targets with no context point within ``context_radius``.

    Regional prediction conditions each target chunk on the context within the
    radius; a target with none there has nothing to condition on.  Checked for
    every target up front, so that the answer does not depend on how the targets
    are chunked (eager or lazy) and a lazy computation cannot fail half-way.
    """
    if is_planar(model.config):
        return  # the regional plan says that context_radius does not apply
    if not len(targets) or not np.asarray(context.mask[0]).any():
        return
    km = _nearest_context_km(context, targets.s)
    far = km > radius_km
    if far.any():
        worst = int(np.argmax(km))
        raise EmptyDataError(
            f"{int(far.sum()):,} of {len(targets):,} target points have no context point "
            f"within context_radius={radius_km:g} km (the farthest, at lat "
            f"{targets.lat[worst]:.2f}, lon {targets.lon[worst]:.2f}, is {km[worst]:,.0f} km "
            "from the nearest): regional prediction has nothing to condition them on. "
            f"Increase context_radius (to at least {np.ceil(km.max()):,.0f} km), restrict "
            "the targets to the observed region, or predict without context_radius."
        )


#: A fitted model's context lies "far outside its training data" when the median of
#: its standardised values, |value - training mean| / training std, exceeds this:
#: no field varies by ten of its own standard deviations, but other units (degC
#: for K: ~50), unapplied packing (int16 counts) or another variable do.
FAR_OUTSIDE_TRAINING = 10.0


def check_in_training_range(points: Points, variables: Sequence[str], when: str) -> None:
    """Warn when a fitted model's context sits far outside the values it was trained on.

    The model then sees inputs unlike any in training and answers with a flat
    field, silently; the likely causes are named (units, packing, variable).
    """
    f = np.asarray(points.f[0])[np.asarray(points.mask[0], bool)]
    for j, v in enumerate(variables):
        z = np.abs(f[:, j][np.isfinite(f[:, j])])
        if z.size and float(np.median(z)) > FAR_OUTSIDE_TRAINING:
            warnings.warn(
                f"the context of {v!r}{when} lies far outside the values the model was "
                f"trained on: its median is {float(np.median(z)):.0f} training standard "
                f"deviations from the training mean (more than {FAR_OUTSIDE_TRAINING:g}), "
                "and the prediction will be meaningless. Check the units (e.g. degC given "
                "to a model trained in K, or no 'units' attribute), packed values whose "
                "scale_factor/add_offset were not applied, or another variable.",
                XnpWarning,
                stacklevel=5,
            )


def check_informative(points: Points, variables: Sequence[str], when: str) -> None:
    """Warn when a context cannot tell the targets apart (one place, or all alike).

    With every context point at one place, or every point the same token (equal
    values and covariates), attention weights or attended values are the same for
    every target: each target gets the same mean and the same standard deviation,
    near the observations and far from them alike.
    """
    real = np.asarray(points.mask[0], bool)
    if not real.any():
        return
    s = np.asarray(points.s[0])[real]
    tokens = np.concatenate([np.asarray(points.f[0]), np.asarray(points.x[0])], -1)[real]
    one_place = bool(np.all(s == s[0]))
    alike = bool(np.all(tokens == tokens[0]))
    if not (one_place or alike):
        return
    n = int(real.sum())
    what = "one observation" if n == 1 else (
        f"{n} observations, all at one place" if one_place else f"{n} observations, all equal"
    )  # fmt: skip
    warnings.warn(
        f"the context of {', '.join(map(repr, variables))}{when} is {what}: the model cannot "
        "tell the targets apart, so every target gets the same mean and standard deviation, "
        "at the observation and far from it alike (its uncertainty does not grow with "
        "distance). Give at least two different observations at different places.",
        XnpWarning,
        stacklevel=5,
    )


def check_units_given(data: xr.Dataset, variables: Sequence[str], when: str) -> None:
    """Warn when a zero-shot context does not say its units.

    A zero-shot model predicts in the context's own units; without a ``units``
    attribute nothing says what they are, nor checks them against the targets.
    """
    missing = [v for v in variables if "units" not in data[v].attrs]
    if missing:
        warnings.warn(
            f"the context variable(s) {missing}{when} have no 'units' attribute: a zero-shot "
            "model predicts in the context's own units, so the prediction will carry none. "
            "Set them, e.g. ds[name].attrs['units'] = 'K'.",
            XnpWarning,
            stacklevel=5,
        )

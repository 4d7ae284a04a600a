"""Per-channel normalisation of values and covariates, serialisable to JSON.

A :class:`Normaliser` holds, for every variable and covariate channel, a mean, a
standard deviation and the units it was computed in.  Values are normalised as
``(v - mean) / std`` before they reach the model, and predictions are mapped back
with :meth:`Normaliser.inverse` (means) and :meth:`Normaliser.inverse_std`
(standard deviations), so they come back in the data's own units.  Periodic
covariates (sin/cos pairs) are already in ``[-1, 1]`` and pass through unchanged.

The statistics of a dask-backed dataset are computed in one pass: every mean and
standard deviation is one node of a single graph, so each chunk is read once and
nothing is loaded as a whole.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import dask
import numpy as np
import xarray as xr

from xnp.data.coords import Layout, find_coords, latlon, resolve_variables
from xnp.data.covariates import (
    PERIODIC_COVARIATES,
    covariate_channels,
    covariate_names,
    interpolate_dem,
    user_covariates,
)
from xnp.data.elevation import elevation_metres
from xnp.data.flatten import as_dataset, warn_infinite
from xnp.errors import ConfigError, CoordinateError, EmptyDataError, IncompatibleUnitsError
from xnp.units import canonical_units

__all__ = ["Normaliser", "Stats", "check_same_units", "is_zero_shot"]

_FORMAT = "xnp.normaliser/1"


@dataclasses.dataclass(frozen=True)
class Stats:
    """Mean, standard deviation and units of one channel."""

    mean: float
    std: float
    units: str | None = None
    long_name: str | None = None


def check_same_units(
    name: str, units_a: str | None, units_b: str | None, what: tuple[str, str]
) -> None:
    """Raise :class:`IncompatibleUnitsError` if two known unit strings differ.

    Missing units (None) are not checked.

    Examples
    --------
    >>> check_same_units("t2m", "K", "degC", ("context", "targets"))
    Traceback (most recent call last):
    ...
    xnp.errors.IncompatibleUnitsError: t2m has units 'K' in the context but 'degC' in ...
    """
    if units_a is None or units_b is None:
        return
    a, b = canonical_units(units_a), canonical_units(units_b)
    if a == b:
        return
    hint = _CONVERSIONS.get((a, b), "ds[{name!r}] converted, with attrs['units'] set")
    raise IncompatibleUnitsError(
        f"{name} has units {units_a!r} in the {what[0]} but {units_b!r} in the {what[1]}. "
        f"Convert one of them so that they match (e.g. {hint.format(name=name)})."
    )


_CONVERSIONS = {
    ("K", "degC"): "ds[{name!r}] - 273.15 with attrs['units'] = 'degC'",
    ("degC", "K"): "ds[{name!r}] + 273.15 with attrs['units'] = 'K'",
    ("Pa", "hPa"): "ds[{name!r}] / 100 with attrs['units'] = 'hPa'",
    ("hPa", "Pa"): "ds[{name!r}] * 100 with attrs['units'] = 'Pa'",
}


def is_zero_shot(model: Any) -> bool:
    """Whether ``model`` standardises each context by its own statistics (zero-shot).

    A zero-shot model (``normalise="context"``, e.g. a pretrained one) predicts
    whichever single variable its context holds, in that variable's units; a
    fitted model (``"fitted"``) uses the statistics of its training data.

    Examples
    --------
    >>> import xnp
    >>> is_zero_shot(xnp.pretrained("gp-sphere"))
    True
    """
    return getattr(model, "normalise", "fitted") == "context"


def _check_stats(name: str, stats: Stats) -> None:
    """Raise unless ``stats`` has a finite mean and a positive, finite standard deviation.

    A normaliser read from a file is checked, since a wrong scale (an edited
    ``std: -5``) would otherwise flip or blow up every prediction silently.
    """
    for field, ok in (("mean", lambda v: math.isfinite(v)),
                      ("std", lambda v: math.isfinite(v) and v > 0)):  # fmt: skip
        value = getattr(stats, field)
        real = isinstance(value, int | float) and not isinstance(value, bool)
        if not real or not ok(value):
            want = "a finite number" if field == "mean" else "a positive, finite number"
            raise ConfigError(
                f"normaliser statistics of {name!r}: {field} must be {want}; got {value!r}."
            )


@dataclasses.dataclass(frozen=True)
class Normaliser:
    """Normalisation statistics for named channels.

    Examples
    --------
    >>> norm = Normaliser({"t2m": Stats(280.0, 5.0, "K")})
    >>> norm.transform(np.array([[285.0]]), ["t2m"]).tolist()
    [[1.0]]
    >>> norm.inverse(np.array([[1.0]]), ["t2m"]).tolist()
    [[285.0]]
    >>> norm.inverse_std(np.array([[0.5]]), ["t2m"]).tolist()
    [[2.5]]
    >>> Normaliser.from_json(norm.to_json()) == norm
    True
    """

    stats: Mapping[str, Stats]

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the channels known to this normaliser."""
        return tuple(self.stats)

    def _columns(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        unknown = [n for n in names if n not in self.stats]
        if unknown:
            raise ConfigError(
                f"No normalisation statistics for {unknown}; known channels: {list(self.stats)}. "
                "Fit the normaliser on data holding these variables and covariates."
            )
        mean = np.array([self.stats[n].mean for n in names], np.float64)
        std = np.array([self.stats[n].std for n in names], np.float64)
        return mean, std

    def transform(self, values: np.ndarray, names: Sequence[str]) -> np.ndarray:
        """Normalise ``values`` whose last axis holds the channels ``names``."""
        mean, std = self._columns(names)
        return (np.asarray(values, np.float64) - mean) / std

    def inverse(self, values: np.ndarray, names: Sequence[str]) -> np.ndarray:
        """Map normalised values (or predictive means) back to the data's units."""
        mean, std = self._columns(names)
        return np.asarray(values, np.float64) * std + mean

    def inverse_std(self, std_values: np.ndarray, names: Sequence[str]) -> np.ndarray:
        """Map normalised standard deviations back to the data's units (scale only)."""
        _, std = self._columns(names)
        return np.asarray(std_values, np.float64) * std

    def check_units(self, name: str, units: str | None, what: str = "data") -> None:
        """Raise :class:`IncompatibleUnitsError` if ``units`` differ from those fitted."""
        if name in self.stats:
            check_same_units(name, self.stats[name].units, units, ("fitted model", what))

    def check_covariate_units(
        self, data: xr.Dataset, covariates: Sequence[str], what: str = "data"
    ) -> None:
        """:meth:`check_units` for the covariates ``data`` holds as variables or coordinates.

        Built-in covariates (``elevation``, converted to metres, and the periodic
        ones) are skipped.
        """
        for name in user_covariates(covariates):
            if name in data.variables:
                self.check_units(name, data[name].attrs.get("units"), what)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict; :meth:`from_json` rebuilds the normaliser."""
        return {
            "format": _FORMAT,
            "stats": {k: dataclasses.asdict(v) for k, v in self.stats.items()},
        }

    @classmethod
    def from_json(cls, blob: Mapping[str, Any]) -> Normaliser:
        """Rebuild a normaliser from :meth:`to_json` output."""
        if blob.get("format") != _FORMAT or not isinstance(blob.get("stats"), Mapping):
            raise ConfigError(
                f"Not a normaliser description (expected format {_FORMAT!r} and a 'stats' "
                f"mapping); got keys {sorted(blob)} with format {blob.get('format')!r}."
            )
        try:
            stats = {str(k): Stats(**v) for k, v in blob["stats"].items()}
        except TypeError as err:
            raise ConfigError(f"Malformed normaliser statistics: {err}.") from err
        for name, st in stats.items():
            _check_stats(name, st)
        return cls(stats)

    @classmethod
    def fit(
        cls,
        data: xr.Dataset,
        variables: str | Sequence[str],
        covariates: Sequence[str] = (),
        *,
        dem: xr.DataArray | None = None,
        layout: Layout | None = None,
        **names: Any,
    ) -> Normaliser:
        """Compute statistics of variables and covariates in one (dask-aware) pass.

        Parameters
        ----------
        data : Dataset
            The data (select the training period first); not modified or loaded.
        variables : str or list of str
            The value variables.
        covariates : list of str
            Covariate names, as for :func:`xnp.data.flatten.to_points`.
        dem : DataArray, optional
            DEM for the ``"elevation"`` covariate.
        layout : Layout, optional
            Precomputed coordinate layout.
        **names
            Explicit coordinate names for :func:`~xnp.data.coords.find_coords`.

        Examples
        --------
        >>> ds = xr.Dataset(
        ...     {"v": ("x", [1.0, 3.0, np.nan])},
        ...     coords={"lat": ("x", [0.0, 1, 2]), "lon": ("x", [0.0, 0, 0])},
        ... )
        >>> Normaliser.fit(ds, "v").stats["v"]
        Stats(mean=2.0, std=1.0, units=None, long_name=None)
        """
        data = as_dataset(data, variables)
        variables = resolve_variables(data, variables)
        layout = layout or find_coords(data, variables[0], **names)
        lazy: dict[str, xr.DataArray] = {name: data[name] for name in variables}
        for name in covariate_names(covariates):
            if name == "elevation":
                lazy[name] = _elevation_field(data, layout, dem)
            elif name not in PERIODIC_COVARIATES:
                if name not in data.coords:
                    resolve_variables(data, name)
                lazy[name] = data[name]
        reductions = {}
        for name, da in lazy.items():
            da = da.reset_coords(drop=True).astype(np.float64)
            finite = da.where(np.isfinite(da))  # ±inf are missing values, as in to_points
            reductions[f"{name}/mean"] = finite.mean()
            reductions[f"{name}/std"] = finite.std()
            reductions[f"{name}/inf"] = np.isinf(da).sum()
        (computed,) = dask.compute(reductions)
        stats: dict[str, Stats] = {}
        for name in lazy:
            warn_infinite(name, int(computed[f"{name}/inf"]), stacklevel=3)
        for name, da in lazy.items():
            mean = float(computed[f"{name}/mean"])
            std = float(computed[f"{name}/std"])
            if not np.isfinite(mean):
                raise EmptyDataError(
                    f"{name!r} has no finite values to compute statistics from; check the "
                    "selected period and region."
                )
            units = "m" if name == "elevation" else da.attrs.get("units")
            stats[name] = Stats(
                mean=mean,
                std=std if np.isfinite(std) and std > 0 else 1.0,
                units=None if units is None else str(units),
                long_name=str(da.attrs["long_name"]) if "long_name" in da.attrs else None,
            )
        for channel in covariate_channels(covariates):
            if channel not in stats:  # the sin/cos channels of periodic covariates
                stats[channel] = Stats(mean=0.0, std=1.0, units="1")
        return cls(stats)


def _elevation_field(data: xr.Dataset, layout: Layout, dem: xr.DataArray | None) -> xr.DataArray:
    if dem is not None:
        lat, lon = latlon(data, layout)
        return xr.DataArray(interpolate_dem(dem, lat, lon), attrs={"units": "m"})
    grid = elevation_metres(data, layout)
    if grid is None:
        raise CoordinateError(
            "Covariate 'elevation' was requested but no elevation was found (coordinates "
            f"present: {list(map(str, data.coords))}). Add it as a coordinate in metres over the "
            "spatial dims, e.g. ds = ds.assign_coords(elevation=dem.interp(lat=ds.lat, "
            "lon=ds.lon)), or give it a CF standard_name 'surface_altitude'."
        )
    return xr.DataArray(grid, attrs={"units": "m"})

"""From xarray to flat point sets and back.

:func:`to_points` flattens a variable (or several) of a Dataset into a
:class:`PointSet`: numpy arrays of latitude, longitude, time, raw covariates and
raw values, one row per observed point, plus the flat index, dimensions and
coordinates needed to scatter results back.  :meth:`PointSet.scatter` and
:func:`predictions_to_xarray` do the way back: gridded data gives DataArrays with
the grid's dims and coords, station data a station dimension with its coords.

Nothing here is normalised or padded; that happens when tasks are built
(:mod:`xnp.data.tasks`, :mod:`xnp.data.batch`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import xarray as xr

from xnp._version import __version__
from xnp.data import names as known
from xnp.data.coords import Layout, find_coords, latlon, resolve_variables
from xnp.data.covariates import covariate_channels, covariate_names, point_covariates
from xnp.data.times import day_and_year_fractions, time_hours
from xnp.errors import DimensionError, EmptyDataError, ShapeError, XnpWarning

__all__ = ["PointSet", "prediction_attrs", "predictions_to_xarray", "to_points", "warn_infinite"]


@dataclasses.dataclass(frozen=True, eq=False)
class PointSet:
    """Flat, unpadded points taken from an xarray object.

    Attributes
    ----------
    lat, lon : ndarray, shape ``[N]``
        Degrees; longitude wrapped to ``[-180, 180)``.
    time : ndarray, shape ``[N]``
        Hours since 1970-01-01 in the data's calendar (float64); zeros without time.
    x : ndarray, shape ``[N, Dx]``
        Raw covariates, channels named by ``covariates``.
    f : ndarray, shape ``[N, Dy]``
        Raw values of ``variables`` (``Dy = 0`` for target coordinates only).
    index : ndarray of int, shape ``[N]``
        Position of each point in the flattened (C-order) array of shape ``shape``.
    dims, shape, coords
        Dimensions, sizes and coordinates of the source, to scatter back.
    variables, covariates : tuple of str
        Names of the value and covariate channels.
    attrs : mapping
        Attributes (units, long_name, ...) of each variable.
    has_time : bool
        Whether the source had a time coordinate.
    """

    lat: np.ndarray
    lon: np.ndarray
    time: np.ndarray
    x: np.ndarray
    f: np.ndarray
    index: np.ndarray
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    coords: xr.Coordinates
    variables: tuple[str, ...] = ()
    covariates: tuple[str, ...] = ()
    attrs: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    has_time: bool = False

    def __len__(self) -> int:
        return int(self.lat.shape[0])

    @property
    def s(self) -> np.ndarray:
        """Latitude and longitude stacked, shape ``[N, 2]``."""
        return np.stack([self.lat, self.lon], axis=-1)

    def take(self, which: np.ndarray) -> PointSet:
        """Return the subset of points selected by an integer or boolean array."""
        fields = {k: getattr(self, k)[which] for k in ("lat", "lon", "time", "x", "f", "index")}
        return dataclasses.replace(self, **fields)

    def scatter(
        self,
        values: np.ndarray,
        name: str | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> xr.DataArray:
        """Put one value per point back on the source's dims and coords.

        Places without a point are NaN.

        Examples
        --------
        >>> ds = xr.Dataset(
        ...     {"v": (("lat", "lon"), [[1.0, np.nan], [3.0, 4.0]])},
        ...     coords={"lat": [0.0, 1.0], "lon": [0.0, 1.0]},
        ... )
        >>> ps = to_points(ds, "v")
        >>> ps.scatter(ps.f[:, 0] * 10).values.tolist()
        [[10.0, nan], [30.0, 40.0]]
        """
        values = np.asarray(values)
        if values.shape != (len(self),):
            raise ShapeError(f"Expected {len(self)} values (one per point); got {values.shape}.")
        dtype = np.result_type(values.dtype, np.float32)
        full = np.full(int(np.prod(self.shape)), np.nan, dtype=dtype)
        full[self.index] = values
        return xr.DataArray(
            full.reshape(self.shape),
            dims=self.dims,
            coords=self.coords,
            name=name,
            attrs=dict(attrs or {}),
        )


def as_dataset(
    data: xr.Dataset | xr.DataArray, variables: str | Sequence[str] | None = None
) -> xr.Dataset:
    """``data`` as a Dataset: a DataArray becomes its only variable.

    An unnamed DataArray is named after the (first) requested variable, or
    ``"value"``.

    Examples
    --------
    >>> list(as_dataset(xr.DataArray([1.0], dims="x"), "t2m").data_vars)
    ['t2m']
    """
    if isinstance(data, xr.Dataset):
        return data
    name = data.name
    if name is None:
        wanted = [variables] if isinstance(variables, str) else list(variables or ())
        name = wanted[0] if wanted else "value"
    return data.to_dataset(name=str(name))


def warn_infinite(name: str, count: int, stacklevel: int = 3) -> None:
    """Warn that ``count`` values of ``name`` are ±inf and are left out as missing.

    Infinite values are dropped as NaN values are, but unlike a NaN an inf is
    seldom meant as "missing": a division by zero, an overflow, a fill value
    decoded wrong.  Nothing is said when ``count`` is 0.
    """
    if count:
        warnings.warn(
            f"{count:,} value(s) of {name} are infinite (±inf) and are left out, as missing "
            "(NaN) values are. Check their source (a division by zero, an overflow, a fill "
            "value), or mark them missing yourself: ds.where(np.isfinite(ds)).",
            XnpWarning,
            stacklevel=stacklevel,
        )


def to_points(
    data: xr.Dataset | xr.DataArray,
    variable: str | Sequence[str] | None = None,
    *,
    covariates: Sequence[str] = (),
    dem: xr.DataArray | None = None,
    layout: Layout | None = None,
    extra_dims: Literal["raise", "flatten"] = "raise",
    dropna: bool = True,
    warn_inf: bool = True,
    **names: Any,
) -> PointSet:
    """Flatten ``variable`` of ``data`` into a :class:`PointSet`.

    Parameters
    ----------
    data : Dataset or DataArray
        The source; never modified.  Lazy (dask) data is read here, so select
        first what you need (the task sampler reads one task at a time).
    variable : str or list of str, optional
        Variable(s) to take values from.  With several, a point is kept only where
        all are present.  ``None`` takes only the coordinates (for targets): every
        location (and time) becomes a point.
    covariates : list of str
        See :mod:`xnp.data.covariates`.
    dem : DataArray, optional
        A DEM for the ``"elevation"`` covariate.
    layout : Layout, optional
        A layout from :func:`~xnp.data.coords.find_coords`, to skip discovery.
    extra_dims : {"raise", "flatten"}
        What to do with dimensions that are neither spatial nor time (e.g.
        ``member``): raise a :class:`DimensionError` (default), or flatten them into
        separate points at the same location and time.
    dropna : bool
        Drop points with a missing value or covariate (default True); infinite
        values count as missing.
    warn_inf : bool
        Warn when infinite values are dropped (:func:`warn_infinite`); the task
        sampler, which reads the same data again and again, checks them once instead.
    **names
        Explicit coordinate names for :func:`find_coords` (``lat``, ``lon``,
        ``time``, ``elevation``, ``crs``).

    Returns
    -------
    PointSet

    Examples
    --------
    >>> ds = xr.Dataset(
    ...     {"t2m": (("lat", "lon"), [[280.0, np.nan], [281.0, 282.0]])},
    ...     coords={"lat": [50.0, 51.0], "lon": [359.0, 0.0]},
    ... )
    >>> ps = to_points(ds, "t2m")
    >>> len(ps), ps.s.tolist()
    (3, [[50.0, -1.0], [51.0, -1.0], [51.0, 0.0]])
    """
    if isinstance(data, xr.DataArray):
        data = as_dataset(data, variable)
        variable = variable if variable is not None else next(iter(data.data_vars))
    covariates = covariate_names(covariates)
    variables = resolve_variables(data, variable)
    if layout is None:
        layout = find_coords(data, variables[0] if variables else None, **names)
    dims = _point_dims(data, variables, layout, extra_dims)
    shape = tuple(int(data.sizes[d]) for d in dims)
    if variables:
        stacked = [np.asarray(data[v].transpose(*dims).values, np.float64) for v in variables]
        values = np.stack([v.ravel() for v in stacked], axis=-1)
        flat = np.flatnonzero(np.isfinite(values).all(-1)) if dropna else np.arange(len(values))
        if dropna and warn_inf:
            warn_infinite(", ".join(map(repr, variables)), int(np.isinf(values).any(-1).sum()))
        if flat.size == 0:
            raise EmptyDataError(
                f"Every value of {variables} is missing (NaN) in the {shape} array over {dims}. "
                "Check the selection (time range, region) and the _FillValue decoding."
            )
        f = values[flat]
    else:
        flat = np.arange(int(np.prod(shape)))
        f = np.zeros((flat.size, 0), np.float64)
    index = dict(zip(dims, np.unravel_index(flat, shape), strict=True))

    def take(da: xr.DataArray) -> np.ndarray:
        own = [str(d) for d in da.dims]
        if not set(own) <= set(dims):
            raise DimensionError(
                f"{da.name!r} has dims {da.dims}, which are not all among the variable's "
                f"dims {dims}. Select along {sorted(set(own) - set(dims))} first."
            )
        return np.asarray(da.values)[tuple(index[d] for d in own)]

    point_index = tuple(index[d] for d in layout.point_dims)
    lat_grid, lon_grid = latlon(data, layout)
    n = flat.size
    # a single place (scalar lat/lon, e.g. ds.sel(station="X")) has no point dims
    lat = np.broadcast_to(lat_grid[point_index], (n,)).copy()
    lon = np.broadcast_to(lon_grid[point_index], (n,)).copy()
    hours = np.zeros(n, np.float64)
    day = year = None
    if layout.time is not None:
        times = data[layout.time]
        hours = np.broadcast_to(take(times.copy(data=time_hours(times.values))), (n,))
        if any(c in ("hour_of_day", "solar_time", "day_of_year") for c in covariates):
            d, y = day_and_year_fractions(times.values)
            day = np.broadcast_to(take(times.copy(data=d)), (n,))
            year = np.broadcast_to(take(times.copy(data=y)), (n,))
    x = point_covariates(
        data,
        layout,
        covariates,
        take=take,
        point_index=point_index,
        lat=lat,
        lon=lon,
        day=day,
        year=year,
        dem=dem,
        lat_grid=lat_grid,
        lon_grid=lon_grid,
    )
    coords_source = data[variables[0]] if variables else data
    # the coordinates over the point dims, with their indexes (a stacked grid's MultiIndex)
    along = [k for k, v in coords_source.coords.items() if set(v.dims) <= set(dims)]
    coords = coords_source.coords.to_dataset()[along].coords
    points = PointSet(
        lat=lat,
        lon=lon,
        time=np.array(hours, np.float64),
        x=x,
        f=f,
        index=flat.astype(np.int64),
        dims=dims,
        shape=shape,
        coords=coords,
        variables=tuple(variables),
        covariates=covariate_channels(covariates),
        attrs={v: dict(data[v].attrs) for v in variables},
        has_time=layout.time is not None,
    )
    if dropna and x.shape[1]:
        keep = np.isfinite(x).all(-1)
        if not keep.all():
            missing = [
                c for c, ok in zip(points.covariates, np.isfinite(x).all(0), strict=True) if not ok
            ]
            warnings.warn(
                f"{int((~keep).sum()):,} of {keep.size:,} points have a missing (NaN) value of "
                f"the covariate(s) {missing} and are left out: as context they are not used, "
                "as targets their predictions are NaN. Fill the covariate where it is missing "
                "(e.g. a DEM without values over the sea: dem.fillna(0)) to keep them.",
                XnpWarning,
                stacklevel=2,
            )
            points = points.take(keep)
    return points


def _point_dims(
    data: xr.Dataset, variables: list[str], layout: Layout, extra_dims: str
) -> tuple[str, ...]:
    spatial = set(layout.point_dims) | ({layout.time_dim} if layout.time_dim else set())
    if not variables:
        return tuple(str(d) for d in data.dims if str(d) in spatial)
    dims = tuple(str(d) for d in data[variables[0]].dims)
    for v in variables[1:]:
        if set(map(str, data[v].dims)) != set(dims):
            raise DimensionError(
                f"Variables {variables[0]!r} {dims} and {v!r} {data[v].dims} have different "
                "dimensions; values taken together must share them."
            )
    missing = [d for d in layout.point_dims if d not in dims]
    if missing:
        raise DimensionError(
            f"Variable {variables[0]!r} has dims {dims} but not the spatial dims {missing} of "
            f"its coordinates {layout.lat or layout.x!r}/{layout.lon or layout.y!r}."
        )
    extra = [d for d in dims if d not in spatial]
    if extra and extra_dims == "raise":
        raise DimensionError(_extra_dims_message(data, variables[0], extra, layout))
    return dims


def _extra_dims_message(data: xr.Dataset, variable: str, extra: list[str], layout: Layout) -> str:
    """Why ``extra`` dimensions of ``variable`` are refused, and what to do instead."""
    time = f"time {layout.time_dim!r}" if layout.time_dim else "no time dimension"
    text = (
        f"Variable {variable!r} has dimension(s) {extra} besides space {layout.point_dims} "
        f"and {time}. "
    )
    timeless = [d for d in extra if d.lower() in known.TIME_NAMES and d not in data.coords]
    if timeless and layout.time_dim is None:  # a time dimension without a coordinate
        d = timeless[0]
        text += (
            f"If {d!r} is time, give it datetimes: ds = ds.assign_coords({{{d!r}: "
            f"pd.date_range('2000-01-01', periods=ds.sizes[{d!r}], freq='6h')}}). Otherwise s"
        )
    else:
        text += "S"
    return text + (
        f"elect one value, e.g. ds = ds.isel({{{extra[0]!r}: 0}}). (to_points and "
        "TaskSampler can instead treat each as separate points at the same place and time, "
        "with extra_dims='flatten'.)"
    )


def predictions_to_xarray(
    targets: PointSet,
    mean: np.ndarray,
    std: np.ndarray,
    variables: Sequence[str],
    *,
    attrs: Mapping[str, Mapping[str, Any]] | None = None,
) -> xr.Dataset:
    """Scatter predictive means and standard deviations onto the target coordinates.

    Gives ``{variable}_mean`` and ``{variable}_std`` with the targets' dims and
    coords, ``units`` of the source variable, a ``long_name`` saying what each is,
    and provenance attributes naming xnp's version.

    Parameters
    ----------
    targets : PointSet
        The target points (from :func:`to_points`).
    mean, std : ndarray, shape ``[N, Dy]``
        Predictions in the data's own units (already de-normalised).
    variables : list of str
        Names of the ``Dy`` channels.
    attrs : mapping, optional
        Attributes of each source variable (``units``, ``long_name``, ...).

    Examples
    --------
    >>> grid = xr.Dataset(coords={"lat": [0.0, 1.0], "lon": [0.0]})
    >>> tp = to_points(grid)
    >>> out = predictions_to_xarray(
    ...     tp, np.ones((2, 1)), np.zeros((2, 1)), ["t2m"], attrs={"t2m": {"units": "K"}}
    ... )
    >>> out["t2m_mean"].dims, out["t2m_mean"].attrs["units"], out["t2m_std"].attrs["long_name"]
    (('lat', 'lon'), 'K', 'predictive standard deviation of t2m')
    """
    mean, std = np.asarray(mean), np.asarray(std)
    expected = (len(targets), len(variables))
    if mean.shape != expected or std.shape != expected:
        raise ShapeError(
            f"mean and std must have shape {expected} (targets, variables); got "
            f"{mean.shape} and {std.shape}."
        )
    out = {}
    for j, name in enumerate(variables):
        source = (attrs or {}).get(name, {})
        for kind, values in (("mean", mean), ("std", std)):
            out[f"{name}_{kind}"] = targets.scatter(
                values[:, j], name=f"{name}_{kind}", attrs=prediction_attrs(name, kind, source)
            )
    return xr.Dataset(out, attrs=prediction_attrs(None, None, {}))


def prediction_attrs(
    name: str | None, kind: str | None, source: Mapping[str, Any]
) -> dict[str, Any]:
    """CF attributes of the prediction ``{name}_{kind}`` (``"mean"``, ``"std"`` or ``"samples"``).

    ``units`` of the source variable, a ``long_name`` saying what it is, and
    provenance attributes naming xnp's version.  With ``name=None`` only the
    provenance (for the Dataset itself).

    Examples
    --------
    >>> prediction_attrs("t2m", "std", {"units": "K"})["long_name"]
    'predictive standard deviation of t2m'
    """
    provenance = {"source": f"xnp {__version__} neural process", "xnp_version": __version__}
    if name is None:
        return provenance
    what = {"mean": "predictive mean", "std": "predictive standard deviation",
            "samples": "joint samples"}[kind]  # fmt: skip
    units = {"units": source["units"]} if "units" in source else {}
    long_name = source.get("long_name", name)
    return {**units, "long_name": f"{what} of {long_name}", **provenance}

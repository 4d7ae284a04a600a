"""The lazy result: one dask task per block of the targets.

The model, the conditioned state and the target coordinates enter the dask graph
once, as one task every block depends on (a :class:`Payload`), so the default
threaded scheduler and ``dask.distributed`` both ship them to each worker once;
the covariates of the targets reach each block as that block's slice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
import xarray as xr

from xnp.arrays import Points
from xnp.data.flatten import PointSet, prediction_attrs, to_points
from xnp.data.trend import Offset, unscaled
from xnp.errors import (
    DimensionError,
)
from xnp.infer import Predictor
from xnp.prediction.context import model_points, prior_std

__all__ = ["Payload", "as_dask", "lazy_prediction"]


@dataclasses.dataclass(eq=False)
class Payload:
    """What every dask block needs; enters the graph once.

    ``template`` holds the target coordinates only (in memory); the model's
    covariates that are data variables of the targets reach each block as that
    block's slice (numpy), so lazy covariates are read block by block, when the
    result is computed, and never at graph build.
    """

    predictor: Predictor
    state: Any
    template: xr.Dataset
    names: dict[str, Any]
    dims: tuple[str, ...]
    covariates: tuple[str, ...]
    template_attrs: dict[str, dict]
    context: Points | None
    radius_km: float | None
    model: Any
    t_target: float | None = None
    #: added to the prediction after it is denormalised: the zero-shot context's
    #: trend, or a forecast's baseline (anything with ``add_to(s, mean, std, prior_std)``)
    offset: Offset | None = None

    def block(self, *covariates: np.ndarray, block_info: dict | None = None) -> np.ndarray:
        """Predict one block of the targets → ``block shape + (2·Dy,)``.

        Places where a covariate is missing (NaN) get NaN, as in the eager path.
        """
        assert block_info is not None  # dask passes it: the block's place in the whole
        where = block_info[None]["array-location"][: len(self.dims)]
        shape = tuple(stop - start for start, stop in where)
        sub = self.template.isel(
            {d: slice(start, stop) for d, (start, stop) in zip(self.dims, where, strict=True)}
        )
        for name, values in zip(self.covariates, covariates, strict=True):
            sub[name] = xr.Variable(self.dims, values, self.template_attrs.get(name))  # units
        self.model.normaliser.check_covariate_units(sub, self.model.covariates, "targets")
        targets = to_points(sub, None, covariates=self.model.covariates, **self.names)
        out = np.full((int(np.prod(shape)), 2 * len(self.model.variables)), np.nan, np.float32)
        if len(targets):
            tgt = model_points(targets, self.model, values=False, t=self.t_target)
            shift = unscaled(self.offset)
            if hasattr(shift, "with_inputs"):  # a forecast model may see its baseline
                tgt = shift.with_inputs(tgt, targets.s)
            if self.radius_km is None:
                mean, std = self.predictor.predict_state(self.state, tgt)
            else:
                mean, std = self.predictor.predict(
                    self.context, tgt, context_radius_km=self.radius_km
                )
            mean, std = self.model.denormalise(mean, std)
            mean, std = mean[0], std[0]
            if self.offset is not None:
                mean, std = self.offset.add_to(targets.s, mean, std, prior_std(self.model))
            out[targets.index] = np.concatenate([mean, std], axis=-1)
        return out.reshape(*shape, out.shape[-1])  # (not -1: a block may be empty)


def lazy_prediction(
    payload: Payload, lazy_covariates: Sequence[Any], targets: PointSet,
    chunks: Mapping[str, Any], attrs: Mapping,
) -> xr.Dataset:  # fmt: skip
    """The prediction as dask arrays, one task per block of the targets' chunks."""
    block_chunks = da.core.normalize_chunks(
        tuple(chunks.get(d, -1) for d in targets.dims), targets.shape, dtype=np.float32
    )
    args = [c.rechunk(block_chunks) for c in lazy_covariates]
    if not args:  # no covariate to read: the blocks come from a placeholder
        args = [da.empty(targets.shape, chunks=block_chunks, dtype=np.int8)]
        block = lambda _, payload, block_info=None: payload.block(block_info=block_info)  # noqa: E731
    else:
        block = lambda *a, payload, block_info=None: payload.block(*a, block_info=block_info)  # noqa: E731
    dy = len(payload.model.variables)
    out = da.map_blocks(
        block,
        *args,
        payload=dask.delayed(payload, pure=True),
        dtype=np.float32,
        new_axis=len(targets.dims),
        chunks=(*block_chunks, (2 * dy,)),
        meta=np.empty((0,) * (len(targets.dims) + 1), np.float32),
    )
    data = {}
    for j, name in enumerate(payload.model.variables):
        for k, kind in ((j, "mean"), (dy + j, "std")):
            data[f"{name}_{kind}"] = xr.DataArray(
                out[..., k], dims=targets.dims, coords=targets.coords,
                attrs=prediction_attrs(name, kind, attrs.get(name, {})),
            )  # fmt: skip
    return xr.Dataset(data, attrs=prediction_attrs(None, None, {}))


def as_dask(covariate: xr.DataArray, dims: tuple[str, ...], shape: tuple[int, ...]) -> Any:
    """A covariate of the targets as a dask array over the targets' ``dims`` (broadcast).

    Lazy values stay lazy; in-memory ones are wrapped without a copy.
    """
    extra = [str(d) for d in covariate.dims if d not in dims]
    if extra:
        raise DimensionError(
            f"covariate {covariate.name!r} has dims {covariate.dims}, which are not all among "
            f"the targets' dims {dims}. Select along {extra} first."
        )
    own = [d for d in dims if d in covariate.dims]
    values = covariate.transpose(*own).data
    values = values if isinstance(values, da.Array) else da.from_array(np.asarray(values))
    # new axes for the target dims the covariate lacks, then broadcast (no copy)
    index = tuple(slice(None) if d in covariate.dims else None for d in dims)
    return da.broadcast_to(values[index], shape)

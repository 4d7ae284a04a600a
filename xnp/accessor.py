"""The ``np`` accessor on ``xr.Dataset`` and ``xr.DataArray``.

Importing :mod:`xnp` registers it (when xarray is imported, before or after xnp).
The accessor holds no state (xarray creates a new one for every object): each
method hands off to :func:`xnp.fit`, :func:`xnp.predict` or :func:`xnp.evaluate`,
returning a model object or ordinary xarray objects.  Those are imported when a
method is first called, so that registering the accessor costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import xarray as xr

if TYPE_CHECKING:
    from xnp.ensemble import Ensemble
    from xnp.neural_process import NeuralProcess
    from xnp.train.settings import TrainConfig

__all__ = ["NPDataArrayAccessor", "NPDatasetAccessor"]


class _NPAccessor:
    """What the Dataset and DataArray accessors share (they hold no state but the object)."""

    def __init__(self, obj: xr.Dataset | xr.DataArray) -> None:
        self._obj = obj

    def predict(
        self,
        model: NeuralProcess | str | os.PathLike,
        targets: Any = None,
        *,
        time: Any = None,
        lead_time: Any = None,
        context_radius: str | float | None = None,
        chunks: dict[str, int] | int | None = None,
        memory_budget: str | int = "1GiB",
        progress: bool = False,
        context_sources: dict[str, Any] | None = None,
        trend: str | None = None,
        samples: int | None = None,
        sample_step: int = 64,
        seed: int = 0,
        max_context: int | None = None,
        calibrate: bool | None = None,
        background: Any = None,
    ) -> xr.Dataset:
        """Predict at ``targets`` with this object's observations as context.

        See :func:`xnp.predict`; the result holds ``{variable}_mean``
        and ``{variable}_std`` on the target coordinates (lazy when the targets
        are dask-chunked or ``chunks`` is given).
        """
        from xnp.api.predict import predict

        return predict(
            model, self._obj, targets, time=time, lead_time=lead_time,
            context_radius=context_radius, chunks=chunks, memory_budget=memory_budget,
            progress=progress, context_sources=context_sources, trend=trend,
            samples=samples, sample_step=sample_step, seed=seed, max_context=max_context,
            calibrate=calibrate, background=background,
        )  # fmt: skip

    def place_sensors(
        self,
        model: NeuralProcess | str | os.PathLike,
        candidates: Any,
        region: Any,
        n_sites: int,
        *,
        acquisition: str = "mean_std",
        trend: str | None = "none",
        truth: Any = None,
        weights: xr.DataArray | None = None,
        batch_size: int = 64,
        lazy: bool = False,
        progress: bool = True,
    ) -> xr.Dataset:
        """Choose ``n_sites`` new sites among ``candidates`` with these observations as context.

        See :func:`xnp.placement.place_sensors`.
        """
        from xnp.placement import place_sensors

        return place_sensors(
            model, self._obj, candidates, region, n_sites, acquisition=acquisition,
            trend=trend, truth=truth, weights=weights, batch_size=batch_size, lazy=lazy,
            progress=progress,
        )  # fmt: skip

    def evaluate(
        self,
        pred: xr.Dataset,
        *,
        variables: str | Sequence[str] | None = None,
        dim: str | Sequence[str] | None = None,
    ) -> xr.Dataset:
        """Score the predictions ``pred`` against this object, the truth.

        See :func:`xnp.evaluate`: RMSE, MAE, CRPS, NLL, interval coverage
        and the number of points, as ``{variable}_{metric}``, averaged over ``dim``
        (default all dimensions).

        Examples
        --------
        >>> import xarray as xr
        >>> truth = xr.Dataset({"t": ("x", [1.0, 3.0])})
        >>> pred = xr.Dataset({"t_mean": ("x", [1.0, 2.0]), "t_std": ("x", [1.0, 1.0])})
        >>> float(truth.np.evaluate(pred).t_mae)
        0.5
        """
        from xnp.scoring.evaluation import evaluate

        return evaluate(pred, self._obj, variables=variables, dim=dim)


@xr.register_dataset_accessor("np")
class NPDatasetAccessor(_NPAccessor):
    """Neural-process methods of a Dataset: ``ds.np.fit(...)``.

    Examples
    --------
    >>> import xnp
    >>> ds = xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=12)
    >>> model = ds.np.fit(
    ...     "field",
    ...     model="bsa-tnp-tiny",
    ...     steps=2,
    ...     batch_size=2,
    ...     progress=False,
    ...     validation=None,
    ...     config=xnp.TrainConfig(log_every=1, validate_every=1),
    ... )
    >>> type(model).__name__
    'NeuralProcess'
    """

    def fit(
        self,
        variable: str | Sequence[str],
        *,
        model: str | Any = "bsa-tnp",
        covariates: Sequence[str] = (),
        tasks: Any = None,
        steps: int | None = None,
        batch_size: int = 8,
        learning_rate: float | None = None,
        validation: float | str | slice | Sequence[Any] | xr.Dataset | xr.DataArray | None = 0.1,
        seed: int = 0,
        checkpoint_dir: str | os.PathLike | None = None,
        resume: bool = False,
        progress: bool = True,
        config: TrainConfig | None = None,
        context_sources: dict[str, Any] | None = None,
        time_budget: str | float | None = None,
        trend: str | None = None,
        members: int = 1,
    ) -> NeuralProcess | Ensemble:
        """Train a neural process to predict ``variable``; see :func:`xnp.fit`."""
        from xnp.api.fit import fit

        return fit(
            self._obj, variable, model=model, covariates=covariates, tasks=tasks, steps=steps,
            batch_size=batch_size, learning_rate=learning_rate, validation=validation,
            seed=seed, checkpoint_dir=checkpoint_dir, resume=resume, progress=progress,
            config=config, context_sources=context_sources, time_budget=time_budget,
            trend=trend, members=members,
        )  # fmt: skip


@xr.register_dataarray_accessor("np")
class NPDataArrayAccessor(_NPAccessor):
    """Neural-process methods of a DataArray, which learns its own variable (its name).

    Examples
    --------
    >>> import xnp
    >>> da = xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=12).field
    >>> model = da.np.fit(
    ...     model="bsa-tnp-tiny",
    ...     steps=2,
    ...     batch_size=2,
    ...     progress=False,
    ...     validation=None,
    ...     config=xnp.TrainConfig(log_every=1, validate_every=1),
    ... )
    >>> model.variables
    ('field',)
    """

    def fit(
        self,
        *,
        model: str | Any = "bsa-tnp",
        covariates: Sequence[str] = (),
        tasks: Any = None,
        steps: int | None = None,
        batch_size: int = 8,
        learning_rate: float | None = None,
        validation: float | str | slice | Sequence[Any] | xr.Dataset | xr.DataArray | None = 0.1,
        seed: int = 0,
        checkpoint_dir: str | os.PathLike | None = None,
        resume: bool = False,
        progress: bool = True,
        config: TrainConfig | None = None,
        context_sources: dict[str, Any] | None = None,
        time_budget: str | float | None = None,
        trend: str | None = None,
        members: int = 1,
    ) -> NeuralProcess | Ensemble:
        """Train a neural process on this DataArray; see :func:`xnp.fit`."""
        from xnp.api.fit import fit

        return fit(
            self._obj, None, model=model, covariates=covariates, tasks=tasks, steps=steps,
            batch_size=batch_size, learning_rate=learning_rate, validation=validation,
            seed=seed, checkpoint_dir=checkpoint_dir, resume=resume, progress=progress,
            config=config, context_sources=context_sources, time_budget=time_budget,
            trend=trend, members=members,
        )  # fmt: skip

"""What the baselines share: their input checks, their provenance label and the spatial base.

:class:`SpatialBaseline` gives a spatial interpolator the ``predict`` call and
output of :func:`xnp.predict`, each time on its own; a subclass implements only
``_predict_points``.  :func:`as_dataset`, :func:`variables_to_predict`,
:func:`as_variable_names` and :func:`label_source` serve it and :class:`Persistence
<xnp.baselines.Persistence>` alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from xnp.data.coords import find_coords
from xnp.data.flatten import PointSet, predictions_to_xarray, to_points
from xnp.errors import EmptyDataError, VariableNotFoundError
from xnp.prediction.frames import predict_each_time
from xnp.prediction.templates import checked_dataset, template_of

__all__ = [
    "TARGET_CHUNK",
    "SpatialBaseline",
    "as_dataset",
    "as_variable_names",
    "label_source",
    "variables_to_predict",
]

TARGET_CHUNK = 4096  # targets predicted at a time (bounds the cross-covariance memory)


def as_dataset(data: xr.Dataset | xr.DataArray) -> xr.Dataset:
    """The observations as a Dataset; an unnamed DataArray becomes the variable ``value``.

    Parameters
    ----------
    data : Dataset or DataArray
        The observations a baseline is given.

    Returns
    -------
    Dataset
        ``data`` itself, or a DataArray as a one-variable Dataset.

    Raises
    ------
    ConfigError
        When ``data`` is neither a Dataset nor a DataArray.
    """
    if isinstance(data, xr.DataArray) and data.name is None:
        return data.to_dataset(name="value")
    return checked_dataset(data, "data")


def variables_to_predict(data: xr.Dataset, variables: tuple[str, ...] | None) -> list[str]:
    """The variables a baseline predicts: those asked for, else every one but elevation.

    Parameters
    ----------
    data : Dataset
        The observations.
    variables : tuple of str or None
        The variables asked for (each must be in ``data``); None for all.

    Returns
    -------
    list of str
        The names of the variables to predict, at least one.
    """
    if variables is not None:
        missing = [v for v in variables if v not in data.data_vars]
        if missing:
            raise VariableNotFoundError(
                f"the data has no variable {missing}; its data variables are "
                f"{[str(v) for v in data.data_vars]}."
            )
        return list(variables)
    names = [str(v) for v in data.data_vars]
    if not names:
        raise VariableNotFoundError("the data holds no data variable to predict.")
    elevation = find_coords(data, names[0]).elevation
    names = [v for v in names if v != elevation]
    if not names:
        raise VariableNotFoundError(
            "the data holds only an elevation variable; nothing to predict."
        )
    return names


def as_variable_names(variables: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """A baseline's ``variables`` argument as a tuple of names (None stays None).

    Parameters
    ----------
    variables : str, sequence of str or None
        One name, several, or None for every data variable.

    Returns
    -------
    tuple of str or None
    """
    if variables is None:
        return None
    return (variables,) if isinstance(variables, str) else tuple(variables)


def label_source(out: xr.Dataset, name: str) -> xr.Dataset:
    """Say in the provenance attributes which baseline made the prediction.

    Parameters
    ----------
    out : Dataset
        A prediction laid out by :func:`~xnp.data.flatten.predictions_to_xarray`,
        whose ``source`` attribute names a neural process.
    name : str
        The baseline's name.

    Returns
    -------
    Dataset
        ``out`` with ``source`` (of the Dataset and of each variable) naming the baseline.
    """
    source = out.attrs["source"].replace("neural process", f"baseline: {name}")
    out = out.assign_attrs(source=source)
    for v in out.data_vars.values():
        v.attrs["source"] = source  # our own fresh arrays, not user data
    return out


def _time_label(frame: xr.Dataset, layout: Any) -> str:
    return f" at time {frame[layout.time].values}" if layout.time is not None else ""


class SpatialBaseline:
    """Spatial interpolation of each time on its own, with the layout of ``xnp.predict``.

    A subclass sets ``name`` (said in the provenance attributes) and implements
    ``_predict_points(context, targets)``: the mean and std at the target points
    from the observed points of one variable at one time.

    Parameters
    ----------
    variables : str or list of str, optional
        Variables to predict; default every data variable (except elevation).
    """

    name = "baseline"

    def __init__(self, variables: str | Sequence[str] | None = None) -> None:
        self.variables = as_variable_names(variables)

    def predict(
        self,
        data: xr.Dataset | xr.DataArray,
        targets: xr.Dataset | xr.DataArray | dict[str, Any] | None = None,
        *,
        time: Any = None,
    ) -> xr.Dataset:
        """Predictive mean and std at ``targets`` from the observations in ``data``.

        Parameters
        ----------
        data : Dataset or DataArray
            Observations (missing values skipped); never modified.
        targets : Dataset, DataArray or dict of coordinates, optional
            Where to predict; default every point of ``data``.
        time : optional
            Time(s) to predict, selected from ``data`` with ``.sel``; default all.

        Returns
        -------
        Dataset
            ``{var}_mean`` and ``{var}_std`` laid out as :func:`xnp.predict` would.
        """
        data = as_dataset(data)
        variables = variables_to_predict(data, self.variables)
        where = template_of(targets, data)
        layout = find_coords(data, variables[0])
        return where.arrange(predict_each_time(
            data, where.points, layout, time,
            lambda frame, tmpl: self._one_time(frame, tmpl, variables, layout),
        ))  # fmt: skip

    def _one_time(
        self, data: xr.Dataset, template: xr.Dataset, variables: list[str], layout: Any
    ) -> xr.Dataset:
        targets = to_points(template, None)
        means, stds = [], []
        for v in variables:
            if int(data[v].count()) == 0:
                raise EmptyDataError(
                    f"no observation of {v!r}{_time_label(data, layout)}; drop that time or "
                    "choose another."
                )
            context = to_points(data, v)
            mean, std = self._predict_points(context, targets)
            means.append(mean)
            stds.append(std)
        attrs = {v: dict(data[v].attrs) for v in variables}
        out = predictions_to_xarray(
            targets, np.stack(means, -1), np.stack(stds, -1), variables, attrs=attrs
        )
        return label_source(out, self.name)

    def _predict_points(
        self, context: PointSet, targets: PointSet
    ) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError  # pragma: no cover

"""Plots (matplotlib): maps of predictions and observations, learning curves, calibration.

``maps`` (:func:`plot_prediction`, :func:`plot_stations`), ``sites``
(:func:`plot_placement`), ``diagnostics``
(:func:`plot_history`, :func:`plot_calibration`) and ``canvas`` (the figures and map
panels they draw on).  Every plot is built without pyplot: no window opens, nothing is
registered with pyplot's figure manager (so nothing leaks in loops), and a notebook
shows the figure once, as the cell's value.  matplotlib is an optional dependency
(``pip install 'xnp[plot]'``), imported only when a plot is made; maps use cartopy
with coastlines when it and its coastline data are on disk.

The plots sit above scoring: this package may import :mod:`xnp.scoring`,
:mod:`xnp.data`, :mod:`xnp.geo`, ``xnp.history`` and :mod:`xnp.errors`.
"""

from xnp.errors import MissingDependencyError
from xnp.plot.diagnostics import plot_calibration, plot_history
from xnp.plot.maps import plot_prediction, plot_stations
from xnp.plot.sites import plot_placement

__all__ = [
    "MissingDependencyError",
    "plot_calibration",
    "plot_history",
    "plot_placement",
    "plot_prediction",
    "plot_stations",
]

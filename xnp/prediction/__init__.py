"""Prediction on xarray objects with a model object: the machinery behind ``xnp.predict``.

``templates`` (where to predict), ``frames`` (which times), ``context`` (the
observations, normalised once per time), ``guards`` (refusals and warnings
before any work), ``blocks`` (the lazy dask result), ``run`` (eager chunks or
lazy blocks of one context), ``forecast`` (initialisation and lead times) and
``core`` (:func:`predict_with`).  It takes a model object through its interface
(``variables``, ``normaliser``, ``module``, ...) and never imports the model
class, the shipped models or the public API above it; it may import
:mod:`xnp.infer`, :mod:`xnp.data`, :mod:`xnp.geo`, :mod:`xnp.arrays`,
:mod:`xnp.units` and :mod:`xnp.errors`.
"""

from xnp.prediction.core import predict_with

__all__ = ["predict_with"]

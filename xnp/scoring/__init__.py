"""Scoring predictions: metrics against the truth, calibration, cross-validation.

``scores`` (the pointwise score kernels, :data:`~xnp.scoring.scores.METRICS`),
``align`` (pairing a prediction with the truth), ``evaluation``
(:func:`xnp.evaluate`: RMSE, MAE, CRPS, NLL, interval coverage; probability integral
transforms) and ``cross_validation`` (``xnp.validation``: leave-one-out and spatial
block folds).  Scoring sits above the public API (cross-validation calls any predict
function) and below the command line and the plots; it may import :mod:`xnp.data`
and :mod:`xnp.errors`, and never a model, :mod:`xnp.plot` or the command line.
"""

"""The public functions on xarray objects: :func:`fit` and :func:`predict`.

``fit`` (with ``sizes``: the tasks and batch shapes of a fit, and ``inputs``: its
checked inputs, hold-out and fingerprints) trains a model on a dataset;
``predict`` resolves a model (an object, a saved model's directory or a shipped
model's name) and predicts with it through :mod:`xnp.prediction`.  This package
may import everything below it (``neural_process``, ``pretrained``,
``prediction``, ``train``, ``infer``, ``data``, ``models``, ...), and nothing
above it (``accessor``, ``scoring``, ``baselines``, ``plot``, ``cli``).  The two
functions are ``xnp.fit`` and ``xnp.predict``; here they are ``xnp.api.fit.fit``
and ``xnp.api.predict.predict`` (the package does not re-export them, so that
the module names stay the modules).
"""

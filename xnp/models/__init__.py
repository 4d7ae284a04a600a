"""The models: BSA-TNP and Swin-TNP as Flax NNX modules, their configs and registry.

``bsa_tnp`` and ``swin_tnp`` (the modules, each with the split API
``condition(context) -> state`` / ``predict(state, targets)``), ``config`` and
``swin_config`` (frozen, validated configurations), ``likelihoods`` (the
Gaussian head and NLL) and ``registry`` (model names, building, saving configs).
It may import :mod:`xnp.nn`, :mod:`xnp.geo`, :mod:`xnp.arrays` and
:mod:`xnp.errors`; never xarray, dask or :mod:`xnp.data`.
"""

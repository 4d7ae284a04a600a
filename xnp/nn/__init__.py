"""Neural-network building blocks on JAX arrays: attention, biases, layers, windows.

``attention`` (Biased Scan Attention and its dense reference, with ``tiles`` and
the backward pass ``attention_bwd``), ``bias`` (the RBF attention biases of
distances in space and time), ``layers`` (MLPs, multi-head attention,
``count_params``), ``windows`` (Swin-TNP's shifted windows and pseudo-token
grids), ``native`` (the C++ CPU kernels, compiled on first use, with pure-JAX
references beside them) and ``pallas_attention`` / ``pallas_attention_bwd`` (the
fused GPU kernels of biased attention, in Pallas).  It may import only :mod:`xnp.geo` and
:mod:`xnp.errors`; never xarray, dask or :mod:`xnp.data` (import-linter keeps it so).
"""

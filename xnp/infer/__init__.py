"""Inference on padded arrays: condition once, predict chunks, regional context.

``predictor`` (:class:`Predictor`), ``chunks`` (chunk sizes from a memory
budget, host-side padding, the compiled calls) and ``regional`` (compact target
chunks and their nearby context).  No xarray here: it may import
:mod:`xnp.arrays`, :mod:`xnp.geo`, :mod:`xnp.units` and :mod:`xnp.errors`, and
takes models through their split API (``condition``/``predict``).
"""

from xnp.infer.chunks import chunk_size_for_budget
from xnp.infer.predictor import Predictor, is_planar
from xnp.infer.regional import compact_chunks

__all__ = ["Predictor", "chunk_size_for_budget", "compact_chunks", "is_planar"]

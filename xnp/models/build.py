"""Building the models a configuration describes: modules, their structure, their shapes.

:func:`build_model` instantiates the module of a configuration; the others give
its structure (``graphdef``) and parameter shapes without allocating anything,
for loading saved parameters and for predicting with many normalisers of one
model.  The names and configurations are in :mod:`xnp.models.registry`.
"""

from __future__ import annotations

import functools

from flax import nnx

from xnp.models.bsa_tnp import BSATNP
from xnp.models.registry import ModelConfig, kind_of
from xnp.models.swin_tnp import SwinTNP

__all__ = ["abstract_model", "build_model", "graphdef_of", "params_template"]

#: kind -> module class
_MODULES: dict[str, type[nnx.Module]] = {"bsa-tnp": BSATNP, "swin-tnp": SwinTNP}


def build_model(config: ModelConfig, *, rngs: nnx.Rngs) -> nnx.Module:
    """Instantiate the module described by ``config``.

    Examples
    --------
    >>> from xnp.models.config import BSATNPConfig
    >>> type(build_model(BSATNPConfig.tiny(), rngs=nnx.Rngs(0))).__name__
    'BSATNP'
    """
    return _MODULES[kind_of(config)](config, rngs=rngs)


def abstract_model(config: ModelConfig) -> nnx.Module:
    """The module of ``config`` with shapes and dtypes only (nothing allocated)."""
    return nnx.eval_shape(lambda: build_model(config, rngs=nnx.Rngs(0)))


def params_template(config: ModelConfig) -> nnx.State:
    """Shapes and dtypes of the parameters of ``config``'s model (nothing allocated).

    Examples
    --------
    >>> from xnp.models.config import BSATNPConfig
    >>> from xnp.nn.layers import count_params
    >>> count_params(params_template(BSATNPConfig()))
    475770
    """
    return nnx.split(abstract_model(config))[1]


def graphdef_of(config: ModelConfig) -> nnx.GraphDef:
    """The model structure of ``config``, built once per (hashable) configuration.

    Tracing the model's constructor takes about half a second, and zero-shot
    prediction makes a new model object (own normaliser) per context set.
    """
    try:
        return _cached_graphdef(config)
    except TypeError:  # an unhashable config: build it each time
        return nnx.split(abstract_model(config))[0]


@functools.lru_cache(maxsize=16)
def _cached_graphdef(config: ModelConfig) -> nnx.GraphDef:
    return nnx.split(abstract_model(config))[0]

"""Model registry: names users type (``"bsa-tnp"``) to configurations and modules.

A registry entry maps a name to a configuration preset.  :func:`model_config`
turns a name or a configuration into the final configuration for a dataset:
the data decide the number of covariate channels ``dim_x``, of output
variables ``dim_y`` and whether a temporal bias is needed, and
:func:`config_to_dict` / :func:`config_from_dict` carry the model kind along for
saving.  It imports the configurations only (no flax), so that naming models is
cheap (the command line's ``--help``); :mod:`xnp.models.build` instantiates them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xnp.errors import ConfigError
from xnp.models.config import BSATNPConfig
from xnp.models.swin_config import SwinTNPConfig

__all__ = [
    "KINDS",
    "available_models",
    "config_from_dict",
    "config_to_dict",
    "kind_of",
    "model_config",
    "name_key",
    "register_model",
]

ModelConfig = BSATNPConfig | SwinTNPConfig

_PRESETS: dict[str, Callable[[], ModelConfig]] = {
    "bsa-tnp": BSATNPConfig,
    "bsa-tnp-tiny": BSATNPConfig.tiny,
    "swin-tnp": SwinTNPConfig,
    "swin-tnp-tiny": SwinTNPConfig.tiny,
}
# kind (stored in config.json) -> config class; the module classes are in xnp.models.build
KINDS: dict[str, type] = {"bsa-tnp": BSATNPConfig, "swin-tnp": SwinTNPConfig}


def name_key(name: str) -> str:
    """The registry key of a model name: case, surrounding spaces and ``_``/``-`` do not count."""
    return name.strip().lower().replace("_", "-")


def available_models() -> tuple[str, ...]:
    """Names accepted by ``model=`` in :func:`xnp.fit`.

    Examples
    --------
    >>> available_models()
    ('bsa-tnp', 'bsa-tnp-tiny', 'swin-tnp', 'swin-tnp-tiny')
    """
    return tuple(_PRESETS)


def register_model(name: str, preset: Callable[[], ModelConfig]) -> None:
    """Register a configuration preset under ``name`` (e.g. a custom size).

    Examples
    --------
    >>> register_model("bsa-tnp-small", lambda: BSATNPConfig(n_blocks=3))
    >>> "bsa-tnp-small" in available_models()
    True
    >>> _ = _PRESETS.pop("bsa-tnp-small")
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"A model name must be a non-empty string; got {name!r}.")
    if not callable(preset):
        raise ConfigError(
            f"preset must be a function returning a model configuration; got {preset!r}."
        )
    _PRESETS[name_key(name)] = preset


def kind_of(config: Any) -> str:
    """The kind (``"bsa-tnp"``, ``"swin-tnp"``) of a model configuration, or a ConfigError."""
    for kind, cls in KINDS.items():
        if isinstance(config, cls):
            return kind
    raise ConfigError(
        f"model must be a registered name ({', '.join(_PRESETS)}) or a model configuration "
        f"such as BSATNPConfig or SwinTNPConfig; got {type(config).__name__}."
    )


def model_config(
    model: str | ModelConfig, *, dim_x: int, dim_y: int, temporal: bool
) -> ModelConfig:
    """The configuration to train for data with ``dim_x`` covariates and ``dim_y`` outputs.

    Parameters
    ----------
    model : str, BSATNPConfig or SwinTNPConfig
        A registered name (see :func:`available_models`; case and ``_`` for ``-``
        do not matter) or a configuration.
    dim_x, dim_y : int
        Numbers of covariate channels and output variables (set from the data).
    temporal : bool
        Whether the tasks span several times; sets ``temporal_bias`` (BSA-TNP) or
        ``embed_t`` (Swin-TNP, which takes time as a point feature).

    Examples
    --------
    >>> cfg = model_config("bsa-tnp-tiny", dim_x=2, dim_y=1, temporal=True)
    >>> cfg.dim_x, cfg.temporal_bias, cfg.spatial_bias
    (2, True, 'great_circle')
    >>> model_config("BSA-TNP-Tiny", dim_x=0, dim_y=1, temporal=False) == model_config(
    ...     "bsa-tnp-tiny", dim_x=0, dim_y=1, temporal=False
    ... )
    True
    >>> model_config("gp-net", dim_x=0, dim_y=1, temporal=False)
    Traceback (most recent call last):
    ...
    xnp.errors.ConfigError: Unknown model 'gp-net'; available models: bsa-tnp, ...
    """
    if isinstance(model, str):
        key = name_key(model)
        if key not in _PRESETS:
            raise ConfigError(f"Unknown model {model!r}; available models: {', '.join(_PRESETS)}.")
        config = _PRESETS[key]()
    else:
        config = model
    kind_of(config)
    if config.dim_s != 2:
        raise ConfigError(
            f"Data points have latitude and longitude (dim_s=2); the configuration has "
            f"dim_s={config.dim_s}."
        )
    if isinstance(config, SwinTNPConfig):
        if config.geometry != "sphere":
            raise ConfigError(
                "xarray data have latitude/longitude; use a SwinTNPConfig with geometry='sphere'."
            )
        return config.replace(dim_x=dim_x, dim_y=dim_y, embed_t=temporal)
    return config.replace(dim_x=dim_x, dim_y=dim_y, temporal_bias=temporal)


def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    """``{"kind": ..., "config": {...}}``, JSON-serialisable.

    Examples
    --------
    >>> cfg = BSATNPConfig.tiny()
    >>> config_from_dict(config_to_dict(cfg)) == cfg
    True
    """
    return {"kind": kind_of(config), "config": config.to_dict()}


def config_from_dict(blob: dict[str, Any]) -> ModelConfig:
    """Inverse of :func:`config_to_dict`; unknown kinds raise :class:`ConfigError`."""
    kind = blob.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"Unknown model kind {kind!r}; this xnp knows {sorted(KINDS)}.")
    return KINDS[kind].from_dict(blob.get("config", {}))

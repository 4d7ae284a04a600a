"""Model configurations: frozen, validated, JSON round-trippable dataclasses."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Self

from xnp.errors import ConfigError

__all__ = ["BSATNPConfig", "ConfigIO"]


def _listify(value: Any) -> Any:
    return [_listify(v) for v in value] if isinstance(value, tuple) else value


def _tuplify(value: Any) -> Any:
    return tuple(_tuplify(v) for v in value) if isinstance(value, list) else value


class ConfigIO:
    """``replace``, ``to_dict`` and ``from_dict`` shared by the frozen model configs."""

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (tuples, also nested ones, become lists)."""
        return {k: _listify(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Inverse of :meth:`to_dict`; unknown keys raise :class:`ConfigError`."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(
                f"unknown {cls.__name__} fields {unknown}; known fields are {sorted(names)}."
            )
        return cls(**{k: _tuplify(v) for k, v in data.items()})


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be positive; got {value!r}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BSATNPConfig(ConfigIO):
    """Configuration of a BSA-TNP model.

    The defaults are the paper's sizes (6 KRBlocks, 4 heads, token dimension 64,
    attention dimension 128, embedding MLP 256-128-64, 5 spatial and 3 temporal
    basis functions per head and layer; ≈476K parameters for one output).

    Parameters
    ----------
    dim_y : int
        Number of output channels (variables).
    dim_x : int
        Number of fixed effects (covariates) per point.
    dim_s : int
        Spatial coordinates per point: 2 for latitude/longitude; any number for
        Euclidean coordinates.
    embed_s, embed_t : bool
        Whether location and time are also embedded as features.  Leave False for a
        model that is invariant to rotations (great circle) or translations
        (Euclidean) of space and to shifts of time: then they enter only through
        the attention biases.  Embedded coordinates are unit vectors on the sphere
        (``"great_circle"``), otherwise divided by ``spatial_scale``; embedded
        times are divided by ``temporal_scale``.
    spatial_bias : {"great_circle", "euclidean", "none"}
        Metric of the spatial attention bias.
    spatial_scale : float
        Length the spatial distance is divided by before the basis functions:
        kilometres for ``"great_circle"``, coordinate units for ``"euclidean"``.
    temporal_bias : bool
        Whether to add the temporal bias on ``|Δt|``.
    temporal_scale : float
        Hours the time difference is divided by.
    n_basis_space, n_basis_time : int
        RBF basis functions per head and layer.
    n_blocks, n_heads, dim_token, dim_attn : int
        Transformer sizes.
    dim_obs_embed : int
        Size of the learned embedding of the observed/target flag.
    embed_hidden : tuple of int
        Hidden sizes of the embedding MLP (its output is ``dim_token``).
    ffn_hidden : int
        Hidden size of the feed-forward layer of each block.
    head_hidden : tuple of int
        Hidden sizes of the prediction head.
    min_std : float
        Floor of the predictive standard deviation (in normalised units).
    attention : {"bsa", "dense"}
        Attention kernel: Biased Scan Attention, or the dense reference.
    q_chunk, k_chunk : int
        Tile sizes of Biased Scan Attention.
    dtype : {"float32", "bfloat16", "float16"}
        Compute dtype of the dense layers (parameters stay float32).

    Examples
    --------
    >>> cfg = BSATNPConfig.tiny(spatial_bias="euclidean")
    >>> BSATNPConfig.from_dict(cfg.to_dict()) == cfg
    True
    """

    dim_y: int = 1
    dim_x: int = 0
    dim_s: int = 2
    embed_s: bool = False
    embed_t: bool = False
    spatial_bias: Literal["great_circle", "euclidean", "none"] = "great_circle"
    spatial_scale: float = 1000.0
    temporal_bias: bool = False
    temporal_scale: float = 24.0
    n_basis_space: int = 5
    n_basis_time: int = 3
    n_blocks: int = 6
    n_heads: int = 4
    dim_token: int = 64
    dim_attn: int = 128
    dim_obs_embed: int = 4
    embed_hidden: tuple[int, ...] = (256, 128)
    ffn_hidden: int = 256
    head_hidden: tuple[int, ...] = (256, 64)
    min_std: float = 1e-3
    attention: Literal["bsa", "dense"] = "bsa"
    q_chunk: int = 512
    k_chunk: int = 512
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"

    def __post_init__(self) -> None:
        for name in (
            "dim_y",
            "n_blocks",
            "n_heads",
            "dim_token",
            "dim_attn",
            "dim_obs_embed",
            "ffn_hidden",
            "n_basis_space",
            "n_basis_time",
            "q_chunk",
            "k_chunk",
            "dim_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer; got {value!r}.")
        if not isinstance(self.dim_x, int) or self.dim_x < 0:
            raise ConfigError(f"dim_x must be a non-negative integer; got {self.dim_x!r}.")
        if self.dim_attn % self.n_heads:
            raise ConfigError(
                f"dim_attn ({self.dim_attn}) must be divisible by n_heads ({self.n_heads})."
            )
        if self.spatial_bias not in ("great_circle", "euclidean", "none"):
            raise ConfigError(
                "spatial_bias must be 'great_circle', 'euclidean' or 'none'; "
                f"got {self.spatial_bias!r}."
            )
        if self.spatial_bias == "great_circle" and self.dim_s != 2:
            raise ConfigError(
                f"the great-circle bias needs dim_s=2 (latitude, longitude); got {self.dim_s}."
            )
        if self.attention not in ("bsa", "dense"):
            raise ConfigError(f"attention must be 'bsa' or 'dense'; got {self.attention!r}.")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(
                f"dtype must be 'float32', 'bfloat16' or 'float16'; got {self.dtype!r}."
            )
        _positive("spatial_scale", self.spatial_scale)
        _positive("temporal_scale", self.temporal_scale)
        if not 0.0 <= self.min_std < 1.0:
            raise ConfigError(f"min_std must be in [0, 1); got {self.min_std!r}.")
        for name in ("embed_hidden", "head_hidden"):
            sizes = getattr(self, name)
            if not all(isinstance(h, int) and h > 0 for h in sizes):
                raise ConfigError(f"{name} must hold positive integers; got {sizes!r}.")

    @classmethod
    def tiny(cls, **overrides: Any) -> Self:
        """A small preset (a few thousand parameters) for tests and demos."""
        sizes = {
            "n_blocks": 2, "n_heads": 2, "dim_token": 16, "dim_attn": 16, "dim_obs_embed": 2,
            "embed_hidden": (32,), "ffn_hidden": 32, "head_hidden": (32,), "n_basis_space": 3,
            "n_basis_time": 2,
        }  # fmt: skip
        return cls(**{**sizes, **overrides})

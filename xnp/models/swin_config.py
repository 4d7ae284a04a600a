"""Configuration of the Swin-TNP (gridded pseudo-token TNP): frozen and validated."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, Self

import numpy as np

from xnp.errors import ConfigError
from xnp.models.config import (
    ConfigIO,
    check_bool,
    check_choice,
    check_int,
    check_real,
    check_sizes,
)

__all__ = ["SwinTNPConfig"]


def _finite(value: Any) -> bool:
    return (
        isinstance(value, int | float | np.integer | np.floating)
        and not isinstance(value, bool | np.bool_)
        and math.isfinite(value)
    )


_INT_FIELDS = (
    "dim_y", "n_layers", "n_heads", "dim_token", "dim_attn", "ffn_hidden", "dim_obs_embed",
)  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class SwinTNPConfig(ConfigIO):
    """Configuration of a Swin-TNP model (Ashman et al. 2025, "Gridded TNPs").

    The defaults are the paper's sizes (token dimension 128, 8 heads of 16,
    5 Swin layers each followed by a nearest-neighbour cross-attention decoder
    layer, window 4 and shift 2, 3 × 3 decoder neighbourhoods, MLPs with two
    hidden layers of 128) on a global 64 × 128 latitude/longitude grid (the
    paper's station experiment; ≈2.3M parameters, as the paper's 2.29M).
    ``SwinTNPConfig.gp2d()`` is the paper's 2-D GP setting (32 × 32 grid on
    ``[-6, 6]²``; ≈1.3M parameters, the paper's 1.32M).

    Parameters
    ----------
    dim_y, dim_x : int
        Output channels and fixed effects (covariates) per point.
    dim_s : int
        Spatial coordinates per point; always 2 (latitude/longitude, or x/y).
    geometry : {"sphere", "plane"}
        ``"sphere"``: ``s`` is latitude/longitude in degrees, the grid is a
        latitude/longitude grid, offsets use wrapped longitude and the
        great-circle distance.  ``"plane"``: ``s`` is Euclidean.
    grid_shape : (int, int)
        Grid nodes along the two axes (latitude, longitude).
    extent : ((float, float), (float, float))
        Lower and upper edge of the grid on each axis (cell-centred nodes: the
        spacing is ``(hi - lo) / n``).  On the sphere a longitude extent of 360°
        makes the grid global: longitude then wraps in the windows, their shifts
        and the decoder neighbourhoods (the node count must be a window multiple).
    grid_anchor : {"fixed", "context"}
        ``"fixed"``: the grid covers ``extent``.  ``"context"`` (plane only): the
        grid keeps the spacing and size of ``extent`` but is centred on each
        task's context bounding box, so it moves with the data (the paper's
        data-derived grid of the translation-equivariant model).
    window, shift : (int, int)
        Swin window and shift, in nodes (paper: 4 and 2 on each axis).
    translation_equivariant : bool
        The paper's Swin-TNP(T): no absolute position features in the point
        tokens and one initial grid token shared by all nodes, so positions enter
        only through relative offsets (encoder and decoder biases, the windows'
        relative-position bias).
    n_fourier : int
        Fourier frequencies per coordinate of the absolute position features
        (non-equivariant model only); 0 turns them off.
    embed_t : bool
        Whether time ``t`` (divided by ``temporal_scale`` hours) is a point feature
        (the way forecast context frames are told apart; see the module notes of
        :mod:`xnp.models.swin_tnp`).
    temporal_scale : float
        Hours ``t`` is divided by.
    n_layers, n_heads, dim_token, dim_attn, ffn_hidden : int
        Transformer sizes (paper: 5, 8, 128, 128, 128).
    dim_obs_embed : int
        Size of the learned embedding of the observed/target flag.
    embed_hidden, head_hidden : tuple of int
        Hidden sizes of the point-token MLP and of the Gaussian head.
    bias_hidden : tuple of int
        Hidden sizes of the MLPs mapping point-to-node offsets to per-head biases.
    decoder_radius : int
        Decoder neighbourhood half-width: ``(2r+1)²`` nodes (paper: r = 1, k = 9).
    min_std : float
        Floor of the predictive standard deviation.
    dtype : {"float32", "bfloat16", "float16"}
        Compute dtype of the dense layers.

    Examples
    --------
    >>> cfg = SwinTNPConfig.tiny(geometry="plane", extent=((-2.0, 2.0), (-2.0, 2.0)))
    >>> SwinTNPConfig.from_dict(cfg.to_dict()) == cfg
    True
    >>> cfg.spacing, cfg.wrap
    ((0.5, 0.5), (False, False))
    """

    dim_y: int = 1
    dim_x: int = 0
    dim_s: int = 2
    geometry: Literal["sphere", "plane"] = "sphere"
    grid_shape: tuple[int, int] = (64, 128)
    extent: tuple[tuple[float, float], tuple[float, float]] = ((-90.0, 90.0), (-180.0, 180.0))
    grid_anchor: Literal["fixed", "context"] = "fixed"
    window: tuple[int, int] = (4, 4)
    shift: tuple[int, int] = (2, 2)
    translation_equivariant: bool = False
    n_fourier: int = 16
    embed_t: bool = False
    temporal_scale: float = 24.0
    n_layers: int = 5
    n_heads: int = 8
    dim_token: int = 128
    dim_attn: int = 128
    ffn_hidden: int = 128
    dim_obs_embed: int = 4
    embed_hidden: tuple[int, ...] = (128, 128)
    head_hidden: tuple[int, ...] = (128, 128)
    bias_hidden: tuple[int, ...] = (16, 16)
    decoder_radius: int = 1
    min_std: float = 1e-3
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            check_int(self, name)
        check_int(self, "dim_x", minimum=0)
        check_int(self, "n_fourier", minimum=0)
        check_int(self, "decoder_radius", minimum=0)
        if not isinstance(self.dim_s, int) or self.dim_s != 2:
            raise ConfigError(f"Swin-TNP grids are 2-D: dim_s must be 2; got {self.dim_s!r}.")
        for name in ("translation_equivariant", "embed_t"):
            check_bool(self, name)
        if self.dim_attn % self.n_heads:
            raise ConfigError(
                f"dim_attn ({self.dim_attn}) must be divisible by n_heads ({self.n_heads})."
            )
        check_choice(self, "geometry", ("sphere", "plane"))
        check_choice(self, "grid_anchor", ("fixed", "context"))
        if self.grid_anchor == "context" and self.geometry != "plane":
            raise ConfigError("grid_anchor='context' is only supported with geometry='plane'.")
        check_choice(self, "dtype", ("float32", "bfloat16", "float16"))
        self._check_grid()
        check_real(self, "min_std", lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
        check_real(self, "temporal_scale", lambda v: v > 0, "a positive finite number")
        for name in ("embed_hidden", "head_hidden", "bias_hidden"):
            check_sizes(self, name)

    def _check_grid(self) -> None:
        check_sizes(self, "grid_shape", length=2)
        check_sizes(self, "window", length=2)
        check_sizes(self, "shift", length=2, minimum=0)
        if not all(0 <= s < w for s, w in zip(self.shift, self.window, strict=True)):
            raise ConfigError(f"shift {self.shift} must lie in [0, window {self.window}).")
        extent = self.extent
        good = isinstance(extent, tuple | list) and len(extent) == 2
        good = good and all(
            isinstance(e, tuple | list)
            and len(e) == 2
            and all(_finite(v) for v in e)
            and float(e[1]) > float(e[0])
            for e in extent
        )
        if not good:
            raise ConfigError(
                f"extent must be ((lo, hi), (lo, hi)) of finite numbers with hi > lo; "
                f"got {extent!r}."
            )
        object.__setattr__(self, "extent", tuple((float(lo), float(hi)) for lo, hi in extent))
        if self.geometry == "sphere":
            (lat0, lat1), (lon0, lon1) = self.extent
            if lat0 < -90.0 or lat1 > 90.0 or lon1 - lon0 > 360.0:
                raise ConfigError(
                    "a latitude/longitude extent must lie within [-90, 90] × 360°; "
                    f"got {self.extent!r}."
                )
        if self.wrap[1] and self.grid_shape[1] % self.window[1]:
            raise ConfigError(
                f"a global grid needs a longitude node count ({self.grid_shape[1]}) that is a "
                f"multiple of the window ({self.window[1]})."
            )

    @property
    def spacing(self) -> tuple[float, float]:
        """Node spacing on each axis (degrees on the sphere)."""
        return tuple(
            (hi - lo) / n for (lo, hi), n in zip(self.extent, self.grid_shape, strict=True)
        )

    @property
    def wrap(self) -> tuple[bool, bool]:
        """Which axes wrap: longitude on a global spherical grid."""
        lon = self.extent[1]
        return (False, self.geometry == "sphere" and lon[1] - lon[0] == 360.0)

    @classmethod
    def tiny(cls, **overrides: Any) -> Self:
        """A small preset (≈15k parameters, 8 × 8 grid) for tests and demos."""
        sizes = {
            "grid_shape": (8, 8), "n_layers": 2, "n_heads": 2, "dim_token": 16, "dim_attn": 16,
            "ffn_hidden": 32, "dim_obs_embed": 2, "embed_hidden": (32,), "head_hidden": (32,),
            "bias_hidden": (8,), "n_fourier": 4,
        }  # fmt: skip
        return cls(**{**sizes, **overrides})

    @classmethod
    def gp2d(cls, **overrides: Any) -> Self:
        """The paper's 2-D GP setting: plane, 32 × 32 grid on ``[-6, 6]²``."""
        base = {"geometry": "plane", "grid_shape": (32, 32), "extent": ((-6.0, 6.0), (-6.0, 6.0))}
        return cls(**{**base, **overrides})

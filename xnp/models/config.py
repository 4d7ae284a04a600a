"""Model configurations: frozen, validated, JSON round-trippable dataclasses."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal, Self

import numpy as np

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
        if not isinstance(data, Mapping):
            raise ConfigError(f"a {cls.__name__} is read from a mapping; got {data!r}.")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(
                f"unknown {cls.__name__} fields {unknown}; known fields are {sorted(names)}."
            )
        return cls(**{k: _tuplify(v) for k, v in data.items()})


#: The default candidate lengthscales of ``BSATNPConfig.gp_fit``: 12 fractions of the
#: context's rms spread, evenly spaced in log from 0.05 to 2 (the pretraining prior's
#: lengthscales are 0.07–1.4 of it).
FIT_FRACTIONS = tuple(round(float(v), 4) for v in np.geomspace(0.05, 2.0, 12))


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # the configs are frozen


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def check_int(obj: Any, name: str, minimum: int = 1, *, optional: bool = False) -> None:
    """Check that ``obj.name`` is an integer ≥ ``minimum`` (not a bool) and store it as ``int``.

    With ``optional``, None is accepted (and kept) as well.
    """
    value = getattr(obj, name)
    if optional and value is None:
        return
    if not _is_int(value) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer ≥ {minimum}"
        raise ConfigError(f"{name} must be {kind}{' or None' if optional else ''}; got {value!r}.")
    _set(obj, name, int(value))


def check_real(obj: Any, name: str, ok: Any, requirement: str, *, finite: bool = True) -> None:
    """Check that ``obj.name`` is a (finite) real number with ``ok(value)``; store a ``float``."""
    value = getattr(obj, name)
    good = _is_real(value) and (not finite or math.isfinite(value)) and ok(float(value))
    if not good:
        raise ConfigError(f"{name} must be {requirement}; got {value!r}.")
    _set(obj, name, float(value))


def check_bool(obj: Any, name: str) -> None:
    """Check that ``obj.name`` is True or False."""
    value = getattr(obj, name)
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(f"{name} must be True or False; got {value!r}.")
    _set(obj, name, bool(value))


def check_choice(obj: Any, name: str, choices: tuple[str, ...]) -> None:
    """Check that ``obj.name`` is one of the strings ``choices``."""
    value = getattr(obj, name)
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"{name} must be one of {options}; got {value!r}.")


def check_sizes(obj: Any, name: str, length: int | None = None, minimum: int = 1) -> None:
    """Check that ``obj.name`` is a sequence of integers ≥ ``minimum``; store it as a tuple."""
    value = getattr(obj, name)
    good = isinstance(value, tuple | list) and all(_is_int(v) and v >= minimum for v in value)
    if not good or (length is not None and len(value) != length):
        kind = "positive integers" if minimum == 1 else f"integers ≥ {minimum}"
        what = f"{length} {kind}" if length is not None else f"a tuple of {kind}"
        raise ConfigError(f"{name} must be {what}; got {value!r}.")
    _set(obj, name, tuple(int(v) for v in value))


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
    prior_key : bool
        A learned prior key in every attention (:class:`xnp.nn.layers.MultiHeadAttention`):
        the share of attention on the observations then falls with their distance,
        so the prediction can revert to a prior far from them.  Gated from zero: a
        model given it (e.g. a fine-tune of a pretrained one) starts unchanged.
    gp_bank : tuple of (kind, fraction, nugget)
        A bank of exact GPs whose predictions every token reads as extra inputs
        (:mod:`xnp.nn.gp_bank`): each member a kernel (``"matern12"``,
        ``"matern32"``, ``"matern52"`` or ``"rbf"``) of the distance between the
        bias features, its lengthscale ``fraction`` × the context's rms spread, and
        its noise variance ``nugget`` (the standardised field's prior variance is
        1).  Targets read each member's posterior mean and log std, context points
        its leave-one-out prediction.  Empty (the default): none.  Needs a spatial
        bias and one output variable.
    gp_fit : tuple of (kind, nugget)
        Fitted GP members (:mod:`xnp.nn.gp_bank_fit`): for each context, the
        member's lengthscale is chosen from ``gp_fit_fractions`` × its rms spread
        by the restricted likelihood, with its mean and amplitude fitted, and every
        token reads its prediction (as a bank member's) and its evidence.  Empty
        (the default): none.  Needs a spatial bias and one output variable.
    gp_fit_fractions : tuple of float
        The candidate lengthscales of the fitted members (fractions of the
        context's rms spread).
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
    prior_key: bool = False
    gp_bank: tuple[tuple[str, float, float], ...] = ()
    gp_fit: tuple[tuple[str, float], ...] = ()
    gp_fit_fractions: tuple[float, ...] = FIT_FRACTIONS
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
            check_int(self, name)
        check_int(self, "dim_x", minimum=0)
        for name in ("embed_s", "embed_t", "temporal_bias", "prior_key"):
            check_bool(self, name)
        if self.dim_attn % self.n_heads:
            raise ConfigError(
                f"dim_attn ({self.dim_attn}) must be divisible by n_heads ({self.n_heads})."
            )
        check_choice(self, "spatial_bias", ("great_circle", "euclidean", "none"))
        if self.spatial_bias == "great_circle" and self.dim_s != 2:
            raise ConfigError(
                f"the great-circle bias needs dim_s=2 (latitude, longitude); got {self.dim_s}."
            )
        check_choice(self, "attention", ("bsa", "dense"))
        check_choice(self, "dtype", ("float32", "bfloat16", "float16"))
        for name in ("spatial_scale", "temporal_scale"):
            check_real(self, name, lambda v: v > 0, "a positive finite number")
        check_real(self, "min_std", lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
        for name in ("embed_hidden", "head_hidden"):
            check_sizes(self, name)
        self._check_gp_bank()

    def _check_gp_bank(self) -> None:
        kinds = ("matern12", "matern32", "matern52", "rbf")  # xnp.nn.gp_bank.KINDS, without jax
        bank = self.gp_bank

        def positive(v: Any) -> bool:
            return _is_real(v) and math.isfinite(v) and v > 0

        good = isinstance(bank, tuple | list) and all(
            isinstance(m, tuple | list)
            and len(m) == 3
            and m[0] in kinds
            and positive(m[1])
            and positive(m[2])
            for m in bank
        )
        if not good:
            raise ConfigError(
                "gp_bank must be a tuple of (kind, fraction, nugget) triples, kind one of "
                f"{kinds}, fraction and nugget positive numbers; got {bank!r}."
            )
        _set(self, "gp_bank", tuple((str(k), float(f), float(g)) for k, f, g in bank))
        fit, fracs = self.gp_fit, self.gp_fit_fractions
        if not (isinstance(fit, tuple | list) and all(
            isinstance(m, tuple | list) and len(m) == 2 and m[0] in kinds and positive(m[1])
            for m in fit
        )):  # fmt: skip
            raise ConfigError(
                "gp_fit must be a tuple of (kind, nugget) pairs, kind one of "
                f"{kinds}, nugget a positive number; got {fit!r}."
            )
        if not (isinstance(fracs, tuple | list) and fracs and all(map(positive, fracs))):
            raise ConfigError(
                f"gp_fit_fractions must be a non-empty tuple of positive numbers; got {fracs!r}."
            )
        _set(self, "gp_fit", tuple((str(k), float(g)) for k, g in fit))
        _set(self, "gp_fit_fractions", tuple(float(f) for f in fracs))
        for name, value in (("gp_bank", bank), ("gp_fit", fit)):
            if value and (self.spatial_bias == "none" or self.dim_y != 1):
                raise ConfigError(
                    f"{name} needs a spatial bias (its distances) and one output variable "
                    f"(dim_y=1); got spatial_bias={self.spatial_bias!r}, dim_y={self.dim_y}."
                )

    @property
    def gp_inputs(self) -> bool:
        """Whether tokens read exact GPs (``gp_bank`` or ``gp_fit`` members).

        Examples
        --------
        >>> BSATNPConfig.tiny().gp_inputs, BSATNPConfig.tiny(gp_fit=(("rbf", 0.01),)).gp_inputs
        (False, True)
        """
        return bool(self.gp_bank or self.gp_fit)

    @classmethod
    def tiny(cls, **overrides: Any) -> Self:
        """A small preset (a few thousand parameters) for tests and demos."""
        sizes = {
            "n_blocks": 2, "n_heads": 2, "dim_token": 16, "dim_attn": 16, "dim_obs_embed": 2,
            "embed_hidden": (32,), "ffn_hidden": 32, "head_hidden": (32,), "n_basis_space": 3,
            "n_basis_time": 2,
        }  # fmt: skip
        return cls(**{**sizes, **overrides})

"""The padded pytrees the models take: :class:`Points` and :class:`Batch`.

A :class:`Points` holds a batch of point sets padded to a common size ``N``,
with a boolean ``mask`` marking the real points.  A :class:`Batch` is context
points, target points and the target values of a training step.  Both are JAX
pytrees, so they pass straight through ``jax.jit``, ``jax.vmap`` and
``jax.lax.scan``.  :func:`padded_size` is the one rule by which every layer
chooses padded sizes (few distinct shapes, so that ``jit`` compiles seldom).

This module sits at the bottom of the package: it imports only :mod:`xnp.errors`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from xnp.errors import ShapeError

__all__ = ["Batch", "Points", "padded_size"]

Array = jax.Array | np.ndarray


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Points:
    """A batch of padded point sets.

    Parameters
    ----------
    s : array, shape ``[B, N, S]``
        Spatial location: latitude and longitude in degrees (``S = 2``) for the
        great-circle geometry, or planar coordinates for the Euclidean one.
    t : array, shape ``[B, N, 1]``
        Time in hours relative to the task's reference time.
    x : array, shape ``[B, N, Dx]``
        Normalised fixed effects (covariates); ``Dx`` may be 0.
    f : array, shape ``[B, N, Dy]``
        Normalised values; zeros for targets.
    mask : bool array, shape ``[B, N]``
        True where a point is real, False for padding.

    Examples
    --------
    >>> import numpy as np
    >>> p = Points.from_arrays(s=np.zeros((1, 3, 2)), f=np.ones((1, 3, 1)))
    >>> p.batch_size, p.size, p.mask.all()
    (1, 3, Array(True, dtype=bool))
    """

    s: Array
    t: Array
    x: Array
    f: Array
    mask: Array

    @classmethod
    def from_arrays(
        cls,
        s: Array,
        *,
        t: Array | None = None,
        x: Array | None = None,
        f: Array | None = None,
        mask: Array | None = None,
        dim_y: int = 1,
        dtype: jnp.dtype = jnp.float32,
    ) -> Points:
        """Build :class:`Points` from arrays, filling the optional fields.

        Missing ``t`` becomes zeros, missing ``x`` an empty ``[B, N, 0]`` array,
        missing ``f`` zeros with ``dim_y`` channels, missing ``mask`` all True.
        Shapes are checked; a mismatch raises :class:`xnp.errors.ShapeError`.
        """
        s = jnp.asarray(s, dtype)
        if s.ndim != 3:
            raise ShapeError(f"`s` must have shape [B, N, S]; got shape {s.shape}.")
        b, n = s.shape[:2]
        t = jnp.zeros((b, n, 1), dtype) if t is None else jnp.asarray(t, dtype)
        x = jnp.zeros((b, n, 0), dtype) if x is None else jnp.asarray(x, dtype)
        f = jnp.zeros((b, n, dim_y), dtype) if f is None else jnp.asarray(f, dtype)
        mask = jnp.ones((b, n), bool) if mask is None else jnp.asarray(mask, bool)
        points = cls(s=s, t=t, x=x, f=f, mask=mask)
        points.validate()
        return points

    @property
    def batch_size(self) -> int:
        """Number of point sets ``B``."""
        return int(self.s.shape[0])

    @property
    def size(self) -> int:
        """Padded number of points ``N``."""
        return int(self.s.shape[1])

    def validate(self) -> None:
        """Raise :class:`xnp.errors.ShapeError` unless all fields agree on ``[B, N]``."""
        lead = self.s.shape[:2]
        for name in ("t", "x", "f"):
            arr = getattr(self, name)
            if arr.ndim != 3 or arr.shape[:2] != lead:
                raise ShapeError(
                    f"Points.{name} must have shape [B, N, D] with [B, N] = {list(lead)} "
                    f"(from `s`); got shape {tuple(arr.shape)}."
                )
        if self.t.shape[-1] != 1:
            raise ShapeError(f"Points.t must have one channel; got shape {tuple(self.t.shape)}.")
        if self.mask.shape != lead:
            raise ShapeError(
                f"Points.mask must have shape {list(lead)}; got {tuple(self.mask.shape)}."
            )

    def validate_for(self, config: Any, role: str) -> None:
        """Check the shapes and the channel counts against a model ``config``.

        ``config`` has ``dim_s``, ``dim_x`` and ``dim_y``; a mismatch raises
        :class:`xnp.errors.ShapeError` naming the field and the config class.
        """
        self.validate()
        for name, want in (("s", config.dim_s), ("x", config.dim_x), ("f", config.dim_y)):
            got = getattr(self, name).shape[-1]
            if got != want:
                raise ShapeError(
                    f"{role} points have {name}.shape[-1] = {got}, but the model was configured "
                    f"with {want} ({type(config).__name__}.dim_{name})."
                )

    def replace(self, **changes: Array) -> Points:
        """Return a copy with some fields replaced."""
        return dataclasses.replace(self, **changes)

    def zero_masked(self) -> Points:
        """Return a copy whose masked (padding) points are all zeros.

        Masked points are excluded by the attention masks, but their values still
        pass through the embeddings; a NaN there (e.g. a missing value kept as
        padding) would reach every output through ``0 · NaN`` in the attention.

        Examples
        --------
        >>> import numpy as np
        >>> p = Points.from_arrays(
        ...     s=np.zeros((1, 2, 2)),
        ...     f=np.array([[[1.0], [np.nan]]]),
        ...     mask=np.array([[True, False]]),
        ... )
        >>> p.zero_masked().f.ravel().tolist()
        [1.0, 0.0]
        """
        keep = self.mask[..., None]
        return self.replace(
            **{k: jnp.where(keep, getattr(self, k), 0) for k in ("s", "t", "x", "f")}
        )

    def slice(self, start: int, stop: int) -> Points:
        """Return the points ``start:stop`` along the point axis."""
        return jax.tree.map(lambda a: a[:, start:stop], self)

    def pad_to(self, n: int) -> Points:
        """Pad the point axis to length ``n`` with masked points (zeros)."""
        extra = n - self.size
        if extra < 0:
            raise ShapeError(f"Cannot pad {self.size} points down to {n}.")
        if extra == 0:
            return self
        return jax.tree.map(
            lambda a: jnp.pad(a, [(0, 0), (0, extra)] + [(0, 0)] * (a.ndim - 2)), self
        )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Batch:
    """A padded batch of tasks, ready for a jitted training step.

    Attributes
    ----------
    context : Points
        Context points ``[B, Nc, ...]`` with their normalised values in ``f``.
    target : Points
        Target points ``[B, Nt, ...]``; ``f`` is zeros.
    y : array, shape ``[B, Nt, Dy]``
        Normalised target values (zeros at padding).
    context_source, target_source : int32 arrays, shapes ``[B, Nc]``, ``[B, Nt]``
        Source id of each point (all zeros with a single source).
    """

    context: Points
    target: Points
    y: Array
    context_source: Array
    target_source: Array

    @property
    def target_mask(self) -> Array:
        """True where a target point is real, shape ``[B, Nt]``."""
        return self.target.mask

    @property
    def num_context(self) -> Array:
        """Number of real context points per task, shape ``[B]``."""
        return self.context.mask.sum(axis=1)

    @property
    def num_targets(self) -> Array:
        """Number of real target points per task, shape ``[B]``."""
        return self.target.mask.sum(axis=1)


def padded_size(
    n: int, *, minimum: int = 16, tile: int | None = None, three_quarters: bool = True
) -> int:
    """The padded size for ``n`` points: few distinct sizes, little waste.

    One rule, with each caller's policy in its arguments: powers of two up to
    ``minimum`` (and never less than ``minimum``); above it, powers of two and,
    with ``three_quarters``, 1.5× powers of two (``3/4`` of the next power of two);
    above ``tile``, whole multiples of ``tile`` (an attention tile or a block of
    rows), so that large sets pad by less than one tile.  ``tile=None``: powers
    of two without end.

    Examples
    --------
    >>> [padded_size(n, minimum=256, tile=1024) for n in (10, 300, 1000, 1025, 100_000)]
    [256, 384, 1024, 2048, 100352]
    >>> [padded_size(n, minimum=16, tile=64, three_quarters=False) for n in (3, 40, 65)]
    [16, 64, 128]
    >>> padded_size(100, tile=None, three_quarters=False), padded_size(33, minimum=16, tile=16)
    (128, 48)
    """
    n = max(int(n), 1)
    power = 1 << (n - 1).bit_length()  # the smallest power of two ≥ n
    if n <= minimum:
        return max(minimum, power)
    if tile is not None and n > max(tile, minimum):
        return -(-n // tile) * tile
    return power * 3 // 4 if three_quarters and n <= power * 3 // 4 else power

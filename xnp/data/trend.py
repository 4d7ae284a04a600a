"""A linear trend of the context, removed before a zero-shot model sees the values.

A zero-shot model is pretrained on stationary fields, each standardised by its
context's mean, so far from the observations it predicts that mean.  Real fields
often have a large-scale gradient (temperature falling northwards or inland) that
this ignores.  :class:`LinearTrend` fits a plane to the context by least squares,
the model interpolates the residuals, and the plane is added back at the targets,
with the variance of its estimate added to the predictive variance (as regression
kriging does), in the share that the observations leave unexplained (see
:meth:`LinearTrend.add_to`).

Station networks are dense in some places and empty in others, and a plain least-
squares plane follows the dense clusters.  The fit therefore weights each point by
the area it stands for (:func:`declustering_weights`: the squared distance to its
``k``-th nearest neighbour, capped), as declustering does in geostatistics; on an
even design the weights are all about one and the fit is ordinary least squares.

On the sphere the plane lives in the tangent plane at the context's centre: the
coordinates are the components of each point's unit vector along two orthonormal
directions perpendicular to the centre.  That is exact for any region and any
longitude convention, and has no singularity at the poles or the date line.  When
the points surround the globe (their mean unit vector is short), the three
components of the unit vector itself are used instead: the degree-one spherical
harmonics.  On planar coordinates the trend is linear in the coordinates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import scipy.spatial

from xnp.errors import EmptyDataError
from xnp.infer import _xyz

__all__ = ["LinearTrend", "declustering_weights"]

#: Below this length of the mean unit vector the points surround the globe, and the
#: trend uses all three unit-vector components (degree-one spherical harmonics).
_GLOBAL = 0.5
#: Neighbours that set a point's declustering weight, and the cap on a weight (as a
#: multiple of the median), so that a few isolated points do not set the plane alone.
_NEIGHBOURS, _CAP = 8, 4.0


def declustering_weights(x: np.ndarray, k: int = _NEIGHBOURS, cap: float = _CAP) -> np.ndarray:
    """Weights ``[N]`` (mean 1) proportional to the area each point of ``x`` ``[N, C]`` stands for.

    The area is the squared distance to the ``k``-th nearest other point (fewer when
    there are fewer points), capped at ``cap`` times its median.

    Examples
    --------
    >>> x = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [0.1, 0.1], [5.0, 5.0]])
    >>> w = declustering_weights(x, k=2)
    >>> bool(w[-1] > 3 * w[0]), round(float(w.mean()), 6)
    (True, 1.0)
    """
    n = len(x)
    if n < 2:
        return np.ones(n)
    dist, _ = scipy.spatial.cKDTree(x).query(x, k=min(k, n - 1) + 1)
    area = dist[:, -1] ** 2
    median = float(np.median(area))
    if not median > 0:  # more than half the points coincide: no spacing to go by
        return np.ones(n)
    area = np.minimum(area, cap * median)
    return area / area.mean()


@dataclasses.dataclass(frozen=True, eq=False)
class LinearTrend:
    """A least-squares plane per variable, fitted to context points.

    Use :meth:`fit`; :meth:`at` evaluates it and the variance of its estimate.

    Attributes
    ----------
    spherical : bool
        Whether the coordinates are (latitude, longitude) in degrees.
    basis : ndarray, shape ``[3, k]``
        Maps unit vectors (sphere) or centred coordinates (plane) to the ``k``
        trend coordinates.
    origin : ndarray
        Subtracted from the points (unit vector of the centre, or the centroid).
    coef : ndarray, shape ``[1 + k, Dy]``
        Intercept and slopes of each variable.
    cov : ndarray, shape ``[Dy, 1 + k, 1 + k]``
        Covariance of each variable's coefficients, ``σ² (AᵀWA)⁻¹ AᵀW²A (AᵀWA)⁻¹``
        for weights ``W`` and the residual variance ``σ²``.

    Examples
    --------
    >>> s = np.array([[50.0, 0.0], [50.0, 2.0], [52.0, 0.0], [52.0, 2.0], [51.0, 1.0]])
    >>> f = (s[:, :1] - 50.0) * 2.0  # 2 units per degree northwards
    >>> trend = LinearTrend.fit(s, f, spherical=True)
    >>> mean, var = trend.at(np.array([[51.0, 1.5]]))
    >>> round(float(mean[0, 0]), 2), bool(np.sqrt(var[0, 0]) < 0.01)
    (2.0, True)

    (Not exactly 2: a plane in degrees of latitude is not quite a plane in the
    tangent plane.)
    """

    spherical: bool
    basis: np.ndarray
    origin: np.ndarray
    coef: np.ndarray
    cov: np.ndarray

    @classmethod
    def fit(
        cls,
        s: np.ndarray,
        f: np.ndarray,
        *,
        spherical: bool,
        names: Sequence[str] | None = None,
    ) -> LinearTrend:
        """Fit each column of ``f`` ``[N, Dy]`` (NaN: not observed) at points ``s`` ``[N, 2]``.

        Weighted least squares with the :func:`declustering_weights` of the points
        (unit vectors on the sphere), so that a dense cluster does not set the
        plane alone.  ``names`` name the columns in error messages.

        Raises
        ------
        EmptyDataError
            When a variable has too few observations, or all of them on one line
            (a plane is then undetermined).
        """
        s = np.asarray(s, np.float64)
        f = np.asarray(f, np.float64).reshape(len(s), -1)
        where = _xyz(s) if spherical else s  # the points the plane and weights are in
        if spherical:
            centre = where.mean(axis=0)
            length = float(np.linalg.norm(centre))
            if length < _GLOBAL:  # around the globe: the unit vector's components
                origin, basis = np.zeros(3), np.eye(3)
            else:
                origin = centre / length
                # two directions perpendicular to the centre: the right singular vectors
                # of [origin] beyond the first span its orthogonal complement
                basis = np.linalg.svd(origin[None, :])[2][1:].T
        else:
            origin = s.mean(axis=0) if len(s) else np.zeros(2)
            basis = np.eye(2)
        design = cls._design(where, basis, origin)
        n_coef = design.shape[1]
        coef = np.zeros((n_coef, f.shape[1]))
        cov = np.zeros((f.shape[1], n_coef, n_coef))
        for j in range(f.shape[1]):
            ok = np.isfinite(f[:, j])
            a, y = design[ok], f[ok, j]
            if (
                ok.sum() <= n_coef
                or np.linalg.matrix_rank(a, tol=1e-9 * max(1.0, np.abs(a).max())) < n_coef
            ):
                name = repr(names[j]) if names is not None else str(j)
                raise EmptyDataError(
                    f"trend='linear' needs at least {n_coef + 1} observations of variable {name} "
                    f"that do not all lie on one line (a plane through them is undetermined); "
                    f"got {int(ok.sum())}. Predict without trend=, or give more observations."
                )
            w = declustering_weights(where[ok])
            normal = np.linalg.inv(a.T @ (w[:, None] * a))
            coef[:, j] = normal @ (a.T @ (w * y))
            resid = y - a @ coef[:, j]
            sigma2 = float(resid @ resid) / (len(y) - n_coef)
            # weighted least squares with independent errors of variance σ²
            cov[j] = sigma2 * normal @ (a.T @ ((w * w)[:, None] * a)) @ normal
        return cls(spherical, basis, origin, coef, cov)

    @staticmethod
    def _design(where: np.ndarray, basis: np.ndarray, origin: np.ndarray) -> np.ndarray:
        """Intercept and trend coordinates of unit vectors (sphere) or coordinates (plane)."""
        return np.concatenate([np.ones((len(where), 1)), (where - origin) @ basis], axis=1)

    def at(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The trend ``[N, Dy]`` at points ``s`` ``[N, 2]`` and the variance of its estimate."""
        s = np.asarray(s, np.float64)
        design = self._design(_xyz(s) if self.spherical else s, self.basis, self.origin)
        mean = design @ self.coef
        var = np.einsum("np,jpq,nq->nj", design, self.cov, design)
        return mean, np.maximum(var, 0.0)

    def add_to(
        self,
        s: np.ndarray,
        mean: np.ndarray,
        std: np.ndarray,
        prior_std: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Predictions of the residuals ``[N, Dy]`` at ``s`` → predictions of the field.

        The trend is added to the mean, and the variance of its estimate to the
        predictive variance.  With ``prior_std`` (``[Dy]``: the spread of the
        residuals, by which the model's input was standardised), that variance is
        scaled by ``min(1, (std / prior_std)²)``, the share of the prior variance
        the observations leave at the target: the whole of it far from them, little
        where they pin the field down.  In universal kriging the trend's error
        enters through the gap between the target's design vector and the
        kriging-weighted design vectors of the observations, which also vanishes
        near the data; for one observation with correlation ``ρ`` that factor is
        ``(1 - ρ)²``, below ``1 - ρ²``, so this one errs on the wide side.  The
        dtypes of ``mean`` and ``std`` are kept.
        """
        trend, var = self.at(s)
        if prior_std is not None:
            var = var * np.minimum(1.0, (np.asarray(std, np.float64) / prior_std) ** 2)
        out_mean = (np.asarray(mean, np.float64) + trend).astype(np.asarray(mean).dtype)
        out_std = np.sqrt(np.asarray(std, np.float64) ** 2 + var).astype(np.asarray(std).dtype)
        return out_mean, out_std

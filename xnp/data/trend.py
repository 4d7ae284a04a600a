"""The context's large-scale mean, estimated before a zero-shot model sees the values.

A zero-shot model is pretrained on stationary fields, each standardised by its
context's plain mean, so far from the observations it predicts that mean.  Two
things go wrong on real data.  Real fields often have a large-scale gradient
(temperature falling northwards or inland) that a constant ignores.  And station
networks are dense in some places and empty in others: the plain mean follows the
dense clusters, while the value the field reverts to far from the stations (over
the sea around an island, say) is better estimated with the clusters down-weighted,
as ordinary kriging does with its generalised-least-squares (GLS) mean.

:class:`Trend` estimates a constant (``degree=0``, the ordinary-kriging mean) or a
plane (``degree=1``, the drift of universal kriging) by generalised least squares,
under a fixed, fitting-free covariance: exponential, with a range of half the
points' rms distance from their centre, and a small nugget.  Its range scales with
the network, so the estimate does not depend on the units or the size of the
region; on an even design its weights are nearly equal away from the edges.  The
model interpolates the residuals, and the trend is added back at the targets with
the variance of its estimate (see :meth:`Trend.add_to`).

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
from typing import Any, Protocol

import numpy as np
import scipy.linalg
import scipy.spatial

from xnp.errors import ConfigError, EmptyDataError
from xnp.geo.sphere import unit_vectors

__all__ = ["Offset", "Rescaled", "Trend", "gls_covariance", "rms_spread", "unscaled"]

#: Below this length of the mean unit vector the points surround the globe, and the
#: trend uses all three unit-vector components (degree-one spherical harmonics).
_GLOBAL = 0.5
#: The GLS covariance: exponential, of range ``_RANGE`` × the points' rms distance
#: from their centre, plus a nugget of ``_NUGGET`` × the variance (chosen on ERA5 UK
#: days 1–16, synthetic fields and the Texas stations; see recipes/pretrain/train_gp_sphere.py).
_RANGE, _NUGGET = 0.5, 0.05
#: At most this many observations set the estimate (a fixed random subset of larger
#: contexts), since the solve costs O(n³): about 0.1 s at 2000 points.
_MAX_POINTS = 2000
#: ``trend=`` → the degree of the :class:`Trend`, and back.
DEGREES = {"constant": 0, "linear": 1}
_NAMES = {degree: name for name, degree in DEGREES.items()}


def rms_spread(x: np.ndarray) -> float:
    """The rms distance of points ``x`` ``[N, C]`` from their centroid.

    Examples
    --------
    >>> rms_spread(np.array([[0.0, 0.0], [2.0, 0.0]]))
    1.0
    """
    x = np.asarray(x, np.float64)
    return float(np.sqrt(np.mean(np.sum((x - x.mean(axis=0)) ** 2, axis=1))))


def gls_covariance(x: np.ndarray, range_factor: float, nugget: float) -> np.ndarray:
    """The fitting-free correlation matrix ``[N, N]`` of points ``x`` ``[N, C]`` for GLS.

    ``exp(-d / r) + nugget · I``, with ``d`` the Euclidean distance (the chord, for
    unit vectors) and ``r`` ``range_factor`` times the rms distance of the points
    from their centroid.

    Examples
    --------
    >>> x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> c = gls_covariance(x, range_factor=0.5, nugget=0.05)
    >>> c.shape, bool(np.allclose(np.diag(c), 1.05)), bool(c[0, 1] > c[1, 2])
    ((3, 3), True, True)
    """
    x = np.asarray(x, np.float64)
    corr = _exp_correlation(x, x, range_factor * rms_spread(x))
    return corr + nugget * np.eye(len(x))


def _exp_correlation(a: np.ndarray, b: np.ndarray, r: float) -> np.ndarray:
    """``exp(-d / r)`` ``[N, M]`` between points ``a`` and ``b``; all ones when ``r`` is 0."""
    d = scipy.spatial.distance.cdist(a, b)
    return np.exp(-d / r) if r > 0 else np.ones_like(d)  # all at one place: one value


class Offset(Protocol):
    """What is added to a model's prediction after it is denormalised.

    A zero-shot context's :class:`Trend`, or a forecast's baseline
    (:class:`xnp.prediction.forecast.BaselineShift`): ``add_to`` maps predictions
    ``[N, Dy]`` at points ``s`` ``[N, 2]`` of what the model saw to predictions of
    the field.
    """

    def add_to(
        self, s: np.ndarray, mean: np.ndarray, std: np.ndarray, prior_std: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Predictions ``(mean, std)`` of what the model saw → predictions of the field."""
        ...


@dataclasses.dataclass(frozen=True, eq=False)
class Rescaled:
    """An offset (or none) whose predictive std is then multiplied by ``factor`` ``[Dy]``.

    Examples
    --------
    >>> r = Rescaled(None, np.array([0.5]))
    >>> r.add_to(np.zeros((1, 2)), np.array([[1.0]]), np.array([[2.0]]))
    (array([[1.]]), array([[1.]]))
    """

    inner: Offset | None
    factor: np.ndarray

    def add_to(
        self, s: np.ndarray, mean: np.ndarray, std: np.ndarray, prior_std: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The inner offset's predictions, with the std rescaled (dtypes kept)."""
        if self.inner is not None:
            mean, std = self.inner.add_to(s, mean, std, prior_std)
        return mean, (np.asarray(std) * self.factor).astype(np.asarray(std).dtype)


def unscaled(offset: Any) -> Any:
    """The offset inside a :class:`Rescaled` one (any other, as it is).

    Examples
    --------
    >>> unscaled(Rescaled(None, np.array([2.0]))) is None
    True
    """
    return offset.inner if isinstance(offset, Rescaled) else offset


@dataclasses.dataclass(frozen=True, eq=False)
class Trend:
    """A constant or a plane per variable, fitted to context points by GLS.

    Use :meth:`fit`; :meth:`at` evaluates it and the variance of its estimate, and
    :meth:`add_to` turns the model's predictions of the residuals into predictions
    of the field.

    Attributes
    ----------
    spherical : bool
        Whether the coordinates are (latitude, longitude) in degrees.
    basis : ndarray, shape ``[3, k]`` (sphere) or ``[2, k]`` (plane)
        Maps unit vectors or centred coordinates to the ``k`` trend coordinates
        (``k = 0`` for a constant).
    origin : ndarray
        Subtracted from the points (unit vector of the centre, or the centroid).
    coef : ndarray, shape ``[1 + k, Dy]``
        Intercept and slopes of each variable.
    cov : ndarray, shape ``[Dy, 1 + k, 1 + k]``
        Covariance of each variable's coefficients, ``σ² (AᵀC⁻¹A)⁻¹`` for the GLS
        correlation matrix ``C`` (:func:`gls_covariance`) and the residuals' sill
        ``σ² = rᵀr / (n - 1 - k)``: ``C`` is a weighting that needs no fitting, not
        a model of the residuals, so the sill is their plain variance.
    shift : ndarray, shape ``[Dy]``
        The GLS mean of the residuals (zero) minus their plain mean, by which the
        model standardises them: where the observations say nothing, the model
        predicts the plain mean, and :meth:`add_to` moves it by ``shift``.
    sill : ndarray, shape ``[Dy]``, optional
        The residuals' variance ``σ²`` of each variable (the factor of ``cov``);
        :meth:`covariance_with` scales by it.

    Examples
    --------
    >>> s = np.array([[50.0, 0.0], [50.0, 2.0], [52.0, 0.0], [52.0, 2.0], [51.0, 1.0]])
    >>> f = (s[:, :1] - 50.0) * 2.0  # 2 units per degree northwards
    >>> trend = Trend.fit(s, f, spherical=True)
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
    shift: np.ndarray
    sill: np.ndarray | None = None

    @classmethod
    def fit(
        cls,
        s: np.ndarray,
        f: np.ndarray,
        *,
        spherical: bool,
        degree: int = 1,
        names: Sequence[str] | None = None,
    ) -> Trend:
        """Fit each column of ``f`` ``[N, Dy]`` (NaN: not observed) at points ``s`` ``[N, 2]``.

        Generalised least squares under :func:`gls_covariance` of the points (unit
        vectors on the sphere), so that a dense cluster does not set the trend alone.
        ``degree`` 0 fits a constant, 1 a plane.  ``names`` name the columns in
        error messages.

        Raises
        ------
        ConfigError
            When ``degree`` is not 0 or 1.
        EmptyDataError
            When a variable has too few observations, or (for a plane) all of them
            on one line, where the plane is undetermined.
        """
        if degree not in _NAMES:
            raise ConfigError(f"degree must be 0 (a constant) or 1 (a plane); got {degree!r}.")
        s = np.asarray(s, np.float64)
        f = np.asarray(f, np.float64).reshape(len(s), -1)
        where = unit_vectors(s) if spherical else s  # the points the trend and covariance are in
        origin, basis = cls._frame(s, where, spherical)
        basis = basis[:, :0] if degree == 0 else basis
        design = cls._design(where, basis, origin)
        n_coef = design.shape[1]
        coef = np.zeros((n_coef, f.shape[1]))
        cov = np.zeros((f.shape[1], n_coef, n_coef))
        shift = np.zeros(f.shape[1])
        sill = np.zeros(f.shape[1])
        for j in range(f.shape[1]):
            ok = np.flatnonzero(np.isfinite(f[:, j]))
            a, y = design[ok], f[ok, j]
            if (
                len(ok) <= n_coef
                or np.linalg.matrix_rank(a, tol=1e-9 * max(1.0, np.abs(a).max())) < n_coef
            ):
                name = repr(names[j]) if names is not None else str(j)
                raise EmptyDataError(
                    f"trend={_NAMES[degree]!r} needs at least {n_coef + 1} observations of "
                    f"variable {name}"
                    + (" that do not all lie on one line (a plane through them is "
                       "undetermined)" if degree else " (one more than the trend's "
                       "coefficients)")
                    + f"; got {len(ok)}. Predict without trend=, or give more observations."
                )  # fmt: skip
            sub = np.arange(len(ok))
            if len(ok) > _MAX_POINTS:  # a fixed subset: the same estimate on every call
                sub = np.sort(np.random.default_rng(0).choice(len(ok), _MAX_POINTS, False))
            factor = scipy.linalg.cho_factor(gls_covariance(where[ok[sub]], _RANGE, _NUGGET))
            ca = scipy.linalg.cho_solve(factor, a[sub])
            normal = np.linalg.inv(a[sub].T @ ca)
            coef[:, j] = normal @ (ca.T @ y[sub])
            resid = y - a @ coef[:, j]
            # the sill: the residuals' own variance, not their GLS estimate (rᵀC⁻¹r),
            # which the fixed covariance inflates wherever the field varies on
            # shorter scales than its range
            sill[j] = float(resid @ resid) / (len(ok) - n_coef)
            cov[j] = sill[j] * normal
            shift[j] = -float(resid.mean())
        return cls(spherical, basis, origin, coef, cov, shift, sill)

    @staticmethod
    def _frame(s: np.ndarray, where: np.ndarray, spherical: bool
               ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The origin and the plane's basis of the points ``where`` (see the module)."""
        if not spherical:
            return (s.mean(axis=0) if len(s) else np.zeros(2)), np.eye(2)
        centre = where.mean(axis=0)
        length = float(np.linalg.norm(centre))
        if length < _GLOBAL:  # around the globe: the unit vector's components
            return np.zeros(3), np.eye(3)
        origin = centre / length
        # two directions perpendicular to the centre: the right singular vectors of
        # [origin] beyond the first span its orthogonal complement
        return origin, np.linalg.svd(origin[None, :])[2][1:].T

    @staticmethod
    def _design(where: np.ndarray, basis: np.ndarray, origin: np.ndarray) -> np.ndarray:
        """Intercept and trend coordinates of unit vectors (sphere) or coordinates (plane)."""
        return np.concatenate([np.ones((len(where), 1)), (where - origin) @ basis], axis=1)

    def design_at(self, s: np.ndarray) -> np.ndarray:
        """Intercept and trend coordinates ``[N, 1 + k]`` of points ``s`` ``[N, 2]``."""
        s = np.asarray(s, np.float64)
        return self._design(unit_vectors(s) if self.spherical else s, self.basis, self.origin)

    def at(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The trend ``[N, Dy]`` at points ``s`` ``[N, 2]`` and the variance of its estimate."""
        design = self.design_at(s)
        mean = design @ self.coef
        var = np.einsum("np,jpq,nq->nj", design, self.cov, design)
        return mean, np.maximum(var, 0.0)

    def covariance_with(self, known: np.ndarray, new: np.ndarray | None = None) -> np.ndarray:
        """The coefficients' covariance were the trend fitted at ``known`` and one more point.

        For each point of ``new`` ``[M, 2]`` in turn, the covariance ``[M, Dy, 1 + k,
        1 + k]`` of the estimate from the points ``known`` ``[N, 2]`` (taken to observe
        every variable) plus that one: ``σ² (AᵀC⁻¹A)⁻¹`` with this fit's frame and sill,
        and the GLS correlation of :func:`gls_covariance` with the range of ``known``
        (one more point hardly moves it).  The bordered inverse makes each new point a
        rank-one update of ``AᵀC⁻¹A``, so ``M`` points cost one factorisation.  With
        ``new`` None: ``[1, Dy, ...]`` for ``known`` alone.  Beyond the fit's limit of
        points, a fixed subset of ``known`` stands for them, as in :meth:`fit`.  (What
        :func:`xnp.placement.place_sensors` scores a trend's candidate sites by.)

        Examples
        --------
        >>> rng = np.random.default_rng(0)
        >>> s = np.c_[rng.uniform(50, 54, 30), rng.uniform(-4, 2, 30)]
        >>> trend = Trend.fit(s, s[:, :1], spherical=True)
        >>> bool(np.allclose(trend.covariance_with(s)[0], trend.cov))
        True
        >>> far = trend.covariance_with(s, np.array([[60.0, 10.0]]))[0, 0]
        >>> bool(np.linalg.det(far) < np.linalg.det(trend.cov[0]))  # one more: less uncertain
        True
        """
        if self.sill is None:
            raise ConfigError("this Trend has no sill (it was not made by Trend.fit).")
        known = np.asarray(known, np.float64)
        if len(known) > _MAX_POINTS:  # the fit's fixed subset rule
            known = known[np.sort(np.random.default_rng(0).choice(len(known), _MAX_POINTS, False))]
        where = unit_vectors(known) if self.spherical else known
        a = self._design(where, self.basis, self.origin)
        factor = scipy.linalg.cho_factor(gls_covariance(where, _RANGE, _NUGGET))
        ca = scipy.linalg.cho_solve(factor, a)  # C⁻¹A
        gram = (a.T @ ca)[None]
        if new is not None:
            new = np.asarray(new, np.float64)
            where_new = unit_vectors(new) if self.spherical else new
            k = _exp_correlation(where, where_new, _RANGE * rms_spread(where))  # [N, M]
            schur = 1.0 + _NUGGET - np.sum(k * scipy.linalg.cho_solve(factor, k), axis=0)
            u = ca.T @ k - self._design(where_new, self.basis, self.origin).T  # [P, M]
            gram = gram + np.einsum("pm,qm->mpq", u, u) / schur[:, None, None]
        return self.sill[None, :, None, None] * np.linalg.inv(gram)[:, None]

    def draw_error(
        self,
        s: np.ndarray,
        std: np.ndarray,
        prior_std: np.ndarray | None,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """One draw ``[N, Dy]`` of the trend estimate's error at ``s``, weighed as in add_to.

        The coefficients' error is drawn once from their covariance, so it is shared
        by all the points (a joint sample of the field); each point takes it in the
        share ``λ`` of :meth:`add_to`, so its variance there is ``λ`` times the
        estimate's, as in the predictive variance.
        """
        design = self.design_at(s)
        out = np.empty((len(s), self.coef.shape[1]))
        for j in range(self.coef.shape[1]):
            delta = rng.multivariate_normal(np.zeros(len(self.coef)), self.cov[j])
            out[:, j] = design @ delta
        share = np.ones_like(out)
        if prior_std is not None:
            share = np.minimum(1.0, (np.asarray(std, np.float64) / prior_std) ** 2)
        return np.sqrt(share) * out

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
        residuals, by which the model's input was standardised), both the
        variance and :attr:`shift` are scaled by ``λ = min(1, (std / prior_std)²)``,
        the share of the prior variance the observations leave at the target: the
        whole of it far from them, where the model predicts the residuals' plain
        mean and the prediction should revert to the GLS estimate, little where
        they pin the field down.  (In ordinary kriging the mean's weight at a
        target is one minus the sum of the simple-kriging weights; for one
        observation with correlation ``ρ`` that is ``1 - ρ`` against ``λ = 1 - ρ²``
        here.  The trend's variance enters universal kriging with ``(1 - ρ)²``, so
        ``λ`` errs on the wide side.)  Without ``prior_std``, ``λ = 1``.  The dtypes
        of ``mean`` and ``std`` are kept.
        """
        trend, var = self.at(s)
        share = 1.0
        if prior_std is not None:
            share = np.minimum(1.0, (np.asarray(std, np.float64) / prior_std) ** 2)
        out_mean = np.asarray(mean, np.float64) + trend + share * self.shift
        out_std = np.sqrt(np.asarray(std, np.float64) ** 2 + share * var)
        return (out_mean.astype(np.asarray(mean).dtype),
                out_std.astype(np.asarray(std).dtype))  # fmt: skip

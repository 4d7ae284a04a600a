"""Task specifications: how the sampler cuts context and targets out of a dataset.

Three kinds, as frozen dataclasses (see :class:`~xnp.data.sampler.TaskSampler`):

* :class:`SpatialTasks`: one time; a random part of the observed points is the
  context, targets are drawn from the rest;
* :class:`ForecastTasks`: ``frames`` context frames ``step`` hours apart, targets
  ``lead`` hours after the last one (the BSA-TNP ERA5 setup is the default: 4
  frames 6 h apart, targets 6 h ahead); times are relative to the last frame;
* :class:`WindowTasks`: either of the above, restricted to a random square window
  (size in degrees or km), so that a model learns local structure.

:func:`task_to_dict` and :func:`task_from_dict` carry a specification to and from
JSON (a saved model records the tasks it was trained on).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from xnp.errors import ConfigError

__all__ = [
    "BASELINES",
    "DEFAULT_MAX_POINTS",
    "ForecastTasks",
    "SpatialTasks",
    "WindowTasks",
    "check_baseline",
    "check_count",
    "in_window",
    "task_from_dict",
    "task_to_dict",
]

#: Caps on the points per task of the default task specifications (``xnp.fit``).
DEFAULT_MAX_POINTS = 1024

_KM_PER_DEGREE = 111.195  # great-circle kilometres per degree of latitude
#: Forecast baselines (:mod:`xnp.data.baseline`, which holds their rules).
BASELINES = (
    "persistence",
    "persistence+diurnal",
    "autoregressive",
    "autoregressive+spatial",
    "autoregressive+gradient",
)


def check_baseline(baseline: Any) -> None:
    """Raise :class:`~xnp.errors.ConfigError` unless ``baseline`` is None or a known name.

    Examples
    --------
    >>> check_baseline("persistence")
    """
    if baseline is not None and baseline not in BASELINES:
        raise ConfigError(f"baseline must be None or one of {list(BASELINES)}; got {baseline!r}.")


def _check_range(name: str, value: float | tuple[float, float], low: float, high: float) -> None:
    pair = value if isinstance(value, tuple) else (value, value)
    real = all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in pair)
    if len(pair) != 2 or not real or not low <= pair[0] <= pair[1] <= high:
        raise ConfigError(
            f"{name} must be a number or an increasing (min, max) pair within [{low}, {high}]; "
            f"got {value!r}."
        )


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        real = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not real or not 0 < value < math.inf:
            raise ConfigError(f"{name} must be a positive number; got {value!r}.")


def check_count(**values: int) -> None:
    """Raise :class:`~xnp.errors.ConfigError` unless every value is a positive integer.

    Examples
    --------
    >>> check_count(steps=10, neighbours=3)
    """
    for name, value in values.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive integer; got {value!r}.")


def check_seed(seed: Any) -> None:
    """Raise :class:`~xnp.errors.ConfigError` unless ``seed`` is a non-negative integer.

    Examples
    --------
    >>> check_seed(0)
    """
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer; got {seed!r}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpatialTasks:
    """Context and targets from the same time.

    Parameters
    ----------
    context_fraction : float or (float, float)
        Fraction of the observed points used as context, fixed or drawn uniformly
        from a range for each task.
    context_count : int or (int, int), optional
        Number of context points instead (fixed or a range); overrides the fraction.
    max_context, max_targets : int
        Caps on the points per task (random subsets beyond them).
    clustered : float
        Share of the tasks (0 to 1) whose context is drawn in clusters, as station
        networks are (dense in some places, empty in others), instead of
        uniformly: 1 to 8 centres, each point weighted by its nearness to them
        (:meth:`context_weights`), so that the model meets wide gaps in training.

    Examples
    --------
    >>> SpatialTasks(context_fraction=0.3).max_targets
    4096
    """

    context_fraction: float | tuple[float, float] = (0.05, 0.5)
    context_count: int | tuple[int, int] | None = None
    max_context: int = 4096
    max_targets: int = 4096
    clustered: float = 0.0

    def __post_init__(self) -> None:
        for name in ("context_fraction", "context_count"):  # a list from JSON or by hand
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        _check_range("context_fraction", self.context_fraction, 0.0, 1.0)
        if self.context_count is not None:
            _check_range("context_count", self.context_count, 1, np.inf)
            for count in _pair(self.context_count):
                check_count(context_count=count)
        check_count(max_context=self.max_context, max_targets=self.max_targets)
        real = isinstance(self.clustered, numbers.Real) and not isinstance(self.clustered, bool)
        if not real or not 0.0 <= self.clustered <= 1.0:
            raise ConfigError(
                "SpatialTasks.clustered must be a share of the tasks in [0, 1]; got "
                f"{self.clustered!r}."
            )

    def context_weights(self, rng: np.random.Generator, xyz: np.ndarray) -> np.ndarray | None:
        """Weights ``[N]`` of the points ``xyz`` (unit vectors) for a clustered context.

        None for a uniform draw (the share ``1 - clustered`` of the tasks).  Else
        ``sum_c exp(-d_c / r)`` over 1 to 8 centres drawn among the points, ``d_c``
        the chord distance to centre ``c`` and ``r`` log-uniform between 3 % and
        30 % of the points' rms distance from their centroid, plus a floor of 1 %
        of the mean weight so that no point is impossible.
        """
        if self.clustered <= 0.0 or rng.random() >= self.clustered:
            return None
        centres = xyz[rng.choice(len(xyz), size=int(rng.integers(1, 9)))]
        spread = float(np.sqrt(np.mean(np.sum((xyz - xyz.mean(0)) ** 2, axis=1))))
        radius = max(spread, 1e-12) * math.exp(rng.uniform(math.log(0.03), math.log(0.3)))
        dist = np.linalg.norm(xyz[:, None, :] - centres[None], axis=-1)
        weights = np.exp(-dist / radius).sum(axis=1)
        return weights + 0.01 * weights.mean()

    def draw_context_size(self, rng: np.random.Generator, n: int) -> int:
        """Draw the number of context points for a task with ``n`` observed points (1 to n-1)."""
        if self.context_count is not None:
            low, high = _pair(self.context_count)
            size = int(rng.integers(low, high + 1))
        else:
            low, high = _pair(self.context_fraction)
            size = round(float(rng.uniform(low, high)) * n)
        return int(np.clip(size, 1, max(n - 1, 1)))


def _pair(value: float | tuple[float, float]) -> tuple[float, float]:
    return value if isinstance(value, tuple) else (value, value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ForecastTasks:
    """Context frames in the past, targets at a lead time.

    Parameters
    ----------
    frames : int
        Number of context frames ``K``.
    step : float
        Hours between context frames.
    lead : float or tuple of float
        Hours from the last context frame to the target time; several (e.g.
        ``(6, 12, 24)``) train one model for all of them: each task draws one,
        and the model sees it as the targets' time.
    context_fraction : float
        Fraction of each context frame's points kept (1 keeps all; more than 0).
    max_context, max_targets : int
        Caps on the points per task (random subsets beyond them).
    baseline : str, optional
        One of :data:`BASELINES`, or None.  What the model predicts the change
        from (:mod:`xnp.data.baseline`): the last observed value nearest each
        target; optionally plus the mean change
        over the lead at the target's place and the initialisation's hour of day,
        learned from the training times and stored with the model; or plus a
        regression of the change on that mean change and on the changes since the
        earlier context frames (``"autoregressive"``, fitted per lead and hour), and
        also on those changes averaged over the neighbourhood
        (``"autoregressive+spatial"``, :mod:`xnp.data.neighbours`), and also on the
        local gradients of the last frame and of its change since the frame before
        (``"autoregressive+gradient"``: with the coefficients per hour, the mean
        advection of the training period).  None: the
        model predicts the field itself.
    baseline_input : bool
        Show the network the baseline: every context and target point gets one
        more input channel per variable, the baseline forecast at its place
        (normalised as the field).  Without it the network sees only the context's
        values and must rebuild from them what the baseline persisted (the nearest
        observation, far from a target when the context is sparse) before it can
        correct it.  Needs a ``baseline``.

    Examples
    --------
    >>> ForecastTasks().offsets.tolist(), ForecastTasks().lead
    ([-18.0, -12.0, -6.0, 0.0], 6.0)
    >>> ForecastTasks(lead=[24, 6, 12], baseline="persistence").leads
    (6.0, 12.0, 24.0)
    """

    frames: int = 4
    step: float = 6.0
    lead: float | tuple[float, ...] = 6.0
    context_fraction: float = 1.0
    max_context: int = 8192
    max_targets: int = 4096
    baseline: str | None = None
    baseline_input: bool = False

    def __post_init__(self) -> None:
        check_count(frames=self.frames)
        leads = self.lead if isinstance(self.lead, list | tuple | np.ndarray) else [self.lead]
        if len(leads) == 0:
            raise ConfigError("ForecastTasks.lead needs at least one lead time (hours).")
        _check_positive(step=self.step)
        for value in leads:
            _check_positive(lead=value)
        values = tuple(sorted({float(v) for v in leads}))
        object.__setattr__(self, "lead", values if len(values) > 1 else values[0])
        check_baseline(self.baseline)
        if not isinstance(self.baseline_input, bool | np.bool_):
            raise ConfigError(
                f"ForecastTasks.baseline_input must be True or False; got {self.baseline_input!r}."
            )
        if self.baseline_input and self.baseline is None:
            raise ConfigError(
                "ForecastTasks(baseline_input=True) shows the network the baseline, but no "
                "baseline is set; give baseline= (e.g. 'autoregressive') or drop baseline_input."
            )
        object.__setattr__(self, "baseline_input", bool(self.baseline_input))
        fraction = self.context_fraction
        real = isinstance(fraction, numbers.Real) and not isinstance(fraction, bool)
        if not real or not 0.0 < fraction <= 1.0:
            raise ConfigError(
                "ForecastTasks.context_fraction must be one number in (0, 1], the fraction "
                f"of each context frame's points kept; got {fraction!r}."
            )
        check_count(max_context=self.max_context, max_targets=self.max_targets)

    @property
    def leads(self) -> tuple[float, ...]:
        """The lead times (hours), increasing."""
        return self.lead if isinstance(self.lead, tuple) else (float(self.lead),)

    @property
    def offsets(self) -> np.ndarray:
        """Hours of the context frames relative to the last one (the reference time)."""
        return self.step * np.arange(1 - self.frames, 1, dtype=np.float64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowTasks:
    """Tasks restricted to a random square window.

    Parameters
    ----------
    size : float
        Side of the window, in ``units``.
    units : {"deg", "km"}
        Degrees of latitude and longitude, or kilometres (converted at the window's
        centre, so windows keep their ground size towards the poles).
    task : SpatialTasks or ForecastTasks
        The task cut from the window.
    min_points : int
        Windows with fewer observed points are redrawn.

    Examples
    --------
    >>> [round(h, 3) for h in WindowTasks(size=500.0, units="km").half_widths(60.0)]
    [2.248, 4.497]
    """

    size: float = 7.5
    units: Literal["deg", "km"] = "deg"
    task: SpatialTasks | ForecastTasks = dataclasses.field(default_factory=SpatialTasks)
    min_points: int = 4

    def __post_init__(self) -> None:
        _check_positive(size=self.size)
        check_count(min_points=self.min_points)
        if not isinstance(self.task, SpatialTasks | ForecastTasks):
            raise ConfigError(f"A window holds SpatialTasks or ForecastTasks; got {self.task!r}.")
        if self.units not in ("deg", "km"):
            raise ConfigError(f"units must be 'deg' or 'km'; got {self.units!r}.")

    def half_widths(self, centre_lat: float) -> tuple[float, float]:
        """Half-widths of the window in degrees of latitude and longitude."""
        half = self.size / 2.0
        if self.units == "deg":
            return half, half
        half_lat = half / _KM_PER_DEGREE
        cos = np.cos(np.deg2rad(centre_lat))
        return half_lat, float(half_lat / cos) if cos > 1e-9 else 360.0


def in_window(
    lat: np.ndarray, lon: np.ndarray, centre: tuple[float, float], half: tuple[float, float]
) -> np.ndarray:
    """Boolean mask of the points inside a latitude/longitude box (dateline-safe).

    Examples
    --------
    >>> in_window(np.array([0.0, 0.0]), np.array([179.0, -170.0]), (0.0, -179.0), (2.0, 2.0))
    array([ True, False])
    """
    dlon = (np.asarray(lon) - centre[1] + 180.0) % 360.0 - 180.0
    return (np.abs(np.asarray(lat) - centre[0]) <= half[0]) & (np.abs(dlon) <= half[1])


_TASKS = {cls.__name__: cls for cls in (SpatialTasks, ForecastTasks, WindowTasks)}


def task_to_dict(task: SpatialTasks | ForecastTasks | WindowTasks) -> dict[str, Any]:
    """A JSON-serialisable description of a task specification.

    Examples
    --------
    >>> task_from_dict(task_to_dict(WindowTasks(task=ForecastTasks(frames=2)))).task.frames
    2
    """
    out: dict[str, Any] = {"kind": type(task).__name__}
    for field in dataclasses.fields(task):
        value = getattr(task, field.name)
        if isinstance(value, SpatialTasks | ForecastTasks):
            value = task_to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[field.name] = value
    return out


def task_from_dict(blob: Mapping[str, Any]) -> SpatialTasks | ForecastTasks | WindowTasks:
    """Inverse of :func:`task_to_dict`."""
    fields = dict(blob)
    cls = _TASKS.get(fields.pop("kind", None))
    if cls is None:
        raise ConfigError(f"Unknown task kind {blob.get('kind')!r}; known: {sorted(_TASKS)}.")
    for key, value in fields.items():
        if isinstance(value, Mapping):
            fields[key] = task_from_dict(value)
        elif isinstance(value, list):
            fields[key] = tuple(value)
    return cls(**fields)

"""What a training run carries from step to step: :class:`TrainState` and its history columns.

Kept apart from the loop so that the saved-model and checkpoint code, and the
training history's xarray form (:mod:`xnp.history`), can read a state without
importing the loop.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import optax
from flax import nnx

__all__ = ["HISTORY_FIELDS", "TrainState", "history_lists"]

#: Columns of the training history, in order (see :class:`TrainState`).
HISTORY_FIELDS = (
    "step",
    "train_nll",
    "val_nll",
    "val_rmse",
    "val_coverage",
    "learning_rate",
    "steps_per_second",
    "train_crps",
    "val_crps",
)


@dataclasses.dataclass
class TrainState:
    """Everything needed to continue training exactly where it stopped.

    Attributes
    ----------
    step : int
        Number of steps done.
    params, opt_state
        Current parameters and optimiser state.
    best_params : nnx.State or None
        Parameters with the lowest validation score so far (None without
        validation): the NLL, or the CRPS when that is the training objective
        (``TrainConfig.loss``).
    best_step : int
        Step of ``best_params`` (0: none yet).
    best_score : float
        Their validation score (``inf`` before the first validation).
    ema_params : nnx.State or None
        The moving average of the parameters (``TrainConfig.ema`` > 0), else None.
    history : dict of list
        One list per name of :data:`HISTORY_FIELDS`; ``val_rmse`` entries are
        per-channel lists, NaN where a row had no validation.  The training loss
        goes to ``train_nll`` or ``train_crps`` (the objective's column; the other
        is NaN); validation fills both ``val_nll`` and ``val_crps``.
    """

    step: int
    params: nnx.State
    opt_state: optax.OptState
    best_params: nnx.State | None = None
    best_step: int = 0
    best_score: float = math.inf
    history: dict[str, list[Any]] = dataclasses.field(
        default_factory=lambda: {k: [] for k in HISTORY_FIELDS}
    )
    #: The moving average of the parameters (``TrainConfig.ema`` > 0), else None.
    ema_params: nnx.State | None = None
    #: Whether the run was stopped early by an interrupt (Ctrl-C) at ``step``.
    interrupted: bool = False
    #: Training losses of the steps since the last history row (an interrupt can
    #: stop between rows; resuming averages them into the next row, as without it).
    pending_losses: tuple[float, ...] = ()
    #: Seconds spent in the training loop so far (what a time budget counts).
    seconds: float = 0.0
    #: Whether the run stopped at its time budget, before its last step.
    out_of_time: bool = False

    @property
    def averaged(self) -> nnx.State:
        """The parameters a model of this state uses: their moving average, if kept."""
        return self.params if self.ema_params is None else self.ema_params


def history_lists(history: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """JSON history (``None`` for NaN) back to the lists :class:`TrainState` keeps.

    A column the history lacks (written before it existed) is NaN at every step.

    Examples
    --------
    >>> history_lists({"step": [50], "val_nll": [None]})["val_nll"]
    [nan]
    >>> history_lists({"step": [50, 100]})["val_crps"]
    [nan, nan]
    """

    def nan(v: Any) -> Any:
        if isinstance(v, list):
            return [nan(x) for x in v]
        return math.nan if v is None else v

    missing = [None] * len(history.get("step", []))
    return {k: [nan(v) for v in history.get(k, missing)] for k in HISTORY_FIELDS}

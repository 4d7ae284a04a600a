"""``fit(..., members=k)``: an ensemble of ``k`` fits of one model (:class:`xnp.Ensemble`).

Member ``i`` is an ordinary fit with seed ``seed + i`` (its initialisation and its
task stream), a ``k``-th of the ``time_budget`` (the budget is the ensemble's), and
its checkpoints in ``checkpoint_dir/member-i``.  With ``resume=True`` each member
continues from its checkpoints as a single fit does (a finished one returns its
result at once; one not begun starts afresh), so an interrupted ensemble loses at
most the steps since its last checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from xnp.data.tasks import check_count, check_seed
from xnp.ensemble import Ensemble, member_name
from xnp.neural_process import NeuralProcess
from xnp.units import parse_seconds

__all__ = ["fit_members"]

log = logging.getLogger("xnp.api")


def fit_members(
    fit_one: Callable[..., NeuralProcess], members: Any, arguments: Mapping[str, Any]
) -> Ensemble:
    """Fit ``members`` models with ``fit_one(**arguments)``, each with its own seed.

    ``arguments`` are :func:`xnp.fit`'s (keyword) arguments; ``seed``,
    ``time_budget``, ``checkpoint_dir`` and ``resume`` are set per member as the
    module's text says.

    Raises
    ------
    ConfigError
        If ``members`` is not a positive integer.
    """
    check_count(members=members)
    members = int(members)
    seed = arguments.get("seed", 0)
    check_seed(seed)
    budget = arguments.get("time_budget")
    share = None if budget is None else parse_seconds(budget) / members
    root = arguments.get("checkpoint_dir")
    folders = [None if root is None else Path(root).expanduser() / member_name(i)
               for i in range(members)]  # fmt: skip
    fits = []
    for i, folder in enumerate(folders):
        log.info("fitting member %d of %d (seed %s)", i + 1, members, seed + i)
        fits.append(fit_one(**{**arguments, "seed": seed + i, "time_budget": share,
                               "checkpoint_dir": folder}))  # fmt: skip
    return Ensemble(fits)

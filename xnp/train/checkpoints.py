"""Training checkpoints: a folder of whole training states, and resuming from one.

A checkpoint folder (:class:`CheckpointDir`) holds ``step-XXXXXXXX`` directories
and a ``LATEST`` pointer file replaced atomically after each one is complete;
older steps are pruned afterwards.  Each checkpoint is a loadable model
directory (written by the caller) plus the rest of the :class:`TrainState`:
the optimiser state, the best validated parameters, the parameters' moving
average and the losses since the last history row (:func:`write_state`,
:func:`read_state`).  Nothing is pickled.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
from flax import nnx

from xnp.errors import CheckpointError
from xnp.files import (
    arrays_to_tree,
    atomic_directory,
    expand,
    fsync_dir,
    os_errors_as,
    read_arrays,
    read_json,
    tree_to_arrays,
    write_arrays,
    write_bytes,
)
from xnp.train.state import TrainState, history_lists

__all__ = ["CheckpointDir", "read_state", "write_state"]

_STEP = re.compile(r"^step-(\d{8})$")
#: Parameter trees a checkpoint may hold beside the model's own weights: the
#: :class:`TrainState` field (also the file's name) and the record's checksum key.
_PARAM_TREES = {"best_params": "best_sha256", "ema_params": "ema_sha256"}


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


class CheckpointDir:
    """A folder of training checkpoints, ``step-XXXXXXXX`` plus a ``LATEST`` pointer.

    Parameters
    ----------
    path : path-like
        The folder (created on first write; a leading ``~`` is expanded).
    keep : int
        How many of the most recent checkpoints to keep.

    Examples
    --------
    >>> import tempfile
    >>> ckpt = CheckpointDir(tempfile.mkdtemp(), keep=1)
    >>> for step in (10, 20):
    ...     with ckpt.write(step) as tmp:
    ...         _ = (tmp / "config.json").write_text("{}")
    >>> ckpt.latest().name, [p.name for p in ckpt.steps()]
    ('step-00000020', ['step-00000020'])
    """

    def __init__(self, path: str | os.PathLike, keep: int = 2, *, writable: bool = True):
        self.path = expand(path)
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise CheckpointError(f"keep must be a positive integer; got {keep!r}.")
        self.keep = keep
        self._written: list[str] = []
        if writable:
            self._check_writable()

    def _check_writable(self) -> None:
        """Refuse, before any training, a folder that checkpoints cannot be written to."""
        where = self.path
        if where.exists() and not where.is_dir():
            raise CheckpointError(
                f"The checkpoint folder {where} exists and is not a directory; choose another "
                "checkpoint_dir."
            )
        if (where / "config.json").is_file():
            raise CheckpointError(
                f"{where} holds a saved model (config.json), not training checkpoints; choose "
                "another checkpoint_dir (a new or empty folder, or that of the run to resume)."
            )
        base = _nearest_existing(where)
        if not base.is_dir():
            raise CheckpointError(
                f"Cannot create the checkpoint folder {where}: {base} is a file, not a "
                "directory. Choose another checkpoint_dir."
            )
        if not os.access(base, os.W_OK | os.X_OK):
            raise CheckpointError(
                f"Cannot write checkpoints to {where}: {base} is not writable. Choose another "
                "checkpoint_dir."
            )

    def steps(self) -> list[Path]:
        """Complete checkpoint directories, oldest first."""
        if not self.path.is_dir():
            return []
        found = [p for p in self.path.iterdir() if _STEP.match(p.name) and p.is_dir()]
        return sorted((p for p in found if (p / "config.json").is_file()), key=lambda p: p.name)

    def latest(self) -> Path | None:
        """The most recent complete checkpoint (from ``LATEST``, else the highest step)."""
        pointer = self.path / "LATEST"
        with contextlib.suppress(OSError, ValueError):
            candidate = self.path / pointer.read_text().strip()
            inside = candidate == self.path / candidate.name  # no path out of the folder
            if inside and _STEP.match(candidate.name) and (candidate / "config.json").is_file():
                return candidate
        steps = self.steps()
        return steps[-1] if steps else None

    @contextlib.contextmanager
    def write(self, step: int) -> Iterator[Path]:
        """Write checkpoint ``step`` atomically, point ``LATEST`` at it, prune old ones.

        Only the last ``keep`` checkpoints written through this object survive, so
        steps left over from an earlier run in the same folder are removed too.
        """
        with os_errors_as(self.path):
            self.path.mkdir(parents=True, exist_ok=True)
        name = f"step-{step:08d}"
        with atomic_directory(self.path / name) as tmp:
            yield tmp
        pointer = self.path / ".LATEST.tmp"
        with os_errors_as(self.path / "LATEST"):
            write_bytes(pointer, name.encode())
            os.replace(pointer, self.path / "LATEST")
            fsync_dir(self.path)
        self._written = [n for n in self._written if n != name] + [name]
        survivors = set(self._written[-self.keep :])
        for old in self.path.iterdir():
            stale_tmp = old.name.startswith(".step-") and ".tmp-" in old.name
            # a step folder without config.json was never a checkpoint (they are written
            # whole): someone else's, left alone
            ours = _STEP.match(old.name) and (old / "config.json").is_file()
            if stale_tmp or (ours and old.name not in survivors):
                shutil.rmtree(old, ignore_errors=True)


def write_state(directory: Path, state: TrainState, run: dict[str, Any]) -> dict[str, Any]:
    """Write what a checkpoint holds beyond the model; return its ``checkpoint`` record.

    The optimiser state, the best parameters and the parameters' moving average
    (with ``TrainConfig.ema``) go to safetensors files in ``directory``; the
    record (steps, best validation score, pending losses, checksums and the ``run``
    description that :func:`read_state` compares) belongs in the checkpoint's
    ``config.json`` under ``"checkpoint"``.
    """
    record: dict[str, Any] = {
        "step": state.step, "best_step": state.best_step, "run": run,
        "best_score": None if math.isinf(state.best_score) else state.best_score,
        "pending_losses": list(state.pending_losses),
        "seconds": round(float(state.seconds), 3),
        "opt_state_sha256": write_arrays(
            directory / "opt_state.safetensors", tree_to_arrays(state.opt_state, by_path=False)
        ),
    }  # fmt: skip
    for field, key in _PARAM_TREES.items():
        tree = getattr(state, field)
        if tree is not None:
            record[key] = write_arrays(directory / f"{field}.safetensors", tree_to_arrays(tree))
    return record


def read_state(
    directory: Path, graph_params: nnx.State, tx_init: Callable, run: dict[str, Any]
) -> TrainState:
    """The :class:`TrainState` of the checkpoint ``directory`` of the fit described by ``run``.

    ``graph_params`` is the parameters' template (shapes), ``tx_init`` makes an
    optimiser state to take the stored one's structure.  A checkpoint of another
    fit (a different ``run``), or an incomplete one, raises
    :class:`~xnp.errors.CheckpointError`.
    """
    try:
        return _read_state(directory, graph_params, tx_init, run)
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"The checkpoint {directory} is incomplete: {err!r}.") from err


def _read_state(
    directory: Path, graph_params: nnx.State, tx_init: Callable, run: dict[str, Any]
) -> TrainState:
    meta = read_json(directory / "config.json")
    stored = meta.get("checkpoint", {})
    if stored.get("run") != run:
        diff = sorted(k for k in set(run) | set(stored.get("run", {}))
                      if run.get(k) != stored.get("run", {}).get(k))  # fmt: skip
        raise CheckpointError(
            f"The checkpoint in {directory.parent} was written by a different fit (differs in "
            f"{diff}). Use another checkpoint_dir, or resume=False to start over."
        )
    weights = meta["weights"]
    params = arrays_to_tree(
        graph_params, read_arrays(directory / weights["file"], weights["sha256"])
    )
    opt_state = arrays_to_tree(
        tx_init(params),
        read_arrays(directory / "opt_state.safetensors", stored["opt_state_sha256"]),
        by_path=False,
    )
    history = history_lists(read_json(directory / "history.json"))
    # checkpoints written before the CRPS objective existed call it "best_nll"
    best = stored.get("best_score", stored.get("best_nll"))
    best_score = math.inf if best is None else float(best)
    to_jax = lambda tree: jax.tree.map(jax.numpy.asarray, tree)  # noqa: E731
    trees = {  # the best parameters and the moving average, where the checkpoint has them
        field: to_jax(arrays_to_tree(
            graph_params, read_arrays(directory / f"{field}.safetensors", stored[key])))
        for field, key in _PARAM_TREES.items() if stored.get(key)
    }  # fmt: skip
    return TrainState(
        step=int(stored["step"]),
        params=to_jax(params),
        opt_state=to_jax(opt_state),
        best_params=trees.get("best_params"),
        best_step=int(stored.get("best_step", 0)),
        best_score=best_score,
        history=history,
        ema_params=trees.get("ema_params"),
        pending_losses=tuple(float(x) for x in stored.get("pending_losses", [])),
        seconds=float(stored.get("seconds", 0.0)),
    )

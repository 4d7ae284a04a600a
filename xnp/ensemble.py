"""Several fits of one model that predict together: :class:`Ensemble`, and :func:`load`.

A neural process fitted on a few days of data depends on its seed: two fits with
the same settings can differ by more than two settings do (the ERA5 forecast
benchmark measured 10 % in CRPS between seeds).  An ensemble averages that away:
``fit(..., members=k)`` fits ``k`` models with seeds ``seed, seed + 1, ...``
(sharing a ``time_budget`` equally), and every prediction is the equal mixture
of theirs (:mod:`xnp.prediction.mixture`: the mixture's mean, and a std that adds
the spread between the members to the spread within them).

An ensemble is saved as a directory holding ``ensemble.json`` and one model
directory per member (``member-0``, ``member-1``, ...), each an ordinary saved
model; :func:`load` (``xnp.load``) reads either kind.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import xarray as xr

from xnp.data.tasks import check_count, check_seed, task_to_dict
from xnp.errors import CheckpointError, ConfigError
from xnp.files import atomic_directory, read_json, write_json
from xnp.neural_process import NeuralProcess
from xnp.neural_process import load as load_model
from xnp.prediction import predict_with
from xnp.prediction.mixture import mixture_moments, sample_shares
from xnp.saved_model import ENSEMBLE_FILE, ENSEMBLE_FORMAT, is_saved_model

__all__ = ["Ensemble", "is_saved_ensemble", "load", "member_name"]


def member_name(i: int) -> str:
    """The directory of member ``i`` in a saved ensemble and in ``fit``'s checkpoints."""
    return f"member-{i}"


def _signature(model: NeuralProcess) -> dict[str, Any]:
    """What the members of one ensemble must share: what they predict and from what."""
    return {
        "variables": model.variables,
        "covariates": model.covariates,
        "sources": model.sources,
        "normalise": model.normalise,
        "task": None if model.task is None else task_to_dict(model.task),
        "baseline": None if model.baseline is None else model.baseline.kind,
    }


class Ensemble:
    """Fits of one model with different seeds, predicting as one (a deep ensemble).

    Made by ``xnp.fit(..., members=k)`` or from fitted models; predicts with
    :func:`xnp.predict` (``ds.np.predict``, ``xnp predict``) as a single model does,
    eagerly or lazily, with the members' predictions mixed in equal shares.

    Parameters
    ----------
    members : sequence of NeuralProcess
        Two or more models of the same variables, covariates, context sources,
        normalisation, tasks and forecast baseline (e.g. fits with other seeds).

    Examples
    --------
    >>> import xnp
    >>> from xnp.models.config import BSATNPConfig
    >>> from xnp.data.normalise import Normaliser, Stats
    >>> norm = Normaliser({"t2m": Stats(280.0, 5.0, "K")})
    >>> members = [
    ...     xnp.NeuralProcess.init(BSATNPConfig.tiny(), norm, ["t2m"], seed=s) for s in (0, 1)
    ... ]
    >>> ensemble = Ensemble(members)
    >>> len(ensemble), ensemble.variables
    (2, ('t2m',))
    """

    def __init__(self, members: Sequence[NeuralProcess]) -> None:
        members = tuple(members)
        if len(members) < 2:
            raise ConfigError(
                f"an ensemble needs at least two members; got {len(members)}. Use the "
                "model itself."
            )
        for m in members:
            if not isinstance(m, NeuralProcess):
                raise ConfigError(
                    f"an ensemble's members are NeuralProcess models (from xnp.fit or "
                    f"xnp.load); got {type(m).__name__}."
                )
        first = _signature(members[0])
        for i, m in enumerate(members[1:], start=1):
            other = _signature(m)
            differ = [k for k in first if first[k] != other[k]]
            if differ:
                raise ConfigError(
                    f"member {i} differs from member 0 in {', '.join(differ)}: an ensemble's "
                    "members must predict the same variables from the same inputs (fit them "
                    "with the same arguments and other seeds)."
                )
        self.members = members

    # -- what the members share -----------------------------------------------------------
    def __len__(self) -> int:
        return len(self.members)

    @property
    def variables(self) -> tuple[str, ...]:
        """The predicted variables."""
        return self.members[0].variables

    @property
    def covariates(self) -> tuple[str, ...]:
        """The covariates the members read."""
        return self.members[0].covariates

    @property
    def sources(self) -> tuple[str, ...]:
        """The context sources of multi-source members (empty for one)."""
        return self.members[0].sources

    @property
    def coords(self) -> dict[str, Any]:
        """Coordinate names found in the training data."""
        return self.members[0].coords

    @property
    def task(self) -> Any:
        """The task specification the members were trained on."""
        return self.members[0].task

    @property
    def normalise(self) -> str:
        """``"fitted"`` or ``"context"``, as for a :class:`~xnp.NeuralProcess`."""
        return self.members[0].normalise

    @property
    def baseline(self) -> Any:
        """The first member's forecast baseline (each member predicts from its own)."""
        return self.members[0].baseline

    @property
    def num_params(self) -> int:
        """Number of scalar parameters of all members together."""
        return sum(m.num_params for m in self.members)

    @property
    def training(self) -> dict[str, Any]:
        """How the members were trained: their count, seeds, steps and total seconds."""
        runs = [m.training for m in self.members]
        return {
            "members": len(runs),
            "seeds": [r.get("seed") for r in runs],
            "steps": [r.get("step", r.get("steps")) for r in runs],
            "best_steps": [r.get("best_step") for r in runs],
            "seconds": sum(float(r.get("seconds", 0.0)) for r in runs),
            "time_budget_s": sum(float(r.get("time_budget_s") or 0.0) for r in runs) or None,
        }

    # -- prediction -------------------------------------------------------------------------
    def predict(self, context: Any, targets: Any = None, **kwargs: Any) -> xr.Dataset:
        """Predict with every member and mix their predictions; see :func:`xnp.predict`.

        Takes :func:`xnp.predict`'s arguments.  Each member predicts as a single
        model would (with its own ``calibrate=``, trend, baseline); member ``i``
        uses ``seed + i`` (its ``max_context`` subset and its samples' draws).  With
        ``samples=K`` the members draw ``K`` samples between them in equal shares.
        Costs as many predictions as there are members.
        """
        seed = kwargs.pop("seed", 0)
        check_seed(seed)
        samples = kwargs.pop("samples", None)
        if samples is not None:
            check_count(samples=samples)
        shares = [None] * len(self) if samples is None else sample_shares(samples, len(self))
        preds = [
            predict_with(m, context, targets, seed=seed + i, samples=share or None, **kwargs)
            for i, (m, share) in enumerate(zip(self.members, shares, strict=True))
        ]
        return mixture_moments(preds, self.variables, seed=seed)

    # -- saving -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Save to a directory, atomically: ``ensemble.json`` and a model directory per member.

        An existing xnp ensemble or model directory at ``path`` is replaced; any
        other existing, non-empty directory raises :class:`~xnp.errors.CheckpointError`.
        """
        names = [member_name(i) for i in range(len(self))]
        recognise = lambda p: is_saved_ensemble(p) or is_saved_model(p)  # noqa: E731
        with atomic_directory(path, marker=(ENSEMBLE_FILE, "config.json"),
                              recognise=recognise) as tmp:  # fmt: skip
            for name, member in zip(names, self.members, strict=True):
                (tmp / name).mkdir()
                member.write_files(tmp / name)
            write_json(tmp / ENSEMBLE_FILE, {"format": ENSEMBLE_FORMAT, "members": names})
        return Path(path).expanduser()

    def __repr__(self) -> str:
        run = self.training
        first = repr(self.members[0]).splitlines()
        lines = [
            f"<xnp.Ensemble of {len(self)} models: {self.num_params:,} parameters>",
            *first[1:4],
            f"  members:     seeds {run['seeds']}, steps {run['steps']}",
        ]
        return "\n".join(lines)


def is_saved_ensemble(directory: Path) -> bool:
    """Whether ``directory`` holds an ensemble saved by xnp (its ensemble.json says so)."""
    try:
        return read_json(Path(directory) / ENSEMBLE_FILE).get("format") == ENSEMBLE_FORMAT
    except (CheckpointError, OSError, ValueError, AttributeError):
        return False


def load(path: str | os.PathLike) -> NeuralProcess | Ensemble:
    """Load a saved model or ensemble: a :class:`~xnp.NeuralProcess` or an :class:`Ensemble`.

    ``path`` is a directory written by :meth:`xnp.NeuralProcess.save` or
    :meth:`Ensemble.save`, one checkpoint of a training run, or a ``checkpoint_dir``
    of ``fit`` (its latest checkpoint is loaded).  Nothing in the directory is
    executed: it holds JSON and safetensors only.

    Raises
    ------
    CheckpointError
        If the directory is missing, incomplete, corrupted, from an incompatible
        format, or its arrays do not fit the stored configuration.

    Examples
    --------
    >>> import tempfile
    >>> import xnp
    >>> from xnp.models.config import BSATNPConfig
    >>> from xnp.data.normalise import Normaliser, Stats
    >>> norm = Normaliser({"v": Stats(0.0, 1.0)})
    >>> pair = Ensemble(
    ...     [xnp.NeuralProcess.init(BSATNPConfig.tiny(), norm, ["v"], seed=s) for s in (0, 1)]
    ... )
    >>> folder = pair.save(tempfile.mkdtemp() + "/pair")
    >>> sorted(p.name for p in folder.iterdir())
    ['ensemble.json', 'member-0', 'member-1']
    >>> type(load(folder)).__name__, type(load(folder / "member-1")).__name__
    ('Ensemble', 'NeuralProcess')
    """
    directory = Path(path).expanduser()
    file = directory / ENSEMBLE_FILE
    if not file.exists():
        return load_model(directory)
    meta = read_json(file)
    if meta.get("format") != ENSEMBLE_FORMAT:
        raise CheckpointError(
            f"{file} has format {meta.get('format')!r}; this xnp reads {ENSEMBLE_FORMAT!r}."
        )
    names = meta.get("members")
    if not isinstance(names, list) or not all(
        isinstance(n, str) and Path(n).name == n for n in names
    ):
        raise CheckpointError(f"{file}: 'members' must be a list of member directory names.")
    try:
        return Ensemble([load_model(directory / n) for n in names])
    except ConfigError as err:
        raise CheckpointError(f"{directory} is not a consistent ensemble: {err}") from err

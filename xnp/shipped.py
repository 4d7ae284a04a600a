"""Pretrained models shipped inside the package.

Each is an ordinary model directory (``config.json`` + ``params.safetensors``,
no pickle) under ``xnp/pretrained_models/<name>/``, written by the recipe named in its
``training`` record.  They normalise each context set by its own statistics
(``normalise="context"``), so they predict any single variable zero-shot::

    model = xnp.pretrained("gp-sphere")
    pred = stations.np.predict(model, targets=grid)  # any units, anywhere

``gp-sphere`` is a BSA-TNP with the great-circle attention bias pretrained on
regional Gaussian-process fields on the sphere (``recipes/pretrain/``).
"""

from __future__ import annotations

import logging
import os
from importlib import resources
from pathlib import Path

from xnp.ensemble import Ensemble
from xnp.ensemble import load as load_any
from xnp.errors import ConfigError
from xnp.models.registry import name_key
from xnp.neural_process import NeuralProcess, load

__all__ = ["available_pretrained", "pretrained", "resolve_model"]

DEFAULT = "gp-sphere-cluster-bank"

log = logging.getLogger(__name__)


def _root() -> Path:
    return Path(str(resources.files("xnp") / "pretrained_models"))


def available_pretrained() -> tuple[str, ...]:
    """Names of the pretrained models shipped with this installation.

    Examples
    --------
    >>> "gp-sphere" in available_pretrained()
    True
    """
    root = _root()
    if not root.is_dir():
        return ()
    return tuple(sorted(p.name for p in root.iterdir() if (p / "config.json").is_file()))


def pretrained(name: str = DEFAULT) -> NeuralProcess:
    """Load a shipped pretrained model by name (see :func:`available_pretrained`).

    Examples
    --------
    >>> model = pretrained("gp-sphere")
    >>> model.normalise
    'context'
    >>> pretrained("GP-Sphere").config == model.config  # case does not matter
    True
    """
    names = available_pretrained()
    found = _lookup(name, names)
    if found is None:
        raise ConfigError(
            f"no pretrained model {name!r}; this installation ships {list(names) or 'none'}."
        )
    return load(_root() / found)


def _lookup(name: object, names: tuple[str, ...]) -> str | None:
    """The shipped model ``name`` means (case, spaces and ``_``/``-`` do not matter)."""
    if not isinstance(name, str):
        return None
    key = name_key(name)
    return next((n for n in names if name_key(n) == key), None)


def resolve_model(spec: str | os.PathLike) -> NeuralProcess | Ensemble:
    """The model ``spec`` names: a saved model directory or a pretrained model's name.

    A directory written by :meth:`~xnp.NeuralProcess.save` or
    :meth:`~xnp.Ensemble.save` (or a checkpoint folder) is loaded; otherwise
    ``spec`` is looked up among the shipped pretrained models.  A path that exists
    wins over a pretrained model of the same name; a leading ``~`` is expanded.

    Raises
    ------
    ConfigError
        If ``spec`` is neither an existing path nor a pretrained model's name.

    Examples
    --------
    >>> resolve_model("gp-sphere").normalise
    'context'
    """
    path = Path(spec).expanduser()
    if path.exists():
        return load_any(path)
    names = available_pretrained()
    found = _lookup(str(spec), names)
    if found is not None:
        log.info("using the pretrained %r model", found)
        return pretrained(found)
    raise ConfigError(
        f"{spec} is neither a saved model directory nor a pretrained model "
        f"(this installation ships {', '.join(names) or 'none'})."
    )

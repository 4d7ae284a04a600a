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

from importlib import resources
from pathlib import Path

from xnp.errors import ConfigError
from xnp.estimator import NeuralProcess, load

__all__ = ["available_pretrained", "pretrained"]

DEFAULT = "gp-sphere"


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
    """
    names = available_pretrained()
    if name not in names:
        raise ConfigError(
            f"no pretrained model {name!r}; this installation ships {list(names) or 'none'}."
        )
    return load(_root() / name)

"""xnp: transformer neural processes for xarray.

Importing xnp registers the ``np`` accessor on ``xr.Dataset`` and ``xr.DataArray``.
"""

from xnp import baselines, datasets, plot, validation
from xnp._version import __version__
from xnp.accessor import NPDataArrayAccessor, NPDatasetAccessor
from xnp.api import fit
from xnp.arrays import Points
from xnp.errors import CheckpointError, XnpError, XnpWarning
from xnp.estimator import NeuralProcess, load
from xnp.evaluate import evaluate
from xnp.models.registry import available_models
from xnp.prediction import predict
from xnp.pretrained import available_pretrained, pretrained
from xnp.train import TrainConfig

__all__ = [
    "CheckpointError",
    "NPDataArrayAccessor",
    "NPDatasetAccessor",
    "NeuralProcess",
    "Points",
    "TrainConfig",
    "XnpError",
    "XnpWarning",
    "__version__",
    "available_models",
    "available_pretrained",
    "baselines",
    "datasets",
    "evaluate",
    "fit",
    "load",
    "plot",
    "predict",
    "pretrained",
    "validation",
]

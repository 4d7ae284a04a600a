"""xnp: transformer neural processes for xarray.

Importing xnp registers the ``np`` accessor on ``xr.Dataset`` and ``xr.DataArray``
(as soon as xarray is imported, before or after xnp).  The public names below are
imported on first use, so ``import xnp.geo`` loads neither xarray nor flax.

Examples
--------
>>> import xnp
>>> xnp.available_models()
('bsa-tnp', 'bsa-tnp-tiny', 'swin-tnp', 'swin-tnp-tiny')
"""

from xnp._lazy import after_import, exports
from xnp._version import __version__
from xnp.errors import CheckpointError, XnpError, XnpWarning

__all__ = [
    "CheckpointError",
    "Ensemble",
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
    "calibrate",
    "datasets",
    "evaluate",
    "fit",
    "load",
    "plot",
    "predict",
    "pretrained",
    "validation",
]

__getattr__, __dir__ = exports(
    __name__,
    {
        "Ensemble": "xnp.ensemble:Ensemble",
        "NPDataArrayAccessor": "xnp.accessor:NPDataArrayAccessor",
        "NPDatasetAccessor": "xnp.accessor:NPDatasetAccessor",
        "NeuralProcess": "xnp.neural_process:NeuralProcess",
        "Points": "xnp.arrays:Points",
        "TrainConfig": "xnp.train.settings:TrainConfig",
        "available_models": "xnp.models.registry:available_models",
        "available_pretrained": "xnp.shipped:available_pretrained",
        "baselines": "xnp.baselines",
        "calibrate": "xnp.api.calibrate:calibrate",
        "datasets": "xnp.datasets",
        "evaluate": "xnp.scoring.evaluation:evaluate",
        "fit": "xnp.api.fit:fit",
        "load": "xnp.ensemble:load",
        "plot": "xnp.plot",
        "predict": "xnp.api.predict:predict",
        "pretrained": "xnp.shipped:pretrained",
        "validation": "xnp.scoring.cross_validation",
    },
    globals(),
)


def _register_accessor() -> None:
    import xnp.accessor  # noqa: F401  (registers ds.np and da.np)


after_import("xarray", _register_accessor)

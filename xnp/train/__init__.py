"""Training on padded arrays: settings, the optimiser, the step, the loop, checkpoints.

``settings`` (:class:`TrainConfig` and the one AdamW optimiser), ``steps`` (the
jitted update), ``metrics`` (validation sums), ``state`` (:class:`TrainState`),
``loop`` (:func:`train`) and ``checkpoints`` (resumable checkpoint folders).
Nothing here imports xarray or :mod:`xnp.data`: it sees padded
:class:`~xnp.arrays.Batch` objects only, made by the layer above
(:func:`xnp.fit`).  It may import :mod:`xnp.models`, :mod:`xnp.arrays`,
:mod:`xnp.files` and :mod:`xnp.errors`.  The names below are imported on first
use, so that reading a model's scores does not load the training loop.
"""

from xnp._lazy import exports

__all__ = [
    "HISTORY_FIELDS",
    "CheckpointDir",
    "TrainConfig",
    "TrainState",
    "adamw",
    "averaged_fit_step",
    "batch_loss",
    "data_mesh",
    "fit_step",
    "make_eval_step",
    "make_optimizer",
    "make_train_step",
    "train",
]

__getattr__, __dir__ = exports(
    __name__,
    {
        "HISTORY_FIELDS": "xnp.train.state:HISTORY_FIELDS",
        "CheckpointDir": "xnp.train.checkpoints:CheckpointDir",
        "TrainConfig": "xnp.train.settings:TrainConfig",
        "TrainState": "xnp.train.state:TrainState",
        "adamw": "xnp.train.settings:adamw",
        "averaged_fit_step": "xnp.train.steps:averaged_fit_step",
        "batch_loss": "xnp.train.steps:batch_loss",
        "data_mesh": "xnp.train.loop:data_mesh",
        "fit_step": "xnp.train.steps:fit_step",
        "make_eval_step": "xnp.train.metrics:make_eval_step",
        "make_optimizer": "xnp.train.settings:make_optimizer",
        "make_train_step": "xnp.train.steps:make_train_step",
        "train": "xnp.train.loop:train",
    },
    globals(),
)

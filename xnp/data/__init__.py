"""xarray ⇄ points: coordinates, covariates, normalisation, tasks, synthetic data.

``names``, ``lookup``, ``coords``, ``times``, ``crs`` and ``elevation`` find a
dataset's coordinates; ``covariates`` and ``normalise`` read and scale what the
model sees; ``flatten`` turns xarray objects into flat point sets and
predictions back into labelled xarray; ``tasks``, ``sampler`` and ``batch`` cut
training tasks and pad them into :class:`xnp.arrays.Batch` objects; ``trend``
fits a zero-shot context's large-scale mean; ``synthetic`` draws Gaussian-process
tasks for pretraining.  This layer never imports flax or a model: it may import
:mod:`xnp.geo`, :mod:`xnp.arrays`, :mod:`xnp.units` and :mod:`xnp.errors`.  The
names below are imported on first use.
"""

from xnp._lazy import exports

__all__ = [
    "Batch",
    "ForecastTasks",
    "GPTasks",
    "Layout",
    "Normaliser",
    "PointSet",
    "SpatialTasks",
    "Stats",
    "Task",
    "TaskPoints",
    "TaskSampler",
    "WindowTasks",
    "bucket_size",
    "collate",
    "covariate_channels",
    "find_coords",
    "gp_oracle",
    "interpolate_dem",
    "latlon",
    "predictions_to_xarray",
    "resolve_variables",
    "sample_gp_batch",
    "time_hours",
    "to_points",
]

__getattr__, __dir__ = exports(
    __name__,
    {
        "Batch": "xnp.data.batch:Batch",
        "ForecastTasks": "xnp.data.tasks:ForecastTasks",
        "GPTasks": "xnp.data.synthetic:GPTasks",
        "Layout": "xnp.data.coords:Layout",
        "Normaliser": "xnp.data.normalise:Normaliser",
        "PointSet": "xnp.data.flatten:PointSet",
        "SpatialTasks": "xnp.data.tasks:SpatialTasks",
        "Stats": "xnp.data.normalise:Stats",
        "Task": "xnp.data.batch:Task",
        "TaskPoints": "xnp.data.batch:TaskPoints",
        "TaskSampler": "xnp.data.sampler:TaskSampler",
        "WindowTasks": "xnp.data.tasks:WindowTasks",
        "bucket_size": "xnp.data.batch:bucket_size",
        "collate": "xnp.data.batch:collate",
        "covariate_channels": "xnp.data.covariates:covariate_channels",
        "find_coords": "xnp.data.coords:find_coords",
        "gp_oracle": "xnp.data.synthetic:gp_oracle",
        "interpolate_dem": "xnp.data.covariates:interpolate_dem",
        "latlon": "xnp.data.coords:latlon",
        "predictions_to_xarray": "xnp.data.flatten:predictions_to_xarray",
        "resolve_variables": "xnp.data.coords:resolve_variables",
        "sample_gp_batch": "xnp.data.synthetic:sample_gp_batch",
        "time_hours": "xnp.data.times:time_hours",
        "to_points": "xnp.data.flatten:to_points",
    },
    globals(),
)

"""xarray ⇄ points: coordinates, covariates, normalisation, tasks, synthetic data.

This layer never imports flax: it turns xarray objects into padded
:class:`xnp.arrays.Points` batches and predictions back into labelled xarray.
"""

from xnp.data.batch import Batch, Task, TaskPoints, bucket_size, collate
from xnp.data.coords import Layout, find_coords, latlon, resolve_variables
from xnp.data.covariates import covariate_channels, interpolate_dem
from xnp.data.gp import GPTasks, gp_oracle, sample_gp_batch
from xnp.data.normalise import Normaliser, Stats
from xnp.data.points import PointSet, predictions_to_xarray, to_points
from xnp.data.sampler import TaskSampler
from xnp.data.tasks import ForecastTasks, SpatialTasks, WindowTasks
from xnp.data.times import time_hours

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

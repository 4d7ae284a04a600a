"""Classical baselines with the same ``predict`` call and output as :func:`xnp.predict`.

Each baseline is a small object whose ``predict(data, targets=None, *, time=None)``
takes the same arguments as ``xnp.predict(model, data, targets, time=...)`` and
returns the same layout: ``{var}_mean`` and ``{var}_std`` on the target
coordinates (and ``time``), with the same attributes.  So a neural process and
a baseline are scored on identical inputs with :func:`xnp.evaluate`::

    scores_np = evaluate(xnp.predict(model, context, targets), truth)
    scores_idw = evaluate(InverseDistanceWeighting().predict(context, targets), truth)

and a baseline's ``predict`` can be handed to :func:`xnp.validation.cross_validate`
as it is.

Spatial baselines (each time on its own, like :func:`xnp.predict`):

* :class:`InverseDistanceWeighting`: great-circle inverse-distance weighting;
* :class:`GaussianProcess`: exact GP regression with hyperparameters fitted by
  maximising the marginal likelihood (JAX + optax);
* :class:`OrdinaryKriging`: pykrige's ordinary kriging in geographic coordinates
  (``pip install 'xnp[kriging]'``).

Forecasting baseline: :class:`Persistence` (the last observation, with an
uncertainty from the history of changes over the same lag).

Baselines ignore covariates and compute eagerly (a dask-chunked ``targets``
template gives an in-memory result).

One module a model family (``idw``, ``gaussian_process``, ``kriging``,
``persistence``) over ``base``, what they share.  The baselines sit above the
public API and below the command line: they may import :mod:`xnp.prediction`,
:mod:`xnp.data`, :mod:`xnp.geo`, :mod:`xnp.arrays`, :mod:`xnp.units` and
:mod:`xnp.errors`, never ``xnp.cli``, ``xnp.plot``, ``xnp.scoring``,
``xnp.accessor`` nor the top-level package.
"""

from xnp.baselines.gaussian_process import GaussianProcess, GPHyperparameters
from xnp.baselines.idw import InverseDistanceWeighting
from xnp.baselines.kriging import OrdinaryKriging
from xnp.baselines.persistence import Persistence

__all__ = [
    "GPHyperparameters",
    "GaussianProcess",
    "InverseDistanceWeighting",
    "OrdinaryKriging",
    "Persistence",
]

r"""Several models' predictions of one field as one: the moments of their equal mixture.

An ensemble of fits (:class:`xnp.Ensemble`) predicts with each member and
combines them here.  The members' predictive distributions, each Gaussian with
mean ``m_i`` and std ``s_i``, are mixed with equal weights; the result is
reported by the mixture's mean and standard deviation,

.. math::

    m = \frac1n \sum_i m_i, \qquad
    s^2 = \frac1n \sum_i s_i^2 + \frac1n \sum_i (m_i - m)^2,

the spread within the members plus the spread between them (the second sum is
computed from the departures ``m_i - m``, not as a difference of large second
moments, which would lose the variance to rounding in float32 at values such as
280 K).  Scores computed from the mean and std (RMSE, the Gaussian NLL and CRPS)
then treat the mixture as the Gaussian with its moments.  Joint samples
(``{variable}_samples``) are the members' samples, pooled: sample ``j`` of the
pool was drawn by one member, the members taking equal shares (a stratified draw
from the mixture), in an order shuffled by the seed.

Everything is xarray arithmetic, so lazy (dask-backed) member predictions give a
lazy result.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from xnp.errors import ConfigError
from xnp.prediction.samples import SAMPLE_DIM

__all__ = ["mixture_moments", "sample_shares"]


def sample_shares(samples: int, members: int) -> list[int]:
    """How many of ``samples`` joint samples each of ``members`` draws (as equal as can be).

    Examples
    --------
    >>> sample_shares(10, 4)
    [3, 3, 2, 2]
    """
    return [samples // members + (i < samples % members) for i in range(members)]


def mixture_moments(
    preds: Sequence[xr.Dataset], variables: Sequence[str], *, seed: int = 0
) -> xr.Dataset:
    """The equal mixture of the members' predictions ``preds`` (see the module's text).

    Parameters
    ----------
    preds : sequence of Dataset
        Each member's prediction of the same targets (``{v}_mean``, ``{v}_std`` and
        optionally ``{v}_samples`` for each ``v`` of ``variables``), as
        :func:`xnp.predict` returns them.
    variables : sequence of str
        The predicted variables.
    seed : int
        Seed of the shuffle of the pooled samples.

    Returns
    -------
    Dataset
        The first member's dataset with the mixture's mean, std and pooled samples,
        and the attribute ``xnp_ensemble`` saying how many members it combines.

    Examples
    --------
    >>> a = xr.Dataset({"t_mean": ("x", [1.0, 2.0]), "t_std": ("x", [1.0, 1.0])})
    >>> b = xr.Dataset({"t_mean": ("x", [3.0, 2.0]), "t_std": ("x", [1.0, 1.0])})
    >>> out = mixture_moments([a, b], ["t"])
    >>> out.t_mean.values.tolist(), out.t_std.values.round(4).tolist()
    ([2.0, 2.0], [1.4142, 1.0])
    """
    if not preds:
        raise ConfigError("an ensemble's prediction needs at least one member's; got none.")
    n = len(preds)
    drawn_names = [f"{v}_samples" for v in variables]
    out = preds[0].drop_vars(drawn_names, errors="ignore")
    for v in variables:
        means = [p[f"{v}_mean"] for p in preds]
        mean = sum(means[1:], means[0]) / n
        within = sum(p[f"{v}_std"] ** 2 for p in preds) / n
        between = sum((m - mean) ** 2 for m in means) / n
        std = np.sqrt(within + between)
        out[f"{v}_mean"] = mean.astype(means[0].dtype).assign_attrs(means[0].attrs)
        first_std = preds[0][f"{v}_std"]
        out[f"{v}_std"] = std.astype(first_std.dtype).assign_attrs(first_std.attrs)
        drawn = [p[f"{v}_samples"] for p in preds if f"{v}_samples" in p]
        if drawn:
            pooled = xr.concat(drawn, dim=SAMPLE_DIM)
            order = np.random.default_rng(seed).permutation(pooled.sizes[SAMPLE_DIM])
            out[f"{v}_samples"] = pooled.isel({SAMPLE_DIM: order}).assign_attrs(drawn[0].attrs)
    out.attrs["xnp_ensemble"] = (
        f"the equal mixture of {n} members' predictions: mean and std of the mixture"
    )
    return out

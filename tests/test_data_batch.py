from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xnp.arrays import Points
from xnp.data.batch import Batch, Task, TaskPoints, bucket_size, collate
from xnp.errors import ShapeError


def task_points(n: int, dx: int = 2, source: int = 0) -> TaskPoints:
    rng = np.random.default_rng(n)
    return TaskPoints(
        s=rng.uniform(-90, 90, (n, 2)),
        t=rng.normal(size=n),
        x=rng.normal(size=(n, dx)),
        f=rng.normal(size=(n, 1)),
        source=np.full(n, source, np.int32),
    )


@pytest.mark.parametrize(("n", "size"), [(0, 16), (1, 16), (16, 16), (17, 32), (1000, 1024)])
def test_power_of_two_buckets(n, size):
    assert bucket_size(n) == size


def test_explicit_buckets():
    assert bucket_size(5, [64, 8]) == 8
    with pytest.raises(ShapeError, match="largest bucket"):
        bucket_size(65, [8, 64])


def test_collate_pads_with_masks_and_keeps_values():
    tasks = [
        Task(task_points(20, source=1), task_points(5)),
        Task(task_points(3), task_points(40)),
    ]
    batch = collate(tasks)
    assert isinstance(batch.context, Points)
    assert batch.context.s.shape == (2, 32, 2)
    assert batch.target.x.shape == (2, 64, 2)
    assert batch.y.shape == (2, 64, 1)
    assert batch.num_context.tolist() == [20, 3]
    assert batch.num_targets.tolist() == [5, 40]
    assert bool(jnp.all(batch.target.f == 0))  # targets carry no values
    np.testing.assert_allclose(batch.y[1, :40], tasks[1].target.f, rtol=1e-6)
    np.testing.assert_allclose(batch.context.t[0, :20, 0], tasks[0].context.t, rtol=1e-6)
    assert batch.context_source[0, :20].tolist() == [1] * 20
    for field in (batch.context.s, batch.context.x, batch.context.f, batch.y[0, 5:]):
        assert not bool(jnp.any(field[..., 20:, :] if field.ndim == 3 else field))
    assert batch.target_mask.dtype == jnp.bool_


def test_batch_is_a_pytree_for_jit():
    batch = collate([Task(task_points(4), task_points(4))])

    @jax.jit
    def masked_mean(b: Batch) -> jax.Array:
        return jnp.sum(b.y[..., 0] * b.target_mask) / jnp.sum(b.target_mask)

    assert jnp.isfinite(masked_mean(batch))
    assert len(jax.tree.leaves(batch)) == 13


def test_taskpoints_concat_and_take():
    both = TaskPoints.concat([task_points(3), task_points(2, source=4)])
    assert len(both) == 5
    assert both.take(np.array([4])).source.tolist() == [4]
    with pytest.raises(ShapeError):
        collate([])

"""Saving, loading, corruption, atomic writes, checkpoints and resuming (even after kill -9).

The fits use the data shape, model and batch size of tests/test_fit.py, so the
compiled steps are shared within a session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import xnp
from xnp import files as ckpt
from xnp.api.sizes import fixed_batch as _fixed
from xnp.data import TaskSampler
from xnp.errors import CheckpointError, EmptyDataError, XnpWarning
from xnp.train import TrainConfig
from xnp.train.checkpoints import CheckpointDir

CONFIG = TrainConfig(log_every=25, validate_every=50, validation_batches=4, checkpoint_every=25)
ARGS = {"model": "bsa-tnp-tiny", "learning_rate": 5e-3, "progress": False, "config": CONFIG}


def gp_data():
    return xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=40, lengthscale_km=3000.0)


def leaves(model):
    return [np.asarray(a) for a in jax.tree.leaves(model.params_)]


def assert_same_params(a, b):
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def model():
    return gp_data().np.fit("field", steps=25, **ARGS)


@pytest.fixture(scope="module")
def batch(model):
    sampler = TaskSampler(gp_data(), "field", model.task, batch_size=8, seed=3,
                          normaliser=model.normaliser)  # fmt: skip
    return _fixed(sampler.batch(0), model.training["context_size"], model.training["target_size"])


def test_save_load_predict_gives_identical_numbers(model, batch, tmp_path):
    path = model.save(tmp_path / "model")
    assert sorted(p.name for p in path.iterdir()) == [
        "baseline.safetensors",  # the default forecaster's diurnal climatology
        "config.json",
        "history.json",
        "params.safetensors",
    ]  # fmt: skip  (JSON and safetensors only: nothing that can execute code)
    loaded = xnp.load(path)
    assert_same_params(model, loaded)
    for a, b in zip(model.predict_points(batch.context, batch.target),
                    loaded.predict_points(batch.context, batch.target), strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert loaded.config == model.config
    assert loaded.task == model.task
    assert loaded.normaliser == model.normaliser
    assert (loaded.variables, loaded.covariates) == (model.variables, model.covariates)
    assert loaded.coords == model.coords
    assert loaded.training == model.training
    np.testing.assert_array_equal(loaded.history_.val_nll, model.history_.val_nll)
    assert repr(loaded) == repr(model)
    meta = json.loads((path / "config.json").read_text())
    assert meta["format"] == "xnp.model/1"
    assert meta["jax_version"] == jax.__version__
    assert meta["xnp_version"] == xnp.__version__
    mean, std = loaded.denormalise(*loaded.predict_points(batch.context, batch.target))
    assert 250 < float(np.mean(mean)) < 310
    assert (std > 0).all()


def test_evaluate_batches_reports_metrics(model, batch):
    metrics = model.evaluate_batches([batch])
    assert set(metrics) == {"nll", "rmse", "coverage", "crps"}
    assert np.isfinite(metrics["nll"])
    assert metrics["crps"] > 0
    assert 0 <= metrics["coverage"] <= 1
    assert len(metrics["rmse"]) == 1
    assert metrics["rmse"][0] > 0
    with pytest.raises(EmptyDataError, match="at least one batch"):
        model.evaluate_batches([])


def corrupt(path: Path, how: str) -> None:
    meta = json.loads((path / "config.json").read_text())
    if how == "weights-bytes":
        data = bytearray((path / "params.safetensors").read_bytes())
        data[-3] ^= 0xFF
        (path / "params.safetensors").write_bytes(bytes(data))
    elif how == "weights-truncated":
        data = (path / "params.safetensors").read_bytes()
        (path / "params.safetensors").write_bytes(data[: len(data) // 2])
        meta["weights"]["sha256"] = None
        (path / "config.json").write_text(json.dumps(meta))
    elif how == "no-config":
        (path / "config.json").unlink()
    elif how == "bad-json":
        (path / "config.json").write_text("{not json")
    elif how == "future-format":
        meta["format"] = "xnp.model/99"
        (path / "config.json").write_text(json.dumps(meta))
    elif how == "other-architecture":
        meta["model"]["config"]["n_blocks"] = 3
        (path / "config.json").write_text(json.dumps(meta))
    elif how == "unknown-kind":
        meta["model"]["kind"] = "perceiver"
        (path / "config.json").write_text(json.dumps(meta))
    elif how == "missing-key":
        del meta["normaliser"]
        (path / "config.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("how", "match"),
    [
        ("weights-bytes", "corrupted"),
        ("weights-truncated", "not a valid safetensors"),
        ("no-config", "missing"),
        ("bad-json", "cannot be read as JSON"),
        ("future-format", "format 'xnp.model/99'"),
        ("other-architecture", "missing .*blocks.2"),
        ("unknown-kind", "Unknown model kind 'perceiver'"),
        ("missing-key", "incomplete"),
    ],
)
def test_loading_a_broken_directory_raises_checkpoint_error(model, tmp_path, how, match):
    path = model.save(tmp_path / "model")
    corrupt(path, how)
    with pytest.raises(CheckpointError, match=match):
        xnp.load(path)


def test_a_directory_without_format_or_history(model, tmp_path):
    path = model.save(tmp_path / "model")
    (path / "history.json").unlink()  # a record of the training, not needed to predict
    loaded = xnp.load(path)
    assert loaded.history_.sizes["step"] == 0
    assert_same_params(loaded, model)
    meta = json.loads((path / "config.json").read_text())
    del meta["format"]
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="no 'format' key, so its format is unknown"):
        xnp.load(path)


def test_load_of_a_missing_path_raises(tmp_path):
    with pytest.raises(CheckpointError, match="not a directory"):
        xnp.load(tmp_path / "nothing")
    with pytest.raises(xnp.XnpError):
        xnp.load(tmp_path)


def test_interrupted_save_keeps_the_previous_model(model, tmp_path, monkeypatch):
    path = model.save(tmp_path / "model")
    before = (path / "params.safetensors").read_bytes()

    def explode(*args, **kwargs):
        raise KeyboardInterrupt("interrupted mid-save")

    import xnp.saved_model

    monkeypatch.setattr(xnp.saved_model, "write_json", explode)
    with pytest.raises(KeyboardInterrupt):
        model.save(path)
    monkeypatch.undo()
    assert (path / "params.safetensors").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary left behind
    assert_same_params(xnp.load(path), model)
    model.save(path)  # replacing an existing model directory works
    assert_same_params(xnp.load(path), model)


def test_save_refuses_to_replace_a_foreign_directory(model, tmp_path):
    (tmp_path / "notes.txt").write_text("precious")
    with pytest.raises(CheckpointError, match="not an xnp directory"):
        model.save(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "precious"
    # a project folder with a config.json of its own is not a saved model either
    (tmp_path / "config.json").write_text('{"foo": 1}')
    with pytest.raises(CheckpointError, match=r"config\.json is not xnp's"):
        model.save(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "precious"


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("weights", "x", "not compatible"),
        ("normaliser", "x", "not compatible"),
        ("task", "SpatialTasks", "not compatible"),
        ("variables", "t2m", "list of names"),
        ("covariates", None, "list of names"),
        ("coords", [1, 2], "must be a mapping"),
        ("weights", {"file": "/etc/passwd"}, "a name in the model directory"),
        ("normalise", "zz", "not compatible: normalise must be"),
        ("sources", ["data"], "not compatible: a multi-source model"),
        ("variables", ["t2m"], r"no statistics for the variable\(s\) \['t2m'\]"),
        ("variables", ["field", "field"], r"1 output channel\(s\) \(dim_y\) but 2 variable"),
    ],
)
def test_loading_a_config_with_wrong_field_types_raises(model, tmp_path, field, value, match):
    path = model.save(tmp_path / "model")
    meta = json.loads((path / "config.json").read_text())
    meta[field] = value
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=match):
        xnp.load(path)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("std", -5.0, r"'field': std must be a positive, finite number; got -5.0"),
        ("std", 0.0, r"std must be a positive, finite number; got 0.0"),
        ("std", "5", r"std must be a positive, finite number; got '5'"),
        ("mean", float("nan"), r"'field': mean must be a finite number; got nan"),
        ("mean", float("inf"), "mean must be a finite number"),
    ],
)
def test_a_saved_normaliser_is_checked_on_load(model, tmp_path, field, value, match):
    # an edited config.json (std: -5) would otherwise predict negative standard deviations
    path = model.save(tmp_path / "model")
    meta = json.loads((path / "config.json").read_text())
    meta["normaliser"]["stats"]["field"][field] = value
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=match):
        xnp.load(path)


def tiny_model(**kw) -> xnp.NeuralProcess:
    """An untrained tiny model: for tests of saving that need no fit."""
    from xnp.data.normalise import Normaliser, Stats
    from xnp.models.config import BSATNPConfig

    stats = Normaliser({"field": Stats(280.0, 5.0, "K")})
    return xnp.NeuralProcess.init(BSATNPConfig.tiny(), stats, ["field"], **kw)


def test_repr_copes_with_a_partial_training_record(tmp_path):
    model = tiny_model(training={"steps": 3})  # e.g. written by a script of one's own
    assert "trained:     3 steps" in repr(model)
    assert "trained:     3 steps" in repr(xnp.load(model.save(tmp_path / "m")))


def test_save_where_a_directory_cannot_be_made_raises_checkpoint_error(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(CheckpointError, match=r"Cannot write .*file/model.*not below a file"):
        tiny_model().save(tmp_path / "file" / "model")
    assert (tmp_path / "file").read_text() == "not a folder"


def test_unusable_checkpoint_dirs_are_refused_before_training(tmp_path):
    (tmp_path / "file").write_text("x")
    saved = tiny_model().save(tmp_path / "model")
    for where, match in [
        (tmp_path / "file", "exists and is not a directory"),
        (tmp_path / "file" / "run", "is a file, not a directory"),
        (saved, "holds a saved model"),
    ]:
        with pytest.raises(CheckpointError, match=match):
            CheckpointDir(where)
    with pytest.raises(CheckpointError, match="keep must be a positive integer"):
        CheckpointDir(tmp_path / "run", keep=0)
    # fit refuses them before any step (no step folder mixed into the saved model)
    with pytest.raises(CheckpointError, match="holds a saved model"):
        gp_data().np.fit("field", steps=1, checkpoint_dir=saved, **ARGS)
    assert sorted(p.name for p in saved.iterdir()) == [
        "config.json", "history.json", "params.safetensors",
    ]  # fmt: skip
    assert xnp.load(saved).num_params == tiny_model().num_params  # loading needs no writing


def test_pruning_leaves_folders_that_are_not_checkpoints(tmp_path):
    checkpoints = CheckpointDir(tmp_path, keep=1)
    (tmp_path / "step-00000001").mkdir()  # someone else's folder with a step-like name
    (tmp_path / "step-00000001" / "notes.txt").write_text("precious")
    for step in (2, 3):
        with checkpoints.write(step) as tmp:
            (tmp / "config.json").write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "LATEST", "step-00000001", "step-00000003",
    ]  # fmt: skip
    assert (tmp_path / "step-00000001" / "notes.txt").read_text() == "precious"


def test_latest_pointer_cannot_lead_out_of_the_folder(tmp_path):
    run, other = tmp_path / "run", tmp_path / "other" / "step-00000009"
    for folder in (run / "step-00000001", other):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    (run / "LATEST").write_text("../other/step-00000009")
    assert CheckpointDir(run).latest() == run / "step-00000001"


def test_a_failed_checkpoint_write_warns_and_training_goes_on(tmp_path, monkeypatch):
    import xnp.train.checkpoints

    write, calls = ckpt.write_arrays, []

    def disk_full_once(path, arrays):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(28, "No space left on device", str(path))
        return write(path, arrays)

    monkeypatch.setattr(xnp.train.checkpoints, "write_arrays", disk_full_once)
    config = TrainConfig(log_every=1, validate_every=1, checkpoint_every=1)
    args = ARGS | {"config": config, "validation": None, "checkpoint_dir": tmp_path / "run"}
    with pytest.warns(XnpWarning, match="could not write the checkpoint of step 1.*continues"):
        model = gp_data().np.fit("field", steps=2, **args)
    assert model.training["step"] == 2  # the run was not lost
    assert CheckpointDir(tmp_path / "run").latest().name == "step-00000002"
    assert not any(".tmp-" in p.name for p in (tmp_path / "run").iterdir())


@pytest.fixture
def umask_027():
    """Run a test under umask 027 (group may read, others nothing), then restore it."""
    previous = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.usefixtures("umask_027")
def test_saved_directories_get_the_permissions_of_the_umask(tmp_path):
    # a temporary directory would be 0700 whatever the umask: colleagues could not read
    with ckpt.atomic_directory(tmp_path / "dir") as tmp:
        (tmp / "config.json").write_text("{}")
    assert mode(tmp_path / "dir") == 0o750
    with ckpt.atomic_directory(tmp_path / "dir") as tmp:  # replacing an existing one too
        (tmp / "config.json").write_text("{}")
    assert mode(tmp_path / "dir") == 0o750
    path = xnp.pretrained("gp-sphere").save(tmp_path / "model")
    assert mode(path) == 0o750
    assert {mode(p) for p in path.iterdir()} == {0o640}
    checkpoints = CheckpointDir(tmp_path / "run")
    with checkpoints.write(5) as tmp:
        (tmp / "config.json").write_text("{}")
    assert mode(tmp_path / "run" / "step-00000005") == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "model", "run"]


def test_a_leading_tilde_means_the_home_directory(tmp_path, monkeypatch):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    with ckpt.atomic_directory("~/models/a") as tmp:
        ckpt.write_json(tmp / "config.json", {"a": 1})
    assert ckpt.read_json("~/models/a/config.json") == {"a": 1}
    saved = xnp.pretrained("gp-sphere").save("~/models/zero-shot")
    assert saved == home / "models" / "zero-shot"
    assert xnp.load("~/models/zero-shot").normalise == "context"
    checkpoints = CheckpointDir("~/run")
    with checkpoints.write(1) as tmp:
        (tmp / "config.json").write_text("{}")
    assert checkpoints.latest() == home / "run" / "step-00000001"
    assert sorted(p.name for p in home.iterdir()) == ["models", "run"]
    assert list(cwd.iterdir()) == []  # no literal "~" folder


def test_arrays_round_trip_and_mismatch_errors():
    tree = {"a": np.arange(3.0, dtype=np.float32), "b": (np.zeros((2, 0)), np.int32(4))}
    arrays = ckpt.tree_to_arrays(tree)
    assert sorted(arrays) == ["a", "b.0", "b.1"]
    back = ckpt.arrays_to_tree(tree, arrays)
    np.testing.assert_array_equal(back["a"], tree["a"])
    with pytest.raises(CheckpointError, match="shape"):
        ckpt.arrays_to_tree(tree, arrays | {"a": np.zeros(4, np.float32)})
    with pytest.raises(CheckpointError, match="unexpected"):
        ckpt.arrays_to_tree(tree, arrays | {"c": np.zeros(1)})


def test_checkpoints_resume_to_the_uninterrupted_result(tmp_path):
    ckdir = tmp_path / "run"
    full = gp_data().np.fit("field", steps=75, checkpoint_dir=ckdir, **ARGS)
    steps = CheckpointDir(ckdir).steps()
    assert [p.name for p in steps] == ["step-00000050", "step-00000075"]  # keep=2
    assert (ckdir / "LATEST").read_text() == "step-00000075"
    assert_same_params(xnp.load(ckdir), xnp.load(steps[-1]))
    # Pretend the run died after step 50: its last checkpoint never landed.
    for leftover in (steps[-1], ckdir / "LATEST"):
        ckpt.shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    resumed = gp_data().np.fit("field", steps=75, checkpoint_dir=ckdir, resume=True, **ARGS)
    assert_same_params(full, resumed)
    assert resumed.training["best_step"] == full.training["best_step"]
    np.testing.assert_array_equal(resumed.history_.train_nll, full.history_.train_nll)
    np.testing.assert_array_equal(resumed.history_.val_nll, full.history_.val_nll)
    with pytest.raises(CheckpointError, match="different fit"):
        gp_data().np.fit("field", steps=100, checkpoint_dir=ckdir, resume=True, **ARGS)
    # other data (here shifted by 50 K) is another fit, even with the same arguments
    with pytest.raises(CheckpointError, match=r"different fit \(differs in \['data'\]\)"):
        (gp_data() + 50.0).np.fit("field", steps=75, checkpoint_dir=ckdir, resume=True, **ARGS)
    # and so is the same field on another region (same sizes, times and statistics)
    moved = gp_data().assign_coords(lat=lambda d: d.lat + 1.0)
    with pytest.raises(CheckpointError, match=r"different fit \(differs in \['data'\]\)"):
        moved.np.fit("field", steps=75, checkpoint_dir=ckdir, resume=True, **ARGS)
    # forgetting resume=True must not wipe the run's checkpoints
    with pytest.raises(CheckpointError, match="already holds the checkpoints"):
        gp_data().np.fit("field", steps=75, checkpoint_dir=ckdir, **ARGS)
    assert (ckdir / "LATEST").exists()


def test_ctrl_c_returns_the_model_and_resume_continues(tmp_path, monkeypatch):
    # an interrupt while batch 30 is prepared stands for Ctrl-C in the middle of the run
    batch, fired = TaskSampler.batch, []

    def interrupted(self, k):
        if k == 30 and not fired:
            fired.append(k)
            raise KeyboardInterrupt
        return batch(self, k)

    monkeypatch.setattr(TaskSampler, "batch", interrupted)
    ckdir = tmp_path / "run"
    with pytest.warns(XnpWarning, match=r"interrupted after \d+ of 50 steps.*resume=True"):
        early = gp_data().np.fit("field", steps=50, checkpoint_dir=ckdir, **ARGS)
    assert early.training["interrupted"]
    assert early.training["step"] < 50
    assert CheckpointDir(ckdir).latest().name == f"step-{early.training['step']:08d}"
    resumed = gp_data().np.fit("field", steps=50, checkpoint_dir=ckdir, resume=True, **ARGS)
    full = gp_data().np.fit("field", steps=50, **ARGS)
    assert_same_params(full, resumed)
    # the losses of the steps between the last history row and the interrupt count too
    np.testing.assert_array_equal(resumed.history_.train_nll, full.history_.train_nll)


CHILD = """
import sys
import jax
jax.config.update("jax_num_cpu_devices", 2)
jax.config.update("jax_numpy_rank_promotion", "raise")
import xnp
from xnp.train import TrainConfig
config = TrainConfig(log_every=5, validate_every=50, validation_batches=4, checkpoint_every=5,
                     prefetch=0)
ds = xnp.datasets.gp_sphere(n_lat=6, n_lon=12, n_time=40, lengthscale_km=3000.0)
ds.np.fit("field", model="bsa-tnp-tiny", learning_rate=5e-3, progress=False, config=config,
          steps=int(sys.argv[2]), checkpoint_dir=sys.argv[1], resume=True)
"""


@pytest.mark.slow
def test_resume_after_kill_9_matches_an_uninterrupted_run(tmp_path):
    steps, ckdir = 120, tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    child = subprocess.Popen([sys.executable, str(script), str(ckdir), str(steps)])
    killed_at = None
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and child.poll() is None:
            latest = CheckpointDir(ckdir).latest()
            if latest is not None and int(latest.name.split("-")[1]) >= 20:
                os.kill(child.pid, signal.SIGKILL)
                killed_at = int(latest.name.split("-")[1])
                break
            time.sleep(0.02)
    finally:
        if child.poll() is None and killed_at is None:
            child.kill()
        child.wait()
    assert killed_at is not None, "the child finished before it could be killed"
    assert child.returncode == -signal.SIGKILL
    config = TrainConfig(log_every=5, validate_every=50, validation_batches=4,
                         checkpoint_every=5, prefetch=0)  # fmt: skip
    args = ARGS | {"config": config, "steps": steps}
    resumed = gp_data().np.fit("field", checkpoint_dir=ckdir, resume=True, **args)
    full = gp_data().np.fit("field", **args)
    assert_same_params(full, resumed)
    assert resumed.history_.sizes["step"] == full.history_.sizes["step"] == steps // 5

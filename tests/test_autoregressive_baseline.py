"""The autoregressive forecast baseline (issue 27): a regression of the change over the
lead on the changes since the earlier context frames and the mean diurnal change."""

import warnings

import numpy as np
import pytest
from strategies import grid_dataset
from test_forecast_baseline import diurnal_grid, zero_change

import xnp
from xnp.data.baseline import ForecastBaseline
from xnp.data.coords import find_coords
from xnp.data.lagged import features, nearest_in_frame
from xnp.data.tasks import ForecastTasks
from xnp.errors import CheckpointError, ConfigError


def drifting_grid(nt=120, ny=4, nx=5, seed=0):
    """Hourly frames with a diurnal cycle and a persistent random drift (an AR(1) walk),
    so that the change since 6 h ago tells something about the next 6 h."""
    rng = np.random.default_rng(seed)
    ds = diurnal_grid(nt=nt, ny=ny, nx=nx, seed=seed)
    drift = np.zeros((nt, ny, nx))
    velocity = np.zeros((ny, nx))
    for i in range(1, nt):
        velocity = 0.95 * velocity + 0.05 * rng.normal(size=(ny, nx))
        drift[i] = drift[i - 1] + velocity
    return ds.assign(t2m=ds.t2m + drift)


def reference_coefficients(x, lags, lead, hour, change, end):
    """The least-squares fit for one initialisation hour, written out row by row."""
    rows, ys = [], []
    first = int(-min(lags))
    for i in range(first, end - lead):
        if i % 24 != hour:
            continue
        for p in range(x.shape[1]):
            lagged = [x[i + int(lag), p] - x[i, p] for lag in lags]
            rows.append([1.0, *lagged, change[p]])
            ys.append(x[i + lead, p] - x[i, p])
    return np.linalg.lstsq(np.array(rows), np.array(ys), rcond=None)[0]


def test_coefficients_match_a_row_by_row_least_squares_fit():
    ds = drifting_grid()
    layout = find_coords(ds, "t2m")
    base = ForecastBaseline.fit("autoregressive", ds, layout, ["t2m"], [6.0], end=96,
                                lags=[-12.0, -6.0])  # fmt: skip
    assert base.coef.shape == (1, 24, 4, 1)
    assert base.lags.tolist() == [-12.0, -6.0]
    x = ds.t2m.values.reshape(ds.sizes["time"], -1)
    for hour in (3, 17):
        b = list(base.hours).index(hour)
        want = reference_coefficients(x, [-12, -6], 6, hour, base.change[0, b, :, 0], end=96)
        np.testing.assert_allclose(base.coef[0, b, :, 0], want, rtol=1e-3, atol=1e-4)
    # the regression explains more than the diurnal climatology alone
    diurnal = ForecastBaseline.fit("persistence+diurnal", ds, layout, ["t2m"], [6.0], end=96)
    assert base.scale[0] < diurnal.scale[0]


def test_the_baseline_applies_the_coefficients_to_the_nearest_lagged_values():
    ds = drifting_grid()
    base = ForecastBaseline.fit("autoregressive", ds, find_coords(ds, "t2m"), ["t2m"], [6.0],
                                end=96, lags=[-12.0, -6.0])  # fmt: skip
    s = np.stack(np.meshgrid(ds.lat, ds.lon, indexing="ij"), -1).reshape(-1, 2)
    x = ds.t2m.values.reshape(ds.sizes["time"], -1)
    t0 = 100  # hour 4
    context = (np.concatenate([s] * 3), np.repeat([-12.0, -6.0, 0.0], len(s)),
               np.concatenate([x[t0 - 12], x[t0 - 6], x[t0]])[:, None])  # fmt: skip
    got = base.at(context, s, reference=float(t0), lead=6.0)  # reference hour 4 (1970-01-01)
    coef = base.coef[0, list(base.hours).index(4), :, 0].astype(np.float64)
    change = base.change[0, list(base.hours).index(4), :, 0]
    want = x[t0] + coef[0] + coef[1] * (x[t0 - 12] - x[t0]) + coef[2] * (x[t0 - 6] - x[t0])
    want = want + coef[3] * change
    np.testing.assert_allclose(got[:, 0], want, rtol=1e-6, atol=1e-4)
    # a frame missing at a lag counts as no change since it
    partial = tuple(a[len(s) :] for a in context)
    missing = base.at(partial, s, reference=float(t0), lead=6.0)
    np.testing.assert_allclose(missing[:, 0], want - coef[1] * (x[t0 - 12] - x[t0]), atol=1e-4)


def test_nearest_in_frame_and_features():
    s = np.array([[0.0, 0.0], [0.0, 4.0], [0.0, 1.0]])
    t, f = np.array([-6.0, -6.0, 0.0]), np.array([[1.0, np.nan], [2.0, np.nan], [3.0, 4.0]])
    got = nearest_in_frame(s, t, f, np.array([[0.0, 3.0]]), time=-6.0)
    np.testing.assert_array_equal(got, [[2.0, np.nan]])  # variable 1 is not in the frame
    x = features(np.array([[1.0]]), [np.array([[np.nan]]), np.array([[3.0]])], np.array([[0.5]]))
    np.testing.assert_array_equal(x, [[[1.0, 0.0, 2.0, 0.5]]])


def test_thinned_context_frames_are_simulated_in_the_fit():
    ds = drifting_grid()
    layout = find_coords(ds, "t2m")
    kw = {"end": 96, "lags": [-6.0]}
    full = ForecastBaseline.fit("autoregressive", ds, layout, ["t2m"], [6.0], **kw)
    thin = ForecastBaseline.fit("autoregressive", ds, layout, ["t2m"], [6.0], fraction=0.2, **kw)
    assert not np.allclose(full.coef, thin.coef)
    assert thin.scale[0] > full.scale[0]  # nearest-neighbour lags explain less


def test_lags_must_be_earlier_frames():
    ds = drifting_grid(nt=48)
    with pytest.raises(ConfigError, match="negative"):
        ForecastBaseline.fit("autoregressive", ds, find_coords(ds, "t2m"), ["t2m"], [6.0],
                             lags=[6.0])  # fmt: skip


def baseline_on_grid(model, data, t0):
    """A forecast model's baseline 6 h after ``t0`` on every cell of ``data``, formed by
    hand from its frames 6, 3 and 0 h before ``t0`` (flattened, lat-major)."""
    s = np.stack(np.meshgrid(data.lat, data.lon, indexing="ij"), -1).reshape(-1, 2)
    frames = [data.t2m.sel(time=t0 - np.timedelta64(h, "h")).values.ravel() for h in (6, 3, 0)]
    context = (np.concatenate([s] * 3), np.repeat([-6.0, -3.0, 0.0], len(s)),
               np.concatenate(frames)[:, None])  # fmt: skip
    reference = float(t0.astype("datetime64[h]").astype(np.int64))
    return model.baseline.at(context, s, reference=reference, lead=6.0)[:, 0]


@pytest.fixture(scope="module")
def data():
    return drifting_grid(nt=96)


@pytest.fixture(
    scope="module", params=["autoregressive", "autoregressive+spatial", "autoregressive+gradient"]
)
def fitted(data, request):
    """A forecast model of each regressive kind, per-cell and spatial."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return data.isel(time=slice(0, 80)).np.fit(
            "t2m", model="bsa-tnp-tiny", progress=False, steps=2, batch_size=2, validation=None,
            tasks=ForecastTasks(frames=3, step=3, lead=6, baseline=request.param),
        )  # fmt: skip


def test_a_model_of_no_change_forecasts_the_regression_eager_lazy_and_saved(
    data, fitted, tmp_path
):
    kind = fitted.task.baseline
    assert fitted.baseline.kind == kind
    assert fitted.baseline.spatial == (kind != "autoregressive")
    assert fitted.baseline.gradient == (kind == "autoregressive+gradient")
    assert fitted.baseline.lags.tolist() == [-6.0, -3.0]
    model = zero_change(fitted)
    t0 = data.time.values[86]
    out = model.predict(data, time=t0)
    want = baseline_on_grid(model, data, t0)
    np.testing.assert_allclose(out.t2m_mean.values.ravel(), want, atol=2e-4)
    lazy = model.predict(data, time=t0, chunks={"lat": 2})
    np.testing.assert_allclose(lazy.t2m_mean.values, out.t2m_mean.values, atol=1e-4)
    loaded = xnp.load(fitted.save(tmp_path / "m"))
    assert loaded.baseline.kind == kind
    assert loaded.baseline.neighbourhood == fitted.baseline.neighbourhood
    assert loaded.baseline.gradients == fitted.baseline.gradients
    np.testing.assert_array_equal(loaded.baseline.coef, fitted.baseline.coef)
    np.testing.assert_array_equal(loaded.baseline.lags, fitted.baseline.lags)
    again = loaded.predict(data, time=t0)
    np.testing.assert_array_equal(again.t2m_mean.values, fitted.predict(data, time=t0).t2m_mean)


def test_malformed_coefficients_are_refused(fitted):
    blob, arrays = fitted.baseline.to_json(), dict(fitted.baseline.arrays())
    if fitted.baseline.spatial:
        with pytest.raises(CheckpointError, match="neighbourhood_km"):
            ForecastBaseline.from_saved({**blob, "neighbourhood_km": [100.0]}, arrays)
        with pytest.raises(CheckpointError, match="malformed"):
            ForecastBaseline.from_saved({**blob, "neighbourhood_km": None}, arrays)
        if fitted.baseline.gradient:
            with pytest.raises(CheckpointError, match="gradient_km"):
                ForecastBaseline.from_saved({**blob, "gradient_km": [0.0, 5.0]}, arrays)
            with pytest.raises(CheckpointError, match="malformed"):
                ForecastBaseline.from_saved({k: v for k, v in blob.items()
                                             if k != "gradient_km"}, arrays)  # fmt: skip
            spatial = dict(blob, kind="autoregressive+spatial")  # without the slopes' columns
            with pytest.raises(CheckpointError, match="coefficients"):
                ForecastBaseline.from_saved(spatial, arrays)
        own = dict(arrays, coef=arrays["coef"][..., :4, :])  # the own regressors only
        with pytest.raises(CheckpointError, match="coefficients"):
            ForecastBaseline.from_saved(blob, own)
    arrays["coef"] = arrays["coef"][..., :1, :]
    with pytest.raises(CheckpointError, match="coefficients"):
        ForecastBaseline.from_saved(blob, arrays)
    del arrays["coef"]
    with pytest.raises(CheckpointError, match="malformed"):
        ForecastBaseline.from_saved(blob, arrays)


def test_one_frame_regresses_on_the_diurnal_change_alone():
    ds = grid_dataset(nt=60, step_hours=1)
    base = ForecastBaseline.fit("autoregressive", ds, find_coords(ds, "t2m"), ["t2m"], [6.0])
    assert base.coef.shape[2] == 2
    assert base.lags.size == 0

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate, stats
from strategies import hourly_times, station_dataset

import xnp  # also registers the accessor
from xnp.baselines import Persistence
from xnp.errors import (
    ConfigError,
    CoordinateError,
    DimensionError,
    EmptyDataError,
    IncompatibleUnitsError,
    VariableNotFoundError,
    XnpWarning,
)
from xnp.plot import plot_calibration
from xnp.scoring.align import UnmatchedPointsWarning
from xnp.scoring.evaluation import evaluate, pit
from xnp.scoring.scores import METRICS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def gaussian_pred(mean, std, dims=("station",), coords=None, name="t2m"):
    return xr.Dataset(
        {f"{name}_mean": (dims, np.asarray(mean, float)),
         f"{name}_std": (dims, np.asarray(std, float))},
        coords=coords,
    )  # fmt: skip


def truth_of(values, dims=("station",), coords=None, name="t2m"):
    return xr.Dataset({name: (dims, np.asarray(values, float), {"units": "K"})}, coords=coords)


def crps_by_integration(mu: float, sigma: float, y: float) -> float:
    """CRPS from its definition, ∫ (F(x) − 1{x ≥ y})² dx, by quadrature."""
    cdf = stats.norm(mu, sigma).cdf
    lo, hi = min(mu - 12 * sigma, y), max(mu + 12 * sigma, y)
    below, _ = integrate.quad(lambda x: cdf(x) ** 2, lo - 1.0, y, limit=200)
    above, _ = integrate.quad(lambda x: (cdf(x) - 1.0) ** 2, y, hi + 1.0, limit=200)
    return below + above


def test_rmse_mae_and_n_are_exact_on_a_small_example():
    pred = gaussian_pred([1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0])
    truth = truth_of([2.0, 2.0, 1.0, 4.0])
    scores = evaluate(pred, truth)
    assert list(scores.data_vars) == [f"t2m_{m}" for m in METRICS]
    assert float(scores.t2m_rmse) == pytest.approx(np.sqrt((1 + 0 + 4 + 0) / 4))
    assert float(scores.t2m_mae) == pytest.approx(3 / 4)
    assert int(scores.t2m_n) == 4
    assert scores.t2m_rmse.attrs["units"] == "K"
    assert scores.t2m_coverage_90.attrs["units"] == "1"
    # |err| = 1 is inside the 90 % interval (±1.645σ) but outside the 50 % (±0.674σ)
    assert float(scores.t2m_coverage_50) == pytest.approx(2 / 4)
    assert float(scores.t2m_coverage_90) == pytest.approx(3 / 4)


@given(
    mu=st.floats(-5, 5),
    sigma=st.floats(0.05, 5),
    y=st.floats(-10, 10),
)
def test_crps_closed_form_matches_its_definition(mu, sigma, y):
    scores = evaluate(gaussian_pred([mu], [sigma]), truth_of([y]))
    assert float(scores.t2m_crps) == pytest.approx(crps_by_integration(mu, sigma, y), abs=1e-6)


def test_crps_nll_and_pit_agree_with_scipy_and_monte_carlo():
    rng = np.random.default_rng(0)
    mu, sigma, y = rng.normal(size=50), rng.uniform(0.2, 3, 50), rng.normal(size=50)
    scores = evaluate(gaussian_pred(mu, sigma), truth_of(y))
    assert float(scores.t2m_nll) == pytest.approx(-stats.norm(mu, sigma).logpdf(y).mean())
    u = pit(gaussian_pred(mu, sigma), truth_of(y)).t2m_pit.values
    np.testing.assert_allclose(u, stats.norm(mu, sigma).cdf(y), rtol=1e-12)
    # CRPS = E|X − y| − ½ E|X − X'| for X, X' ~ N(μ, σ²) (Monte Carlo, one point)
    x = rng.normal(mu[0], sigma[0], size=(2, 400_000))
    mc = np.abs(x[0] - y[0]).mean() - 0.5 * np.abs(x[0] - x[1]).mean()
    one = evaluate(gaussian_pred(mu[:1], sigma[:1]), truth_of(y[:1]))
    assert float(one.t2m_crps) == pytest.approx(mc, abs=5e-3 * sigma[0])


def test_a_calibrated_gaussian_has_nominal_coverage_and_uniform_pit():
    rng = np.random.default_rng(1)
    n = 20_000
    mu, sigma = rng.normal(size=n), rng.uniform(0.5, 2.0, n)
    truth = truth_of(mu + sigma * rng.normal(size=n))
    scores = evaluate(gaussian_pred(mu, sigma), truth)
    for level in (50, 90, 95):
        p = level / 100
        tolerance = 4 * np.sqrt(p * (1 - p) / n)
        assert float(scores[f"t2m_coverage_{level}"]) == pytest.approx(p, abs=tolerance)
    u = pit(gaussian_pred(mu, sigma), truth).t2m_pit.values
    assert stats.kstest(u, "uniform").pvalue > 1e-3


def test_an_overconfident_prediction_undercovers():
    rng = np.random.default_rng(2)
    truth = truth_of(rng.normal(size=5000))
    scores = evaluate(gaussian_pred(np.zeros(5000), np.full(5000, 0.5)), truth)
    assert float(scores.t2m_coverage_90) < 0.7


def test_zero_std_is_a_point_mass():
    scores = evaluate(gaussian_pred([0.0, 1.0], [0.0, 0.0]), truth_of([0.0, 3.0]))
    assert float(scores.t2m_crps) == pytest.approx(1.0)  # mean |err|
    assert np.isinf(float(scores.t2m_nll))
    assert float(scores.t2m_coverage_50) == pytest.approx(0.5)  # only the exact hit
    u = pit(gaussian_pred([0.0, 1.0], [0.0, 0.0]), truth_of([0.0, 3.0])).t2m_pit
    assert u.values.tolist() == [0.5, 1.0]


def test_missing_truth_is_skipped_not_propagated():
    pred = gaussian_pred([1.0, 2.0, 3.0], [1.0, 1.0, 1.0])
    scores = evaluate(pred, truth_of([1.0, np.nan, 5.0]))
    assert int(scores.t2m_n) == 2
    assert float(scores.t2m_rmse) == pytest.approx(np.sqrt(2.0))
    assert all(np.isfinite(float(scores[v])) for v in scores.data_vars)
    with pytest.raises(EmptyDataError, match="no point"):
        evaluate(pred, truth_of([np.nan, np.nan, np.nan]))


def test_kept_dims_give_per_slice_metrics():
    ds = station_dataset(n_stations=5, nt=6, seed=3)
    rng = np.random.default_rng(3)
    pred = xr.Dataset(
        {"t2m_mean": ds.t2m + rng.normal(size=ds.t2m.shape),
         "t2m_std": xr.ones_like(ds.t2m)},
    )  # fmt: skip
    truth = ds.copy()
    truth["t2m"] = truth.t2m.where(~((truth.station == "S001") & (truth.time > truth.time[2])))
    truth["t2m"] = truth.t2m.where(truth.station != "S004")
    per_station = evaluate(pred, truth, dim="time")
    assert per_station.t2m_rmse.dims == ("station",)
    assert per_station.t2m_n.values.tolist() == [6, 3, 6, 6, 0]
    assert np.isnan(per_station.t2m_rmse.sel(station="S004"))
    for s in ["S000", "S001"]:
        alone = evaluate(pred.sel(station=s), truth.sel(station=s))
        assert float(per_station.t2m_rmse.sel(station=s)) == pytest.approx(float(alone.t2m_rmse))
        assert float(per_station.t2m_crps.sel(station=s)) == pytest.approx(float(alone.t2m_crps))
    both = evaluate(pred, truth, dim=["time", "station"])
    assert both.t2m_rmse.dims == ()
    assert int(both.t2m_n) == 21
    with pytest.raises(DimensionError, match="cannot reduce"):
        evaluate(pred, truth, dim="lead_time")


def test_unmatched_points_warn_and_inputs_are_untouched():
    coords = {"station": ["a", "b", "c"]}
    pred = gaussian_pred([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], coords=coords)
    truth = truth_of([2.0, 3.0, 9.0], coords={"station": ["b", "c", "d"]})
    before = (pred.copy(deep=True), truth.copy(deep=True))
    with pytest.warns(UnmatchedPointsWarning, match="only 2 of the 3 predicted points"):
        scores = evaluate(pred, truth)
    assert int(scores.t2m_n) == 2
    assert float(scores.t2m_rmse) == 0.0
    xr.testing.assert_identical(pred, before[0])
    xr.testing.assert_identical(truth, before[1])
    with pytest.raises(CoordinateError, match="no 'station' coordinate value"):
        evaluate(pred, truth_of([1.0], coords={"station": ["z"]}))
    # truth beyond the prediction is simply not needed: no warning
    wide = truth_of([0.0, 2.0, 3.0, 4.0], coords={"station": ["z", "a", "b", "c"]})
    assert float(evaluate(pred, wide).t2m_rmse) == 1.0


def grid_pair(lat, lon, lat_truth, lon_truth, seed=0):
    """A Gaussian prediction on (lat, lon) and its exact truth on other coordinates.

    The truth's value at a point is the prediction's mean there, plus 1 where the
    truth's longitude (wrapped to [-180, 180)) is east of 0°, so that a wrong
    match shows in the scores.
    """
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(len(lat), len(lon)))
    pred = gaussian_pred(mean, np.ones_like(mean), dims=("lat", "lon"),
                         coords={"lat": lat, "lon": lon})  # fmt: skip
    values = xr.DataArray(mean, coords={"lat": lat, "lon": lon}, dims=("lat", "lon"))
    values = values + (values.lon > 0)
    wrapped = (np.asarray(lon_truth, float) + 180.0) % 360.0 - 180.0
    truth = values.sel(lat=np.asarray(lat_truth, float), lon=wrapped, method="nearest")
    truth = truth.assign_coords(lat=lat_truth, lon=lon_truth)
    return pred, truth.to_dataset(name="t2m").assign_attrs(units="K")


def test_float32_and_wrapped_longitudes_match_the_prediction():
    lat, lon = np.linspace(-60.0, 60.0, 7), np.arange(-180.0, 180.0, 22.5)
    pred, exact = grid_pair(lat, lon, lat, lon)
    reference = evaluate(pred, exact)
    assert int(reference.t2m_n) == 7 * 16
    # coordinates rounded to float32, as after a netCDF round trip
    pred32, truth32 = grid_pair(lat, lon, lat.astype(np.float32), lon.astype(np.float32))
    xr.testing.assert_identical(evaluate(pred32, truth32), reference)
    # the truth on 0…360 longitudes, sorted
    lon360 = np.sort(lon % 360.0)
    pred360, truth360 = grid_pair(lat, lon, lat, lon360)
    scores = evaluate(pred360, truth360)
    xr.testing.assert_identical(scores, reference)
    # ... and the other way round, per longitude (the scores keep the prediction's)
    per_lon = evaluate(truth360.rename(t2m="t2m_mean").assign(t2m_std=truth360.t2m * 0 + 1),
                       exact.rename(t2m="t2m"), dim="lat")  # fmt: skip
    np.testing.assert_array_equal(per_lon.lon.values, lon360)
    assert per_lon.t2m_n.values.tolist() == [7] * 16
    # a scalar latitude in float32 selects the truth's float64 latitude
    row = pred.isel(lat=2).assign_coords(lat=np.float32(lat[2]))
    one = evaluate(row, exact)
    assert int(one.t2m_n) == 16
    assert float(one.t2m_rmse) == float(evaluate(pred.isel(lat=2), exact.isel(lat=2)).t2m_rmse)


def test_latitude_longitude_dims_match_by_role_not_name():
    lat, lon = np.linspace(-60.0, 60.0, 7), np.arange(-180.0, 180.0, 22.5)
    pred, exact = grid_pair(lat, lon, lat, lon)
    reference = evaluate(pred, exact)
    # ERA5-style names and 0…360 longitudes on the truth; a prediction on lat/lon
    era5 = exact.assign_coords(lon=exact.lon % 360.0)
    era5 = era5.sortby("lon").rename(lat="latitude", lon="longitude")
    xr.testing.assert_identical(evaluate(pred, era5), reference)
    # one selected row (a scalar latitude) and a partial overlap, whose warning
    # describes the truth's coordinate under the prediction's name
    row = evaluate(pred.isel(lat=2), era5)
    assert float(row.t2m_rmse) == float(evaluate(pred.isel(lat=2), exact).t2m_rmse)
    with pytest.warns(UnmatchedPointsWarning, match=r"truth: 3 values, -60\.0 … -20\.0"):
        evaluate(pred, era5.isel(latitude=slice(0, 3)))
    # the other way round, recognised by CF attributes rather than names
    cf = pred.rename(lat="y", lon="x")
    cf.y.attrs["standard_name"], cf.x.attrs["units"] = "latitude", "degrees_east"
    scores = evaluate(cf, exact)
    assert int(scores.t2m_n) == 7 * 16
    assert float(scores.t2m_rmse) == float(reference.t2m_rmse)
    # a dimension that is not a latitude or longitude is not renamed
    with pytest.raises(DimensionError, match="must match"):
        evaluate(pred.rename(lat="row"), exact)


def test_points_without_truth_warn_and_no_match_raises():
    lat, lon = np.linspace(-60.0, 60.0, 7), np.arange(-180.0, 180.0, 22.5)
    pred, truth = grid_pair(lat, lon, lat, lon)
    with pytest.warns(XnpWarning, match=r"only 42 of the 112 predicted points") as record:
        scores = evaluate(pred, truth.isel(lat=[0, 1, 2], lon=slice(0, 14)))
    assert record[0].category is UnmatchedPointsWarning
    assert "4 of the 7 predicted lat" in str(record[0].message)
    assert "2 of the 16 predicted lon" in str(record[0].message)
    assert int(scores.t2m_n) == 42
    with pytest.warns(UnmatchedPointsWarning, match="only 56 of the 112"):
        per_lat = pit(pred, truth.isel(lat=slice(0, 4), lon=slice(0, 14)))
    assert per_lat.t2m_pit.shape == (4, 14)
    # a shift by half the grid spacing is not a rounding error
    shifted = truth.assign_coords(lon=truth.lon + 11.25)
    with pytest.raises(CoordinateError, match=r"no 'lon' coordinate value.*pred: 16 values"):
        evaluate(pred, shifted)
    # a shift beyond the tolerance (1e-5° + 1e-6 |x|) is not matched either
    nudged = truth.assign_coords(lon=truth.lon + np.where(truth.lon == 0.0, 1e-3, 1e-6))
    with pytest.warns(UnmatchedPointsWarning, match="1 of the 16 predicted lon"):
        assert int(evaluate(pred, nudged).t2m_n) == 7 * 15
    with pytest.raises(DimensionError, match="duplicate"):
        evaluate(pred, truth.isel(lat=[0, 0, 1]))


def test_units_must_agree():
    pred = gaussian_pred([280.0, 281.0], [1.0, 1.0])
    pred.t2m_mean.attrs["units"] = "K"
    celsius = truth_of([7.0, 8.0])
    celsius.t2m.attrs["units"] = "degC"
    with pytest.raises(IncompatibleUnitsError, match=r"t2m has units 'K' .* but 'degC'"):
        evaluate(pred, celsius)
    with pytest.raises(IncompatibleUnitsError, match="degC"):
        pit(pred, celsius.t2m)
    kelvin = truth_of([280.0, 281.0])
    assert float(evaluate(pred, kelvin.t2m.assign_attrs(units=" K ")).t2m_mae) == 0.0
    assert float(evaluate(pred, kelvin.t2m.assign_attrs(units="kelvin")).t2m_mae) == 0.0
    # units on one side only are not checked
    assert int(evaluate(gaussian_pred([7.0], [1.0]), celsius.isel(station=[0])).t2m_n) == 1


def test_the_documented_calls_resolve():
    guide = DOCS / "user-guide" / "evaluation.rst"
    if not guide.exists():
        pytest.skip("the docs are not part of this installation")
    code = "\n".join(
        block
        for block in re.findall(
            r"\.\. code-block:: python\n\n((?:   .*\n|\n)+)", guide.read_text()
        )
    )
    for line in code.splitlines():
        if line.strip().startswith(("import xnp", "from xnp")):
            exec(line.strip(), {})
    calls = re.findall(r"\bxnp((?:\.\w+)+)\(", code)
    assert calls, "the guide calls no xnp function"
    for call in calls:
        obj = xnp
        for attr in call.strip(".").split("."):
            assert hasattr(obj, attr), f"xnp{call} in {guide.name} does not exist"
            obj = getattr(obj, attr)


def test_a_scalar_time_selects_the_truth_at_that_time():
    ds = station_dataset(n_stations=4, nt=3)
    t = ds.time.values[1]
    pred = xr.Dataset(
        {"t2m_mean": ds.t2m.sel(time=t), "t2m_std": xr.ones_like(ds.t2m.sel(time=t))}
    )
    assert float(evaluate(pred, ds).t2m_rmse) == 0.0
    assert float(evaluate(pred, ds.t2m).t2m_mae) == 0.0  # a DataArray truth
    with pytest.raises(CoordinateError, match="no such time"):
        evaluate(pred.assign_coords(time=np.datetime64("2030-01-01", "ns")), ds)
    with pytest.raises(CoordinateError, match="different time"):
        evaluate(pred, ds.isel(time=0))


def test_forecasts_are_scored_at_their_valid_times_per_lead():
    ds = station_dataset(n_stations=6, nt=8, seed=4)
    fc = Persistence().predict(ds, lead_time=[6, 12])
    scores = evaluate(fc, ds, dim=["init_time", "station"])
    assert scores.t2m_rmse.dims == ("lead_time",)
    assert scores.t2m_n.values.tolist() == [7 * 6, 6 * 6]  # valid times past the data: unscored
    # by hand: lead 12 h = 2 steps, the persisted value is the init frame's
    y, x = ds.t2m.values[2:], ds.t2m.values[:-2]
    assert float(scores.t2m_rmse.sel(lead_time="12h")) == pytest.approx(
        np.sqrt(np.mean((y - x) ** 2))
    )
    # ERA5 from the CDS calls its time dimension valid_time
    renamed = evaluate(fc, ds.rename(time="valid_time"), dim=["init_time", "station"])
    xr.testing.assert_identical(renamed, scores)
    with pytest.raises(CoordinateError, match="no overlap"):
        evaluate(fc, ds.isel(time=[0]))
    with pytest.raises(DimensionError, match="duplicate"):  # an xnp error, not xarray's
        evaluate(fc, xr.concat([ds, ds.isel(time=[3])], "time"))


def test_variable_errors():
    pred = gaussian_pred([1.0], [1.0])
    with pytest.raises(VariableNotFoundError, match="both predicted and observed"):
        evaluate(pred, truth_of([1.0], name="u10"))
    with pytest.raises(VariableNotFoundError, match="the prediction has no 'u10'"):
        evaluate(pred, truth_of([1.0], name="u10"), variables="u10")
    with pytest.raises(VariableNotFoundError, match="the truth has no variable"):
        evaluate(pred.assign(u10_mean=pred.t2m_mean, u10_std=pred.t2m_std), truth_of([1.0]),
                 variables=["t2m", "u10"])  # fmt: skip
    with pytest.raises(ConfigError, match="must be the Dataset"):
        evaluate(pred.t2m_mean, truth_of([1.0]))
    two = pred.assign(u10_mean=pred.t2m_mean, u10_std=pred.t2m_std)
    with pytest.raises(ConfigError, match="no name"):
        evaluate(two, xr.DataArray([1.0], dims="station"))
    with pytest.raises(ConfigError, match="negative"):
        evaluate(gaussian_pred([1.0], [-1.0]), truth_of([1.0]))
    with pytest.raises(DimensionError, match="must match"):
        evaluate(pred, truth_of([[1.0]], dims=("station", "member")))


def test_several_variables_and_unnamed_truth():
    u10 = gaussian_pred([0.0, 0.0], [2.0, 2.0], name="u10")
    pred = gaussian_pred([1.0, 2.0], [1.0, 1.0]).merge(u10)
    truth = truth_of([1.0, 2.0]).merge(truth_of([1.0, -1.0], name="u10"))
    scores = evaluate(pred, truth)
    assert {"t2m_rmse", "u10_rmse"} <= set(scores.data_vars)
    assert float(scores.u10_mae) == 1.0
    assert scores.attrs["xnp_evaluated_variables"] == "t2m u10"
    one = evaluate(gaussian_pred([1.0], [1.0]), xr.DataArray([3.0], dims="station"))
    assert float(one.t2m_mae) == 2.0


def test_dask_inputs_give_a_lazy_result_equal_to_the_eager_one():
    ds = station_dataset(n_stations=8, nt=4, seed=5)
    pred = xr.Dataset({"t2m_mean": ds.t2m + 0.5, "t2m_std": xr.full_like(ds.t2m, 2.0)})
    eager = evaluate(pred, ds, dim="station")
    lazy = evaluate(pred.chunk({"time": 2}), ds.chunk({"time": 1}), dim="station")
    assert lazy.t2m_crps.chunks is not None
    xr.testing.assert_allclose(lazy.compute(), eager)
    assert pit(pred.chunk({"time": 2}), ds).t2m_pit.chunks is not None


def test_accessor_evaluates_against_the_object_as_truth():
    ds = station_dataset(n_stations=5, nt=3, seed=6)
    pred = xr.Dataset({"t2m_mean": ds.t2m - 1.0, "t2m_std": xr.ones_like(ds.t2m)})
    xr.testing.assert_identical(ds.np.evaluate(pred, dim="time"), evaluate(pred, ds, dim="time"))
    assert float(ds.t2m.np.evaluate(pred).t2m_mae) == pytest.approx(1.0)


def test_plot_calibration_draws_two_panels():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    rng = np.random.default_rng(7)
    pred = gaussian_pred(np.zeros(300), np.ones(300))
    truth = truth_of(rng.normal(size=300))
    hist_ax, rel_ax = plot_calibration(pred, truth, bins=5)
    assert hist_ax.figure is rel_ax.figure
    assert len(hist_ax.patches) >= 1
    assert len(rel_ax.lines) == 2  # curve + diagonal
    observed = rel_ax.lines[0].get_ydata()
    assert np.all(np.abs(observed - rel_ax.lines[0].get_xdata()) < 0.1)
    fig = Figure()
    axes = fig.subplots(1, 2)
    assert plot_calibration(pred, truth, ax=axes)[0] is axes[0]
    with pytest.raises(ConfigError, match="pair of Axes"):
        plot_calibration(pred, truth, ax=[axes[0]])


def test_times_are_kept_as_coordinates_of_per_time_scores():
    times = hourly_times(3)
    pred = gaussian_pred(np.zeros((3, 2)), np.ones((3, 2)), dims=("time", "station"),
                         coords={"time": times})  # fmt: skip
    truth = truth_of(np.ones((3, 2)), dims=("time", "station"), coords={"time": times})
    scores = evaluate(pred, truth, dim="station")
    np.testing.assert_array_equal(scores.time.values, times)
    assert scores.t2m_mae.values.tolist() == [1.0, 1.0, 1.0]

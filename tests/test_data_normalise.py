from __future__ import annotations

import json

import dask
import dask.array
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import grid_dataset, station_dataset

from xnp.data.normalise import Normaliser, Stats, check_same_units
from xnp.errors import ConfigError, EmptyDataError, IncompatibleUnitsError


@settings(max_examples=50, deadline=None)
@given(
    values=hnp.arrays(np.float64, (7, 2), elements=st.floats(-1e6, 1e6)),
    mean=st.floats(-1e4, 1e4),
    std=st.floats(1e-3, 1e4),
)
def test_normaliser_round_trips(values, mean, std):
    norm = Normaliser({"a": Stats(mean, std, "K"), "b": Stats(-mean, 2 * std, "m")})
    there = norm.transform(values, ["a", "b"])
    np.testing.assert_allclose(norm.inverse(there, ["a", "b"]), values, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(norm.inverse_std(np.ones((7, 2)), ["a", "b"])[0], [std, 2 * std])
    assert Normaliser.from_json(json.loads(json.dumps(norm.to_json()))) == norm


def test_fit_matches_numpy_and_includes_covariates():
    ds = grid_dataset(nan_fraction=0.2)
    ds["orog"] = (("lat", "lon"), np.arange(30.0).reshape(5, 6), {"units": "m"})
    norm = Normaliser.fit(ds, "t2m", ["elevation", "hour_of_day"])
    assert norm.stats["t2m"].mean == pytest.approx(np.nanmean(ds.t2m.values))
    assert norm.stats["t2m"].std == pytest.approx(np.nanstd(ds.t2m.values))
    assert norm.stats["t2m"].units == "K"
    assert norm.stats["elevation"].mean == pytest.approx(14.5)
    assert norm.stats["hour_of_day_sin"] == Stats(0.0, 1.0, "1")
    assert set(norm.names) == {"t2m", "elevation", "hour_of_day_sin", "hour_of_day_cos"}


def test_fit_reads_a_dask_dataset_in_one_pass():
    ds = grid_dataset(nt=8).chunk({"time": 2})
    reads = []

    def counting(block: np.ndarray) -> np.ndarray:
        if block.size:  # dask probes with empty blocks to infer metadata
            reads.append(block.shape)
        return block

    ds["t2m"] = ds.t2m.copy(data=dask.array.map_blocks(counting, ds.t2m.data, dtype=float))
    ds["u"] = ds.t2m * 2.0  # shares the reads of t2m
    with dask.config.set(scheduler="sync"):
        norm = Normaliser.fit(ds, ["t2m", "u"])
    assert len(reads) == 4  # each of the 4 chunks read once for all four statistics
    assert norm.stats["u"].mean == pytest.approx(2 * norm.stats["t2m"].mean)


def test_constant_field_gets_unit_std_and_all_missing_is_an_error():
    ds = station_dataset()
    ds["c"] = ds.t2m * 0 + 5.0
    assert Normaliser.fit(ds, "c").stats["c"].std == 1.0
    with pytest.raises(EmptyDataError, match="no finite"):
        Normaliser.fit(ds.assign(c=ds.c * np.nan), "c")


def test_unknown_channel_and_bad_json():
    norm = Normaliser({"a": Stats(0.0, 1.0)})
    with pytest.raises(ConfigError, match="known channels"):
        norm.transform(np.zeros((1, 1)), ["b"])
    with pytest.raises(ConfigError, match="format"):
        Normaliser.from_json({"stats": {}})
    with pytest.raises(ConfigError, match="Malformed"):
        Normaliser.from_json({"format": "xnp.normaliser/1", "stats": {"a": {"avg": 1}}})


def test_units_checks():
    norm = Normaliser({"t2m": Stats(280.0, 5.0, "K")})
    norm.check_units("t2m", "K")
    norm.check_units("t2m", None)
    with pytest.raises(IncompatibleUnitsError, match=r"'K'.*'degC'"):
        norm.check_units("t2m", "degC")
    check_same_units("t2m", "K", None, ("context", "targets"))
    with pytest.raises(IncompatibleUnitsError, match="context"):
        check_same_units("t2m", "K", "degC", ("context", "targets"))
    # spellings of one unit are the same unit; the hint fits the pair of units
    norm.check_units("t2m", "kelvin")
    check_same_units("u10", "m/s", "m s-1", ("context", "targets"))
    check_same_units("t2m", "degrees_Celsius", "degC", ("context", "targets"))
    with pytest.raises(IncompatibleUnitsError, match=r"ds\['t2m'\] - 273.15"):
        check_same_units("t2m", "kelvin", "celsius", ("context", "targets"))
    with pytest.raises(IncompatibleUnitsError) as err:
        check_same_units("sp", "Pa", "m", ("context", "targets"))
    assert "273.15" not in str(err.value)
    # ERA5's and CMIP's spellings of the same compound units
    for a, b in (("W m**-2", "W m-2"), ("kg m**-2 s**-1", "kg m-2 s-1"), ("kg/m2/s", "kg m-2 s-1"),
                 ("kg.m-2.s-1", "kg m^-2 s^-1"), ("deg C", "degC")):  # fmt: skip
        check_same_units("v", a, b, ("context", "targets"))
    with pytest.raises(IncompatibleUnitsError):
        check_same_units("v", "W m-2", "W m-1", ("context", "targets"))


def test_a_dataarray_and_one_covariate_name_as_a_string():
    ds = xr.Dataset(
        {"v": ("x", [1.0, 3.0, 5.0]), "sst": ("x", [10.0, 12.0, 14.0], {"units": "degC"})},
        coords={"lat": ("x", [0.0, 1, 2]), "lon": ("x", [0.0, 0, 0])},
    )
    # one covariate given as a string is one name, not its letters
    norm = Normaliser.fit(ds, "v", covariates="sst")
    assert set(norm.stats) == {"v", "sst"}
    # a DataArray, named or not, is its own (only) variable
    assert Normaliser.fit(ds.v, "v").stats["v"].mean == 3.0
    assert Normaliser.fit(ds.v.rename(None), "v").stats["v"].mean == 3.0
    # covariate units are checked like the variables'
    norm.check_covariate_units(ds, ["sst", "hour_of_day"], "context")
    with pytest.raises(IncompatibleUnitsError, match=r"sst.*'degC'.*'K'"):
        norm.check_covariate_units(ds.assign(sst=ds.sst.assign_attrs(units="K")), ["sst"])


def test_fit_does_not_modify_or_load_the_data():
    ds = grid_dataset().chunk({"time": 4})
    before = ds.copy()
    Normaliser.fit(ds, "t2m")
    xr.testing.assert_identical(ds, before)
    assert isinstance(ds.t2m.data, dask.array.Array)

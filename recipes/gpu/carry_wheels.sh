#!/usr/bin/env bash
# Download, here, the wheels that xnp needs and an offline GPU machine lacks.
#
# The project's GPU machines (see README, "xnp on a GPU") have JAX with CUDA, Flax,
# optax, NumPy, SciPy, xarray, pandas, matplotlib, tqdm, safetensors and pytest for
# Python 3.12, but no package index.  This fetches the rest for that Python and
# platform into .whl/ (git-ignored), to be carried there and installed without an
# index.  Pinned to the versions this project is tested with; --no-deps: every
# dependency that the image lacks is named here.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
WHEELS=(
  "dask==2026.8.0" "partd==1.4.2" "locket==1.0.0"
  "zarr==3.1.6" "numcodecs==0.16.6" "donfig==0.8.1.post1" "google-crc32c==1.9.0"
  "cf-xarray==0.11.3"
  "pyproj==3.7.2"
  "netCDF4==1.7.5.1.post1" "cftime==1.6.6.1"
)
rm -rf .whl && mkdir -p .whl
for spec in "${WHEELS[@]}"; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any -d .whl "$spec"
done
du -sh .whl

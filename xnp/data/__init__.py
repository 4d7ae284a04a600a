"""xarray ⇄ points: coordinates, covariates, normalisation, tasks, synthetic data."""

"""Plain-text tables of small results, as ``xnp evaluate`` prints its scores."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["format_table"]


def format_table(result: xr.Dataset, *, precision: int = 4) -> str:
    """A plain-text table of the (small) Dataset ``result``, e.g. evaluation scores.

    Scalars are listed one per line with their units; variables over dimensions are
    shown as tables indexed by those dimensions.

    Parameters
    ----------
    result : Dataset
        Small (computed) results, e.g. of :func:`xnp.evaluate`.
    precision : int
        Significant digits.

    Returns
    -------
    str

    Examples
    --------
    >>> import xarray as xr
    >>> scores = xr.Dataset(
    ...     {"rmse": ((), 1.23456, {"units": "K"}), "crps": ((), 0.5)},
    ... )
    >>> print(format_table(scores))
    rmse  1.235  K
    crps    0.5
    """
    lines: list[str] = []
    scalars = [n for n, v in result.data_vars.items() if v.ndim == 0]
    if scalars:
        rows = [
            (str(n), f"{float(result[n]):.{precision}g}", str(result[n].attrs.get("units", "")))
            for n in scalars
        ]
        width_n = max(len(r[0]) for r in rows)
        width_v = max(len(r[1]) for r in rows)
        lines += [f"{n:<{width_n}}  {v:>{width_v}}  {u}".rstrip() for n, v, u in rows]
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, var in result.data_vars.items():
        if var.ndim:
            groups.setdefault(tuple(map(str, var.dims)), []).append(str(name))
    for names in groups.values():
        if lines:
            lines.append("")
        frame = result[names].to_dataframe()[names]
        lines.append(frame.to_string(float_format=lambda x: f"{x:.{precision}g}"))
    return "\n".join(lines)

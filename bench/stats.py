"""Median and min-max of repeated measurements: the one place both summaries
(bench/summarize.py, bench/c/summarize.py) turn repetitions into a table cell."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable


def values(vals: Iterable[float | None]) -> list[float]:
    """The measured values (a repetition that lacks the figure contributes nothing)."""
    return [v for v in vals if v is not None]


def median(vals: Iterable[float | None]) -> float | None:
    vs = values(vals)
    return statistics.median(vs) if vs else None


def median_cell(vals: Iterable[float | None], fmt: Callable[[float], str] = "{:.1f}".format) -> str:
    """'median (min–max)', or just the value with one repetition, or 'n/a' with none."""
    vs = values(vals)
    if not vs:
        return "n/a"
    m = fmt(statistics.median(vs))
    if len(vs) == 1:
        return m
    return f"{m} ({fmt(min(vs))}–{fmt(max(vs))})"

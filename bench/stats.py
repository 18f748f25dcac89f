"""Median and min-max of repeated measurements: the one place the summaries (bench/summarize.py,
bench/c, bench/mpiio, bench/shards) turn repetitions into a table cell; and the one reader of
bench/seqbw.sh's line (the device's figures)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from pathlib import Path


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


def read_seqbw(path: str | Path) -> dict[str, str]:
    """bench/seqbw.sh's `key=value ...` line as a dict (empty when the file is missing or
    unreadable)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return {}
    return dict(tok.split("=", 1) for tok in text.split() if "=" in tok)


def seq_figure(seq: dict | None, key: str) -> float | None:
    """A figure of bench/seqbw.sh's line (None when absent or not a finite positive number:
    an older line has no dev_*, a failed measurement no number)."""
    try:
        v = float((seq or {})[key])
    except (KeyError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None

"""Turns `pdcx top --csv` output into an SVG line chart (standard library only).

The CSV has one row per server and tier per sample (one row per server with tier "log" when no
tiers are configured). Its columns:

  t_s                  seconds since `pdcx top` started (taken per server, so the servers of one
                       sample may differ by ~0.01 s)
  server, tier         server rank and tier name
  used_bytes           bytes of that server's tier in use
  capacity_bytes       the tier's capacity (empty: unlimited)
  put_bytes, get_bytes bytes written to / read from that tier since the server started
  put_MBps             put_bytes rate since the previous sample (ignored: recomputed here)
  log_bytes            the server's log size (data staged before the flusher moves it)
  cache_bytes          the server's data cache in use
  flush_pending_bytes  the flush queue: committed bytes not yet on their home tier
  flushed_bytes        bytes the flusher has copied to tiers since the server started

log_bytes .. flushed_bytes are per server and repeat on each of its tier rows: they are taken
once per server. Every series is summed over the servers of a sample. A new sample starts when
a (server, tier) pair repeats.

The chart has two panels on one time axis: usage in MiB (log, cache, flush queue, each tier's
used bytes) and throughput in MB/s (10^6 bytes/s, as in `pdcx top`): the flusher's rate from
the flushed_bytes counter and each tier's write rate from put_bytes. A rate at time t is the
counter's growth since the previous sample divided by the time between them; the first sample's
rate is 0. Time is in seconds from the first sample plotted (with --trim-idle, the last sample
before anything changed).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

REQUIRED = ("t_s", "server", "tier", "used_bytes", "log_bytes", "cache_bytes", "flush_pending_bytes", "flushed_bytes")
MIB = 1 << 20
MB = 1e6
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")


class InputError(Exception):
    """The CSV cannot be plotted; the message says why."""


@dataclass
class Series:
    name: str
    ys: list[float]
    dash: str = ""


@dataclass
class Usage:
    """Per-sample totals over all servers."""

    t: list[float] = field(default_factory=list)
    log: list[int] = field(default_factory=list)
    cache: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    flushed: list[int] = field(default_factory=list)
    tier_used: dict[str, list[int]] = field(default_factory=dict)
    tier_put: dict[str, list[int]] = field(default_factory=dict)


def _int(row: dict, col: str, line: int) -> int:
    v = (row.get(col) or "").strip()
    if v == "":
        return 0
    try:
        return int(float(v))
    except (ValueError, OverflowError):
        raise InputError(f"line {line}: column {col}: not a number: {v!r}") from None


def read_usage(path: Path) -> Usage:
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (expected the output of `pdcx top --csv`)") from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise InputError(f"{path}: empty file (expected the output of `pdcx top --csv`)")
    reader = csv.DictReader(lines)
    header = [c.strip() for c in reader.fieldnames or []]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)} (expected the output of `pdcx top --csv`; "
            f"header is: {','.join(header)})"
        )
    has_put = "put_bytes" in header
    reader.fieldnames = header
    rows = list(reader)
    # `pdcx top` killed in the middle of a line leaves a short last row: drop it.
    if rows and None in rows[-1].values():
        print(f"{path}: ignoring the incomplete last line", file=sys.stderr)
        rows.pop()
    samples: list[list[tuple[int, dict]]] = []
    seen: set[tuple[str, str]] = set()
    for i, row in enumerate(rows, start=2):
        if None in row.values() or None in row:
            raise InputError(f"line {i}: expected {len(header)} fields")
        key = (row["server"].strip(), row["tier"].strip())
        if not samples or key in seen:
            samples.append([])
            seen = set()
        seen.add(key)
        samples[-1].append((i, row))
    if not samples:
        raise InputError(f"{path}: no samples (only a header)")
    # The last sample may be cut short when `pdcx top` was stopped while printing it.
    if len(samples) > 1 and len(samples[-1]) < len(samples[-2]):
        samples.pop()
    tiers: list[str] = []
    for s in samples:
        for _, row in s:
            tier = row["tier"].strip()
            if tier != "log" and tier not in tiers:
                tiers.append(tier)
    u = Usage(tier_used={t: [] for t in tiers}, tier_put={t: [] for t in tiers} if has_put else {})
    for s in samples:
        line0, row0 = s[0]
        try:
            u.t.append(float(row0["t_s"]))
        except ValueError:
            raise InputError(f"line {line0}: column t_s: not a number: {row0['t_s']!r}") from None
        servers: set[str] = set()
        log = cache = pending = flushed = 0
        used = dict.fromkeys(tiers, 0)
        put = dict.fromkeys(tiers, 0)
        for line, row in s:
            srv, tier = row["server"].strip(), row["tier"].strip()
            if srv not in servers:
                servers.add(srv)
                log += _int(row, "log_bytes", line)
                cache += _int(row, "cache_bytes", line)
                pending += _int(row, "flush_pending_bytes", line)
                flushed += _int(row, "flushed_bytes", line)
            if tier != "log":
                used[tier] += _int(row, "used_bytes", line)
                if has_put:
                    put[tier] += _int(row, "put_bytes", line)
        u.log.append(log)
        u.cache.append(cache)
        u.pending.append(pending)
        u.flushed.append(flushed)
        for t in tiers:
            u.tier_used[t].append(used[t])
            if has_put:
                u.tier_put[t].append(put[t])
    return u


def trim_idle(u: Usage) -> Usage:
    """Drops the leading samples in which nothing changed (servers idle while the job starts),
    keeping the last of them so the chart starts from the idle state."""
    columns = [u.log, u.cache, u.pending, u.flushed, *u.tier_used.values(), *u.tier_put.values()]
    first = 0
    while first + 1 < len(u.t) and all(c[first + 1] == c[0] for c in columns):
        first += 1
    if first == 0:
        return u

    def cut(v: list) -> list:
        return v[first:]

    return Usage(
        t=cut(u.t),
        log=cut(u.log),
        cache=cut(u.cache),
        pending=cut(u.pending),
        flushed=cut(u.flushed),
        tier_used={k: cut(v) for k, v in u.tier_used.items()},
        tier_put={k: cut(v) for k, v in u.tier_put.items()},
    )


def rates(t: list[float], counter: list[int]) -> list[float]:
    """MB/s between consecutive samples, 0 at the first one; a counter that went back (server
    restart) counts as 0."""
    out = [0.0]
    for i in range(1, len(t)):
        dt = t[i] - t[i - 1]
        d = counter[i] - counter[i - 1]
        out.append(max(d, 0) / dt / MB if dt > 0 else 0.0)
    return out


def series(u: Usage) -> tuple[list[Series], list[Series]]:
    usage = [
        Series("log", [v / MIB for v in u.log]),
        Series("cache", [v / MIB for v in u.cache]),
        Series("flush queue (pending)", [v / MIB for v in u.pending], dash="6,3"),
    ]
    usage += [Series(f"tier {t}: used", [v / MIB for v in ys]) for t, ys in u.tier_used.items()]
    thr = [Series("flushed (all tiers)", rates(u.t, u.flushed))]
    thr += [Series(f"tier {t}: written", rates(u.t, ys), dash="4,2") for t, ys in u.tier_put.items()]
    return usage, thr


def nice_step(span: float, target: int = 5) -> float:
    """A 1, 2, 2.5 or 5 times a power of ten step giving about `target` ticks over `span`."""
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def ticks(hi: float, target: int = 5) -> tuple[list[float], float]:
    """Ticks from 0 to at least `hi`; returns (ticks, axis maximum)."""
    hi = hi if hi > 0 else 1.0
    step = nice_step(hi, target)
    n = math.ceil(hi / step - 1e-9)
    return [k * step for k in range(n + 1)], n * step


def fmt(v: float, step: float) -> str:
    """`v` with as many decimals as `step` needs (0.25 -> 2, 2.5 -> 1, 20 -> 0)."""
    decimals = 0
    while decimals < 6 and abs(step * 10**decimals - round(step * 10**decimals)) > 1e-6:
        decimals += 1
    return f"{v:.{decimals}f}"


def panel(
    out: list[str], x0: float, y0: float, w: float, h: float, t: list[float], xmax: float, ss: list[Series], ylabel: str
) -> None:
    """Draws one panel: plot area at (x0, y0) of size w x h, axes, ticks, lines and legend."""
    ymax_data = max((max(s.ys) for s in ss if s.ys), default=0.0)
    yt, ymax = ticks(ymax_data * 1.05)
    xt, _ = ticks(xmax, 7)
    xt = [v for v in xt if v <= xmax + 1e-9]

    def px(v: float) -> float:
        return x0 + w * v / xmax

    def py(v: float) -> float:
        return y0 + h - h * v / ymax

    out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#444"/>')
    ystep = yt[1] - yt[0] if len(yt) > 1 else 1.0
    for v in yt:
        y = py(v)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<line x1="{x0 - 4}" y1="{y:.1f}" x2="{x0}" y2="{y:.1f}" stroke="#444"/>')
        out.append(f'<text x="{x0 - 7}" y="{y + 4:.1f}" text-anchor="end">{fmt(v, ystep)}</text>')
    xstep = xt[1] - xt[0] if len(xt) > 1 else 1.0
    for v in xt:
        x = px(v)
        out.append(f'<line x1="{x:.1f}" y1="{y0 + h}" x2="{x:.1f}" y2="{y0 + h + 4}" stroke="#444"/>')
        out.append(f'<text x="{x:.1f}" y="{y0 + h + 18}" text-anchor="middle">{fmt(v, xstep)}</text>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 36}" text-anchor="middle">time (s)</text>')
    cy = y0 + h / 2
    out.append(
        f'<text x="{x0 - 52}" y="{cy}" text-anchor="middle" transform="rotate(-90 {x0 - 52} {cy})">'
        f"{escape(ylabel)}</text>"
    )
    for i, s in enumerate(ss):
        color = COLORS[i % len(COLORS)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(t, s.ys, strict=True))
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        out.append(
            f'<polyline class="series" points="{pts}" fill="none" stroke="{color}" stroke-width="1.8"{dash}>'
            f"<title>{escape(s.name)}</title></polyline>"
        )
        ly = y0 + 10 + 18 * i
        lx = x0 + w + 15
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 30}" y="{ly + 4}">{escape(s.name)}</text>')


def render(u: Usage, title: str) -> str:
    usage, thr = series(u)
    t = [v - u.t[0] for v in u.t]
    xmax = t[-1] if t[-1] > 0 else 1.0
    left, top, w, h, gap, legend = 75, 45, 560, 230, 75, 215
    width = left + w + legend
    height = top + 2 * h + gap + 50
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}"'
    heading = f'<text x="{left + w / 2}" y="24" text-anchor="middle" font-size="15" font-weight="bold">'
    out = [
        svg + ' font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        heading + f"{escape(title)}</text>",
    ]
    out.append('<g class="panel" id="usage">')
    panel(out, left, top, w, h, t, xmax, usage, "usage (MiB)")
    out.append("</g>")
    out.append('<g class="panel" id="throughput">')
    panel(out, left, top + h + gap, w, h, t, xmax, thr, "throughput (MB/s)")
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("csv", type=Path, metavar="IN.csv", help="output of `pdcx top --csv`")
    ap.add_argument("-o", "--output", type=Path, metavar="OUT.svg", help="SVG to write (default: IN with .svg)")
    ap.add_argument("--title", help="chart title (default: the input file name)")
    ap.add_argument(
        "--trim-idle",
        action="store_true",
        help="start the time axis at the last sample before the first change (skip the job's start-up)",
    )
    a = ap.parse_args(argv)
    out = a.output or a.csv.with_suffix(".svg")
    try:
        u = read_usage(a.csv)
        if a.trim_idle:
            u = trim_idle(u)
        svg = render(u, a.title or f"pdcx usage over time: {a.csv.name}")
    except InputError as e:
        print(f"plot_usage: {e}", file=sys.stderr)
        return 2
    out.write_text(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks that every named crash point was reached by a real kill in this CI run.

    scripts/crash_coverage.py LEDGER   fail unless LEDGER names every crash point
    scripts/crash_coverage.py --list   print the crash points (after the source check)

The names are the source's: every `point("...")` / `crash_point("...")` call under crates/*/src,
which must be exactly crates/fsio/src/crash.rs's POINTS (a point called but not listed, or listed
but never called, fails here). The ledger is the file PDCX_CRASH_LEDGER names: a process built
with the `crash-points` feature appends a point's name to it right before it SIGKILLs itself
there (crates/fsio/src/crash.rs), so a name in it means some test armed that point and the
process really died at it, not that a test merely mentions it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CALL = re.compile(r'\b(?:crash::point|crash_point)\(\s*"([^"]+)"\s*\)')


def listed() -> list[str]:
    src = (REPO / "crates/fsio/src/crash.rs").read_text()
    body = src.split("pub const POINTS", 1)[1].split("];", 1)[0]
    return re.findall(r'^\s*"([^"]+)",', body, flags=re.MULTILINE)


def called() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted(REPO.glob("crates/*/src/**/*.rs")):
        if path.name == "crash.rs" and path.parent.parent.name == "fsio":
            continue  # the definition and its doc examples
        for m in CALL.finditer(path.read_text()):
            out.setdefault(m.group(1), []).append(str(path.relative_to(REPO)))
    return out


def points() -> list[str]:
    names, calls = listed(), called()
    problems = [
        f"{n} is called ({', '.join(sorted(set(calls[n])))}) but not in POINTS" for n in calls if n not in names
    ]
    problems += [f"{n} is in POINTS but no source calls it" for n in names if n not in calls]
    if len(set(names)) != len(names):
        problems.append("POINTS lists a name twice")
    if problems:
        sys.exit("crash points: " + "; ".join(problems))
    return names


def main() -> int:
    if sys.argv[1:] == ["--list"]:
        print("\n".join(points()))
        return 0
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    names = points()
    ledger = Path(sys.argv[1])
    hit = set(ledger.read_text().split()) if ledger.exists() else set()
    missing = [n for n in names if n not in hit]
    if missing:
        print(
            f"crash points never reached by a kill in this run ({len(missing)} of {len(names)}): {', '.join(missing)}"
        )
        print(f"(ledger {ledger}: {', '.join(sorted(hit)) or 'empty or absent'})")
        return 1
    print(f"all {len(names)} crash points were reached by a real kill: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

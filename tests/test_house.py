"""The repository reads on its own: no file tracked by git cites a tracker issue, a work
session or a paper by number, or points at the shared directory beside the repository.
Papers are cited by title ("Proactive Data Containers", "Object sharding across storage
layers", "PDC-XF", "ParaLog", "Montage on PDC"); a change is described by what it does, a
benchmark run by its date. No servers."""

import re
import subprocess
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# What a newcomer cannot resolve from the repository alone. Matched against lower-cased text
# (case-insensitive, and much faster than re.IGNORECASE, which defeats the literal prefix).
PATTERNS = [
    ("tracker issue number", re.compile(r"\bissues? #?\d+")),
    ("session number", re.compile(r"\bsession \d+")),
    ("paper number", re.compile(r"\bpaper \d{3}")),
    ("path outside the repository", re.compile(r"\.\./shared")),
]
# Words one of them needs: most files hold none, and a substring search is far cheaper than
# running the patterns over every position of the file.
WORDS = ("issue", "session", "paper", "../" + "shared")


# Files allowed to hold such references (none). An entry fails the test once it has nothing
# left to excuse, so a stale entry cannot linger.
ALLOWLIST: list[str] = []


def offences(text: str) -> list[tuple[int, str, str]]:
    """(line number, what, the line) for every line of `text` that matches a pattern."""
    lower = text.lower()
    if not any(w in lower for w in WORDS):
        return []
    found = []
    for n, (line, low) in enumerate(zip(text.splitlines(), lower.splitlines()), 1):
        for what, pattern in PATTERNS:
            if pattern.search(low):
                found.append((n, what, line.strip()))
                break
    return found


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p]


def read_text(path: Path) -> str | None:
    """The file's text, or None for a binary file (or a tracked file the worktree lacks)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def test_the_patterns_catch_numbers_and_spare_look_alikes():
    # Built from pieces so that this file does not hold what it forbids.
    caught = [
        "see iss" + "ue 13 for the targets",
        "(Iss" + "ues #12)",
        "measured in sess" + "ion 10",
        "Pa" + "per 003 Table II",
        "the design in ../" + "shared/DESIGN.md",
    ]
    spared = [
        "strong 0.36 s -> 0.15 s, `session` 0.04 s",
        "session consistency: one wait_all",
        "issues one pread per run",
        "the issue's 4 GiB object",
        "ParaLog §8.7.1 and Montage on PDC §VI",
        "pdcx://work/mosaic.fits",
    ]
    for line in caught:
        assert offences(line), f"not caught: {line!r}"
    for line in spared:
        assert not offences(line), f"caught by mistake: {line!r}"
    assert [n for n, _, _ in offences("ok\n" + caught[0] + "\nok\n" + caught[3])] == [2, 4]


def test_no_tracked_file_cites_issues_sessions_or_papers_by_number():
    files = tracked_files()
    assert files, "git ls-files listed nothing"
    print("allowlisted, not scanned:", ", ".join(ALLOWLIST) or "(none)")
    if ALLOWLIST:
        warnings.warn(f"test_house: {len(ALLOWLIST)} file(s) allowlisted, not scanned: {', '.join(ALLOWLIST)}")
    bad = []
    excused = {p: 0 for p in ALLOWLIST}
    for rel in files:
        text = read_text(REPO / rel)
        if text is None:
            continue
        found = offences(text)
        if rel in excused:
            excused[rel] = len(found)
            continue
        bad.extend(f"{rel}:{n}: {what}: {line[:160]}" for n, what, line in found)
    stale = [p for p, n in excused.items() if n == 0]
    assert not bad, f"{len(bad)} line(s) cite issues, sessions or papers by number:\n" + "\n".join(bad)
    assert not stale, "allowlisted but clean now, remove from ALLOWLIST: " + ", ".join(stale)

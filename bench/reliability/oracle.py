"""The crash harness's oracle: the history of what was acknowledged, and the checks after a
recovery.

History: the JSON-lines journals the workload ranks (and the harness) append and fsync (see
workload.py). A write is *issued* when its "w" line is on disk (before the call), *acknowledged*
when its "ack" line is (after the call returned). Its *order point* `od` bounds when its place
in the object's write order was fixed: the acknowledgement for a strong write; for a relaxed
one the end of the first sync the rank completed after the acknowledgement (registration with
the owner orders relaxed writes, and a sync returns only after it); infinity when neither
happened (an unacknowledged write may still be applied, at any place in the order).

Write V *definitely follows* write X when V was issued after X's order point
(issue(V) > od(X)): then V's commit (strong) or registration (relaxed) came after X's. From that:

- **allowed values** of element e: the value of a write X that covers e, unless some
  acknowledged write V covering e definitely follows X; the fill value, unless some
  acknowledged write covers e. Otherwise the acknowledged write V is **lost** there (counted per
  V's durability; `memory` writes may be lost to a crash, `local` and `remote` never);
- **no torn regions**: if any element shows write W, no element of W's region shows the fill
  value or a write that W definitely follows (W was applied whole or not at all);
- **nothing never written**: every element is the fill value or the pattern of a write issued
  for this object at this element (the pattern encodes write id and element index);
- **tags**: each acknowledged tag put is there, or a later put of the same key; **creates**:
  every acknowledged object exists with its shape and tags.

Checks are vectorised with numpy: the cost is the total size of the history's writes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

try:
    from . import layout as L
except ImportError:  # run as a script from this directory
    import layout as L

INF = np.iinfo(np.int64).max
NEG = np.iinfo(np.int64).min
DURABLE = ("local", "remote")


@dataclass
class Write:
    wid: int
    obj: str
    off: list
    cnt: list
    dur: str
    cons: str
    srv: int
    rank: int
    issue: int
    ack: int | None = None
    od: int = INF

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.cnt)) * L.ITEM


@dataclass
class TagPut:
    obj: str
    key: str
    val: int
    issue: int
    acked: bool = False


@dataclass
class History:
    writes: dict[int, Write] = field(default_factory=dict)
    tags: list[TagPut] = field(default_factory=list)
    creates: dict[str, dict] = field(default_factory=dict)  # name -> {shape, tags, acked}
    events: list = field(default_factory=list)  # the harness's kills, clean stops and flushes
    syncs: int = 0
    errors: int = 0

    def memory_at_risk(self) -> set[int]:
        """The `memory` writes a kill may have lost: acknowledged, and their data server was
        killed before anything made them durable, i.e. before a `local`/`remote` commit on that
        server issued after their acknowledgement was itself acknowledged (a log commit covers
        every byte appended before it), a clean stop of the server, or a flush that began after
        their acknowledgement."""
        import bisect

        at_risk: set[int] = set()
        mem = [w for w in self.writes.values() if w.dur == "memory" and w.ack is not None]
        for s in {w.srv for w in mem}:
            guards = [(w.issue, w.ack) for w in self.writes.values() if w.srv == s and w.dur in DURABLE and w.ack]
            guards += [(e["t0"], e["t"]) for e in self.events if e["k"] == "flush"]
            guards += [(e["t0"], e["t"]) for e in self.events if e["k"] == "stop" and s in e["servers"]]
            guards.sort()
            starts = [g[0] for g in guards]
            suffix_min = [INF] * (len(guards) + 1)
            for i in range(len(guards) - 1, -1, -1):
                suffix_min[i] = min(guards[i][1], suffix_min[i + 1])
            kills = sorted(e["t"] for e in self.events if e["k"] == "kill" and s in e["servers"])
            for w in mem:
                if w.srv != s:
                    continue
                # From the issue, not the acknowledgement: the rank records its ack after the
                # call returned, possibly after the harness recorded a kill that came later.
                k = bisect.bisect_right(kills, w.issue)
                if k < len(kills) and kills[k] < suffix_min[bisect.bisect_right(starts, w.ack)]:
                    at_risk.add(w.wid)
        return at_risk

    def by_object(self) -> dict[str, list[Write]]:
        out: dict[str, list[Write]] = {}
        for w in self.writes.values():
            out.setdefault(w.obj, []).append(w)
        for ws in out.values():
            ws.sort(key=lambda w: (w.issue, w.wid))
        return out

    def acked_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for w in self.writes.values():
            if w.ack is not None:
                out[w.dur] = out.get(w.dur, 0) + w.nbytes
        return out


class JournalError(ValueError):
    """A journal with a malformed record before its last line: the history cannot be trusted."""


def read_jsonl(path: Path, key: str = "k") -> list[dict]:
    """The records of a journal. Only its last line may be incomplete (a writer killed, or still
    writing, mid-append: no newline after it yet), and that line is skipped; any other line that
    is not a JSON object raises JournalError, since skipping it could hide a write or an
    acknowledgement from the checks. (A rank's next process cuts its predecessor's torn line
    off before appending: workload.py.) Every record is an object with `key`."""
    lines = Path(path).read_text().split("\n")
    out = []
    for i, line in enumerate(lines):
        last = i == len(lines) - 1  # not followed by a newline
        if last and not line:
            break  # the file ends with a newline (or is empty)
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if last:
                break
            raise JournalError(f"{path}:{i + 1}: malformed record {line[:120]!r}: {e}") from None
        if not isinstance(rec, dict) or key not in rec:
            raise JournalError(f"{path}:{i + 1}: not a journal record: {line[:120]!r}")
        out.append(rec)
    return out


def load(run_dir: Path) -> History:
    h = History()
    jdir = Path(run_dir) / "journal"
    for path in sorted(jdir.glob("*.jsonl")):
        rank = int(path.stem.split("-")[1]) if path.stem.startswith("rank-") else -1
        pending_relaxed: list[Write] = []
        open_tags: dict[int, TagPut] = {}
        for r in read_jsonl(path):
            k = r["k"]
            if k == "w":
                h.writes[r["wid"]] = Write(
                    r["wid"], r["obj"], r["off"], r["cnt"], r["dur"], r["cons"], r.get("srv", -1), rank, r["t"]
                )
            elif k == "ack":
                for w in r["wids"]:
                    wr = h.writes[w]
                    wr.ack = r["t"]
                    if wr.cons == "strong":
                        wr.od = r["t"]
                    else:
                        pending_relaxed.append(wr)
            elif k == "sync":
                # Relaxed writes acknowledged before this sync began are registered when it ends.
                for wr in pending_relaxed:
                    if wr.ack is not None and wr.ack <= r["t0"]:
                        wr.od = r["t"]
                pending_relaxed = [wr for wr in pending_relaxed if wr.od == INF]
                h.syncs += 1
            elif k == "begin":
                pending_relaxed = []  # a new process: the old one's unsynced writes stay at INF
            elif k == "tag":
                tp = TagPut(r["obj"], r["key"], r["val"], r["t"])
                h.tags.append(tp)
                open_tags[r["val"]] = tp
            elif k == "tagged":
                open_tags[r["val"]].acked = True
            elif k == "create":
                h.creates[r["obj"]] = {"shape": r["shape"], "tags": r.get("tags", {}), "acked": False}
            elif k == "created":
                h.creates[r["obj"]]["acked"] = True
            elif k == "err":
                h.errors += 1
            elif k in ("kill", "stop", "flush"):
                h.events.append(r)
    return h


@dataclass
class Report:
    lost: dict = field(default_factory=dict)  # (durability, wid) -> elements lost
    torn: list = field(default_factory=list)  # (object, wid, elements)
    never_written: list = field(default_factory=list)  # (object, description)
    tag_problems: list = field(default_factory=list)
    create_problems: list = field(default_factory=list)
    read_errors: list = field(default_factory=list)  # reads of acknowledged data that failed
    at_risk: set = field(default_factory=set)  # memory writes a kill may have lost
    timing: dict = field(default_factory=dict)  # seconds spent reading and checking
    snapshot: dict = field(default_factory=dict)  # object -> (sha256 of data, tags)

    def lost_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for (dur, _), n in self.lost.items():
            out[dur] = out.get(dur, 0) + n * L.ITEM
        return out

    def failures(self) -> list[str]:
        """What breaks the promise (memory losses do not)."""
        out = []
        for (dur, w), n in sorted(self.lost.items()):
            if dur != "memory":
                out.append(f"acknowledged {dur} write {w:#x} lost at {n} elements")
            elif w not in self.at_risk:
                out.append(f"memory write {w:#x} lost at {n} elements after a later local commit on its server")
        out += [f"torn: {o} write {w:#x}: {n} elements from older writes or fill" for o, w, n in self.torn]
        out += [f"never written: {o}: {d}" for o, d in self.never_written]
        out += self.tag_problems + self.create_problems + self.read_errors
        return out


def check_array(name: str, arr: np.ndarray, writes: list[Write], rep: Report) -> None:
    """Checks one object's contents against its writes (sorted by issue)."""
    shape = arr.shape
    vals = arr.reshape(-1).astype(np.int64, copy=False)
    fill = vals == L.FILL
    wids = np.array([w.wid for w in writes], dtype=np.int64)
    order = np.argsort(wids, kind="stable")
    sorted_wids = wids[order]
    od = np.array([w.od for w in writes], dtype=np.int64)
    issue = np.array([w.issue for w in writes], dtype=np.int64)

    w_of = vals >> L.POS_BITS
    pos = np.searchsorted(sorted_wids, w_of)
    pos = np.minimum(pos, max(len(sorted_wids) - 1, 0))
    known = ~fill & (len(sorted_wids) > 0)
    if len(sorted_wids):
        known &= sorted_wids[pos] == w_of
    idx = np.where(known, order[pos] if len(order) else 0, -1)  # index into `writes`
    flat = np.arange(vals.size, dtype=np.int64)
    placed = (vals & L.POS_MASK) == (flat & L.POS_MASK)
    unknown = ~fill & ~known
    if unknown.any():
        e = int(np.flatnonzero(unknown)[0])
        rep.never_written.append((name, f"{int(unknown.sum())} elements of no write of it, first at {e}: {vals[e]:#x}"))
    misplaced = known & ~placed
    if misplaced.any():
        e = int(np.flatnonzero(misplaced)[0])
        rep.never_written.append((name, f"{int(misplaced.sum())} elements hold another place's data, first at {e}"))

    # Per element: the order point of the value it shows (fill: before everything).
    od_elem = np.full(vals.size, INF, dtype=np.int64)
    od_elem[fill] = NEG
    od_elem[known] = od[idx[known]]
    od_grid = od_elem.reshape(shape)

    # Latest acknowledged issue covering each element, per durability class, and which write.
    last = {d: (np.full(shape, NEG, dtype=np.int64), np.full(shape, -1, dtype=np.int64)) for d in ("durable", "memory")}
    for i, w in enumerate(writes):
        if w.ack is None:
            continue
        t, who = last["durable" if w.dur in DURABLE else "memory"]
        s = L.region_slices(w.off, w.cnt)
        t[s] = w.issue  # writes are sorted by issue, so this is the max
        who[s] = i
    t_d, who_d = last["durable"]
    t_m, who_m = last["memory"]
    lost_d = t_d > od_grid
    lost_m = ~lost_d & (t_m > od_grid)
    for mask, who in ((lost_d, who_d), (lost_m, who_m)):
        if mask.any():
            ws, counts = np.unique(who[mask], return_counts=True)
            for i, n in zip(ws, counts):
                w = writes[int(i)]
                key = (w.dur, w.wid)
                rep.lost[key] = max(rep.lost.get(key, 0), int(n))

    # Whole writes only: each write that shows anywhere shows everywhere it is not overwritten.
    present, counts = np.unique(idx[known], return_counts=True)
    idx_grid = idx.reshape(shape)
    for i, n in zip(present, counts):
        w = writes[int(i)]
        s = L.region_slices(w.off, w.cnt)
        inside = int(np.count_nonzero(idx_grid[s] == i))
        if inside != n:
            rep.never_written.append((name, f"write {w.wid:#x} shows at {n - inside} elements outside its region"))
        older = int(np.count_nonzero(od_grid[s] < issue[i]))
        if older:
            rep.torn.append((name, w.wid, older))


def check_tags(h: History, actual: dict[str, dict], rep: Report) -> None:
    keys: dict[tuple, list[TagPut]] = {}
    for tp in h.tags:
        keys.setdefault((tp.obj, tp.key), []).append(tp)
    for (obj, key), puts in keys.items():
        puts.sort(key=lambda p: p.issue)
        acked = [i for i, p in enumerate(puts) if p.acked]
        allowed = {p.val for p in puts[acked[-1] :]} if acked else {p.val for p in puts}
        have = actual.get(obj, {}).get(key)
        if have is None:
            if acked:
                rep.tag_problems.append(f"tag {obj}[{key}] = {puts[acked[-1]].val} acknowledged, now missing")
        elif have not in allowed:
            rep.tag_problems.append(f"tag {obj}[{key}] = {have!r}, allowed {sorted(allowed)}")


def check_creates(h: History, shapes: dict[str, list], actual_tags: dict[str, dict], rep: Report) -> None:
    for name, c in h.creates.items():
        if name not in shapes:
            if c["acked"]:
                rep.create_problems.append(f"object {name} was created (acknowledged), now missing")
            continue
        if list(shapes[name]) != list(c["shape"]):
            rep.create_problems.append(f"object {name} has shape {shapes[name]}, created as {c['shape']}")
        for k, v in c["tags"].items():
            if actual_tags.get(name, {}).get(k) != v:
                rep.create_problems.append(
                    f"object {name} tag {k}: {actual_tags.get(name, {}).get(k)!r}, created {v!r}"
                )
    for name in shapes:
        if name not in h.creates:
            rep.never_written.append((name, "an object nobody created"))


def read_all(o, errors: list, attempts: int = 4):
    """The whole object, or None. A failed read is an error even if a retry succeeds (a read
    of committed data must not fail); retries tell a transient failure from a lasting one."""
    import time

    import pdcx

    for i in range(attempts):
        try:
            arr = o[...]
        except pdcx.PdcxError as e:
            if i == 0:
                errors.append(f"read of {o.name} failed: {type(e).__name__}: {e}")
            time.sleep(0.5)
            continue
        if i:
            errors[-1] += f" (attempt {i + 1} succeeded)"
        return arr
    errors[-1] += f" ({attempts} attempts failed)"
    return None


def check(client, h: History) -> Report:
    """Reads every object of the deployment and checks it against the history."""
    import time

    t0 = time.monotonic()
    rep = Report(at_risk=h.memory_at_risk())
    by_obj = h.by_object()
    shapes, tags = {}, {}
    rep.timing = {"history": time.monotonic() - t0, "read": 0.0, "check": 0.0}
    for o in client.objects():
        t0 = time.monotonic()
        shapes[o.name] = list(o.shape)
        tags[o.name] = {k: v for k, v in o.tags.items()}
        arr = read_all(o, rep.read_errors)
        t1 = time.monotonic()
        rep.timing["read"] += t1 - t0
        if t1 - t0 > rep.timing.get("slowest_read", ("", 0))[1]:
            rep.timing["slowest_read"] = (o.name, round(t1 - t0, 2))
        if arr is None:
            rep.snapshot[o.name] = ("unreadable",)
            continue
        rep.snapshot[o.name] = (hashlib.sha256(arr.tobytes()).hexdigest(), sorted(tags[o.name].items(), key=str))
        check_array(o.name, arr, by_obj.get(o.name, []), rep)
        rep.timing["check"] += time.monotonic() - t1
    check_tags(h, tags, rep)
    check_creates(h, shapes, tags, rep)
    return rep


def snapshot(client) -> dict:
    """What check() records, without checking: for comparing two recoveries."""
    out, errors = {}, []
    for o in client.objects():
        arr = read_all(o, errors)
        if arr is None:
            out[o.name] = ("unreadable",)
            continue
        tags = {k: v for k, v in o.tags.items()}
        out[o.name] = (hashlib.sha256(arr.tobytes()).hexdigest(), sorted(tags.items(), key=str))
    return out

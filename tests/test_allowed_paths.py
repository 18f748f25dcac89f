"""Homes and files imported by reference that client requests name are held to what the
deployment's configuration allows (`access.homes`, `access.import_paths` in ROOT/pdcx.toml, or
PDCX_HOMES / PDCX_IMPORT_PATHS), checked on a real server: a seal (sent as the wire's
`StreamRequest::Seal`, as libpdcx_mpiio sends it) inside an allowed directory is copied there;
one outside, through a symlink pointing outside or through `..` is refused with a message naming
the setting, and nothing is written outside. With nothing listed, the deployment's user still
seals and imports anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pdcx
import pytest
from conftest import RESPONSE, RawConn, decode_error, run_pdcx, varint, wait_until

SEAL = b"\x05\x02"  # Request::Stream, StreamRequest::Seal
SEALED = b"\x05\x01"  # Response::Stream, StreamResponse::Sealed
COMMIT = b"\x02\x02"  # Request::Write, WriteRequest::Commit
COMMITTED = b"\x02\x03"  # Response::Write, WriteResponse::Committed
DATA = bytes(range(1, 65))


def byte_stream(c: pdcx.Client, name: str):
    """A byte stream (what `pdcx run` logs a file as) holding DATA."""
    o = c.create_container(f"{name}-c").create_object(
        name, shape=(len(DATA),), dtype="uint8", tags={"pdcx.kind": "bytestream"}
    )
    o[:] = np.frombuffer(DATA, dtype=np.uint8)
    return o


def call(dep, body: bytes, ok: bytes) -> tuple[str, str] | None:
    """Sends one request over a raw connection to rank 0; None when answered with `ok`, else
    the error (kind, message)."""
    raw = RawConn(dep.addr(0))
    try:
        raw.handshake(dep.secret())
        reply, _ = raw.call(body)
    finally:
        raw.close()
    if reply.startswith(ok):
        return None
    err = decode_error(reply, RESPONSE)
    assert err is not None, reply
    return err


def seal(dep, oid: int, home: str) -> tuple[str, str] | None:
    """`Seal` of object `oid` to `home` (as the process sealing a `pdcx run` file sends it)."""
    h = home.encode()
    return call(dep, SEAL + varint(oid) + varint(len(h)) + h + b"\x00", SEALED)


def commit_and_seal(dep, oid: int, home: str) -> tuple[str, str] | None:
    """`Commit` (of no writes) with a seal of `oid` to `home` in the same round trip, as a
    one-process `pdcx run` file is sealed."""
    h = home.encode()
    # CommitOpts: durability Local, consistency Strong, no checksums, seal: Some(SealAt).
    opts = varint(1) + varint(0) + varint(0) + varint(1) + varint(oid) + varint(len(h)) + h
    return call(dep, COMMIT + varint(0) + opts, COMMITTED)


def ref_item(path: Path) -> str:
    return json.dumps(
        [
            {
                "region": {"offset": [0], "count": [10]},
                "path": str(path),
                "offset": 0,
                "size": 80,
                "chunk": [10],
                "filters": [],
            }
        ]
    )


def everything_under(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def start_with_config(deployment, tmp_path, text: str):
    dep = deployment(n=1, root=tmp_path / "root", start=False)
    cfg = dep.root / "pdcx.toml"
    cfg.write_text(text)
    cfg.chmod(0o600)
    dep.start()
    return dep


def test_seals_are_held_to_the_listed_homes(deployment, tmp_path, monkeypatch):
    monkeypatch.setenv("PDCX_HOME_DEFER_MS", "0")
    home, outside = tmp_path / "home", tmp_path / "outside"
    home.mkdir()
    outside.mkdir()
    (home / "escape").symlink_to(outside)
    sibling = tmp_path / "home2"  # starts like the allowed directory, is not under it
    sibling.mkdir()
    dep = start_with_config(deployment, tmp_path, f"[access]\nhomes = [{json.dumps(str(home))}]\n")
    c = dep.client()
    o = byte_stream(c, "allowed/stream")
    for refused in [
        outside / "out.bin",
        sibling / "out.bin",
        home / "escape" / "out.bin",
        home / "escape" / "new" / "out.bin",
        Path(f"{home}/../outside/out.bin"),
        home,  # the directory itself is no file inside it
    ]:
        err = seal(dep, o.id, str(refused))
        assert err is not None, f"{refused} was sealed"
        kind, msg = err
        assert kind == "Auth", (refused, err)
        assert "outside the places `access.homes` allows" in msg, msg
        assert "`access.homes` in ROOT/pdcx.toml (or PDCX_HOMES)" in msg, msg
        assert str(home) in msg, msg
    # A commit that seals in the same round trip is held to them too.
    for refused in [outside / "out.bin", home / "escape" / "out.bin"]:
        kind, msg = commit_and_seal(dep, o.id, str(refused))
        assert kind == "Auth" and "`access.homes`" in msg, (refused, msg)
    # The symlink's message says where it leads.
    _, msg = seal(dep, o.id, str(home / "escape" / "out.bin"))
    assert f"resolved: {json.dumps(str(outside / 'out.bin'))}" in msg, msg

    inside = home / "runs" / "out.bin"
    assert seal(dep, o.id, str(inside)) is None
    wait_until(lambda: inside.exists() and inside.read_bytes() == DATA, 30, "the sealed version at its home")
    o[:4] = np.zeros(4, dtype=np.uint8)
    assert commit_and_seal(dep, o.id, str(inside)) is None
    want = bytes(4) + DATA[4:]
    wait_until(lambda: inside.read_bytes() == want, 30, "the version a commit sealed at its home")
    # The copier ran a pass after the refusals: nothing of them reached outside.
    assert everything_under(outside) == []
    assert everything_under(sibling) == []
    assert everything_under(home) == ["escape", "runs", "runs/out.bin"]


def test_imports_by_reference_are_held_to_the_listed_directories(deployment, tmp_path, monkeypatch):
    data = np.arange(10.0)
    allowed, outside = tmp_path / "in", tmp_path / "private"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "a.bin").write_bytes(data.tobytes())
    (outside / "secret.bin").write_bytes((data * 7).tobytes())
    (allowed / "link.bin").symlink_to(outside / "secret.bin")
    monkeypatch.setenv("PDCX_IMPORT_PATHS", str(allowed))
    dep = deployment(n=1)
    c = dep.client()
    o = c.create_container("refs").create_object("refs/x", shape=(10,), dtype="float64")
    for refused in [outside / "secret.bin", allowed / "link.bin", Path(f"{allowed}/../private/secret.bin")]:
        with pytest.raises(pdcx.AuthError) as e:
            c._c.import_refs(o.id, ref_item(refused))
        msg = str(e.value)
        assert "outside the places `access.import_paths` allows" in msg, msg
        assert "PDCX_IMPORT_PATHS" in msg, msg
    assert o.extents() == []
    c._c.import_refs(o.id, ref_item(allowed / "a.bin"))
    np.testing.assert_array_equal(o[:], data)


def test_with_nothing_listed_the_deployment_user_seals_and_imports_anywhere(deployment, tmp_path, monkeypatch):
    monkeypatch.setenv("PDCX_HOME_DEFER_MS", "0")
    monkeypatch.delenv("PDCX_HOMES", raising=False)
    monkeypatch.delenv("PDCX_IMPORT_PATHS", raising=False)
    dep = deployment(n=1)
    c = dep.client()
    o = byte_stream(c, "free/stream")
    target = tmp_path / "anywhere" / "deep" / "out.bin"
    assert seal(dep, o.id, str(target)) is None
    wait_until(lambda: target.exists() and target.read_bytes() == DATA, 30, "the sealed version at its home")
    src = tmp_path / "elsewhere.bin"
    src.write_bytes(np.arange(10.0).tobytes())
    r = c.create_container("free-refs").create_object("free-refs/x", shape=(10,), dtype="float64")
    c._c.import_refs(r.id, ref_item(src))
    np.testing.assert_array_equal(r[:], np.arange(10.0))


@pytest.mark.parametrize(
    "env,config,key",
    [
        ({"PDCX_HOMES": "relative/dir"}, "", "PDCX_HOMES"),
        ({"PDCX_IMPORT_PATHS": "/data,s3://bkt"}, "", "PDCX_IMPORT_PATHS"),
        ({}, "[access]\nhomes = ['/data/../etc']\n", "access.homes"),
    ],
)
def test_a_malformed_list_keeps_the_server_from_starting(deployment, tmp_path, monkeypatch, env, config, key):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    dep = deployment(n=1, root=tmp_path / "root", start=False)
    if config:
        (dep.root / "pdcx.toml").write_text(config)
        (dep.root / "pdcx.toml").chmod(0o600)
    p = run_pdcx("server", "start", "-n", 1, "--root", dep.root, check=False, timeout=90)
    assert p.returncode != 0, p.stdout
    out = p.stdout + p.stderr + dep.server_log(0)
    assert key in out and "expected absolute directories" in out, out

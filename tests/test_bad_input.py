"""Bad requests, hostile bytes on the wire and a full disk. After every case the server must
still serve a fresh client (checked by `assert_serving`), and the data must be unchanged."""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess

import numpy as np
import pdcx
import pytest
from conftest import (
    CHALLENGE,
    HELLO,
    PEER_REQUEST,
    REQ,
    REQUEST,
    RESP_COMMITTED,
    RESP_DATA,
    RESP_STAGED,
    RESP_WELCOME,
    RESPONSE,
    VERSION,
    WELCOME,
    RawConn,
    decode_error,
    enc_commit,
    enc_hello,
    enc_read,
    enc_region,
    enc_stage,
    header,
    hello_tag,
    varint,
)

CANARY = np.arange(1000, dtype="<i4")


@pytest.fixture
def dep(deployment):
    """A 1-server deployment (all raw traffic goes to the one server) with a canary object."""
    d = deployment(n=1)
    obj = d.client().create_container("bad").create_object("bad/canary", (1000,), "int32", fill=-1)
    obj[...] = CANARY
    return d


def assert_serving(d) -> None:
    """A brand-new client (fresh connections) reads the canary intact and can write."""
    c = pdcx.connect(d.root)
    assert [s["rank"] for s in c.stats()] == list(range(d.n))
    canary = c.open_object("bad/canary")
    assert canary[...].tobytes() == CANARY.tobytes()
    probe = c.open_container("bad").create_object(f"bad/probe-{os.urandom(6).hex()}", (3,), "int8")
    probe[...] = [1, 2, 3]
    assert probe[...].tolist() == [1, 2, 3]
    raw = authed(d)
    body, _ = raw.call(REQ["Ping"])
    assert body.startswith(RESP_WELCOME)
    raw.close()


def authed(d) -> RawConn:
    raw = RawConn(d.addr(0))
    assert raw.handshake(d.secret()) == (0, d.n)
    return raw


def expect_error_and_close(raw: RawConn, *words: str) -> tuple[str, str]:
    """An error reply, then the server closes: a `Response::Error` after the handshake, a
    refusing `Welcome` during it."""
    kind, _, body, _ = raw.recv_frame()
    assert kind in (RESPONSE, WELCOME)
    err = decode_error(body, kind)
    assert err is not None, f"expected an error reply, got {body[:40]!r}"
    for w in words:
        assert w in err[1].lower(), err
    assert raw.closed_by_peer(), "the server should close the connection"
    raw.close()
    return err


def test_cluster_file_and_secret_are_private(dep):
    for name in ("cluster.json", "secret"):
        mode = stat.S_IMODE(os.stat(dep.root / name).st_mode)
        assert mode == 0o600, f"{name} has mode {mode:o}"
    assert bytes.fromhex((dep.root / "secret").read_text().strip()) == dep.secret()


def test_region_out_of_bounds(dep):
    c = dep.client()
    obj = c.open_object("bad/canary")
    native = c._c  # the raw calls skip the Python layer's own index checks
    buf = np.zeros(10, "<i4")
    with pytest.raises(pdcx.OutOfBoundsError):
        native.write(obj.id, [995], [10], memoryview(buf.view(np.uint8)), "local")
    with pytest.raises(pdcx.OutOfBoundsError):
        native.read_into(obj.id, [1000], [1], memoryview(np.zeros(4, np.uint8)))
    with pytest.raises(pdcx.OutOfBoundsError):
        native.read_into(obj.id, [0, 0], [1, 1], memoryview(np.zeros(4, np.uint8)))
    with pytest.raises(pdcx.OutOfBoundsError):
        native.write(obj.id, [2**64 - 5], [3], memoryview(np.zeros(12, np.uint8)), "local")
    with pytest.raises(pdcx.InvalidArgumentError):
        native.write(obj.id, [2**63], [2**63], memoryview(np.zeros(12, np.uint8)), "local")
    with pytest.raises(pdcx.OutOfBoundsError):
        obj.read_async(offset=(990,), shape=(20,))
    with pytest.raises(pdcx.OutOfBoundsError):
        obj.write_async(np.zeros(20, "<i4"), offset=(990,))
    with pytest.raises(IndexError):
        obj[1000] = 1
    forged = pdcx.Object(c, {**obj._meta, "dims": [2000]})  # stale/forged metadata
    with pytest.raises(pdcx.OutOfBoundsError):
        forged[990:1010] = 5
    with pytest.raises(pdcx.OutOfBoundsError):
        forged[1500]
    assert_serving(dep)


def test_dtype_and_size_mismatch(dep):
    c = dep.client()
    obj = c.open_object("bad/canary")
    with pytest.raises(pdcx.DtypeMismatchError):
        c._c.write(obj.id, [0], [10], memoryview(np.zeros(39, np.uint8)), "local")
    with pytest.raises(pdcx.DtypeMismatchError):
        obj.transfer("w", np.zeros(10, "<i4"), shape=(9,)).start()
    with pytest.raises(pdcx.DtypeMismatchError):
        c._c.create_object("bad/fill", [4], "int32", ["bad"], [], b"\x00\x01")
    with pytest.raises(pdcx.InvalidArgumentError):
        c.open_container("bad").create_object("bad/complex", (4,), np.complex64)
    with pytest.raises(pdcx.InvalidArgumentError):
        c.open_container("bad").create_object("bad/zero-dims", (), "int8")
    with pytest.raises(pdcx.InvalidArgumentError):
        c.open_container("bad").create_object("bad/nine-dims", (1,) * 9, "int8")
    with pytest.raises(pdcx.InvalidArgumentError):
        c.open_container("bad").create_object("bad/huge", (2**40, 2**40), "int8")
    with pytest.raises(pdcx.InvalidArgumentError):
        obj.write_async(np.zeros(4, "<i4"), durability="remote").wait()
    with pytest.raises(ValueError):
        obj[0:10] = np.zeros(11)
    with pytest.raises(pdcx.InvalidArgumentError):
        c.query("k=bytes:a\u00e91", "x<y")  # non-ASCII after bytes: must not panic
    assert c.query("k=bytes:a\u00e91") == []
    assert_serving(dep)


def test_unknown_objects_containers_and_duplicates(dep):
    c = dep.client()
    obj = c.open_object("bad/canary")
    with pytest.raises(pdcx.NotFoundError):
        c.open_object("bad/none")
    with pytest.raises(pdcx.NotFoundError):
        c._c.get_object(obj.id + 12345)
    # An id whose home is beyond the server count routes to its home modulo the count (ids
    # stay valid across a resize), where no such object is.
    with pytest.raises(pdcx.NotFoundError, match="no object with id 0x7000000000001"):
        c._c.get_object((7 << 48) | 1)
    with pytest.raises(pdcx.NotFoundError):
        c._c.write(obj.id + 1, [0], [1], memoryview(np.zeros(4, np.uint8)), "local")
    with pytest.raises(pdcx.NotFoundError):
        c._c.read_into(obj.id + 1, [0], [1], memoryview(np.zeros(4, np.uint8)))
    with pytest.raises(pdcx.NotFoundError):
        c._c.set_dims(obj.id + 1, [5])
    with pytest.raises(pdcx.NotFoundError):
        c._c.put_object_tags(obj.id + 1, [("a", 1)])
    with pytest.raises(pdcx.NotFoundError):
        c._c.put_container_tags("none", [("a", 1)])
    with pytest.raises(pdcx.NotFoundError):
        c._c.create_object("bad/orphan", [4], "int8", ["none"], [], None)
    with pytest.raises(pdcx.NotFoundError):
        c._c.add_to_container(obj.id, "none")
    with pytest.raises(pdcx.NotFoundError):
        c.open_container("none")
    with pytest.raises(pdcx.AlreadyExistsError):
        c.create_container("bad")
    with pytest.raises(pdcx.AlreadyExistsError):
        c.open_container("bad").create_object("bad/canary", (1,), "int8")
    with pytest.raises(pdcx.InvalidArgumentError):
        c.create_container("")
    with pytest.raises(pdcx.InvalidArgumentError):
        c.open_container("bad").create_object("bad/\n", (1,), "int8")
    assert obj.metadata["dims"] == [1000]
    assert_serving(dep)


def test_malformed_bodies_get_an_error_reply_and_the_connection_goes_on(dep):
    raw = authed(dep)
    for garbage in (b"\xff" * 16, b"", varint(200), REQ["Stage"] + b"\xfd" + b"\xff" * 8):
        body, _ = raw.call(garbage)
        err = decode_error(body)
        assert err and err[0] == "Protocol" and "malformed" in err[1], err
    # with a payload attached: the payload is skipped, the framing survives
    raw.send_frame(REQUEST, b"\x00\xff\xff\xff", payload=b"x" * 5000, request_id=9)
    _, rid, body, _ = raw.recv_frame()
    assert rid == 9 and decode_error(body)[0] == "Protocol"
    body, _ = raw.call(REQ["Ping"], payload=b"unexpected")
    assert decode_error(body) == ("Protocol", "this request takes no payload")
    body, _ = raw.call(REQ["Ping"])
    assert body.startswith(RESP_WELCOME)
    # a frame of the wrong kind after the handshake ends the connection
    raw.send_frame(CHALLENGE, b"", request_id=3)
    expect_error_and_close(raw, "expected a request")
    assert_serving(dep)


def test_truncated_frames_then_close(dep):
    for cut in (1, 20, 31):
        raw = authed(dep)
        raw.send(header(REQUEST, 10)[:cut])
        raw.close()
    raw = authed(dep)
    raw.send(header(REQUEST, 100) + b"\x00" * 10)
    raw.close()
    raw = RawConn(dep.addr(0))  # truncated during the handshake
    raw.recv_frame()
    raw.send(header(HELLO, 32)[:12])
    raw.close()
    assert_serving(dep)


def test_wrong_protocol_version_is_refused_with_a_reason(dep):
    raw = authed(dep)
    raw.send_frame(REQUEST, REQ["Ping"], version=VERSION + 1)
    expect_error_and_close(raw, "version", f"speaks pdcx protocol {VERSION + 1}, this one {VERSION}")
    # During the handshake (what a client of another release sends): both versions, and what to do.
    raw = RawConn(dep.addr(0))
    kind, _, _, _ = raw.recv_frame()
    assert kind == CHALLENGE
    raw.send_frame(HELLO, b"", version=1)
    expect_error_and_close(raw, f"speaks pdcx protocol {VERSION}, the connecting side 1", "upgrade")
    assert_serving(dep)


def test_server_to_server_requests_are_refused_on_a_client_connection(dep):
    obj = dep.client().open_object("bad/canary")
    raw = authed(dep)
    # PeerRequest::Register{items: [{id, region: whole, token: None}]}: would add a region to
    # the owner's map.
    register = varint(2) + varint(1) + varint(obj.id) + enc_region([0], [1000]) + varint(0)
    raw.send_frame(PEER_REQUEST, register, request_id=5)
    kind, rid, body, _ = raw.recv_frame()
    assert (kind, rid) == (RESPONSE, 5)
    err = decode_error(body)
    assert err and err[0] == "Auth" and "`Register` is a server-to-server request" in err[1], err
    body, _ = raw.call(REQ["Ping"])
    assert body.startswith(RESP_WELCOME)
    raw.close()
    assert len(dep.client().open_object("bad/canary").extents()) == 1, "nothing was registered"
    # A server's handshake (peer role) for a rank the deployment does not have is refused.
    raw = RawConn(dep.addr(0))
    _, _, nonce, _ = raw.recv_frame()
    raw.send_frame(HELLO, enc_hello(dep.secret(), nonce, raw.binding(), peer_rank=dep.n), request_id=0)
    assert expect_error_and_close(raw, "not part of this deployment")[0] == "Auth"
    assert_serving(dep)


def test_bad_magic_is_refused(dep):
    raw = authed(dep)
    raw.send_frame(REQUEST, REQ["Ping"], magic=b"HTTP")
    expect_error_and_close(raw, "magic")
    raw = RawConn(dep.addr(0))
    raw.recv_frame()
    raw.send(b"GET / HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n")
    expect_error_and_close(raw, "magic")
    assert_serving(dep)


def test_authentication_is_required(dep, tmp_path):
    import hashlib
    import hmac

    # wrong secret
    raw = RawConn(dep.addr(0))
    _, _, nonce, _ = raw.recv_frame()
    raw.send_frame(HELLO, enc_hello(b"not the secret", nonce, raw.binding()), request_id=0)
    assert expect_error_and_close(raw, "authentication")[0] == "Auth"
    # right secret, wrong nonce (a replayed answer)
    raw = RawConn(dep.addr(0))
    raw.recv_frame()
    raw.send_frame(HELLO, enc_hello(dep.secret(), b"\x00" * 32, raw.binding()), request_id=0)
    assert expect_error_and_close(raw, "authentication")[0] == "Auth"
    # truncated tag
    raw = RawConn(dep.addr(0))
    _, _, nonce, _ = raw.recv_frame()
    full = hello_tag(dep.secret(), nonce, raw.binding())
    raw.send_frame(HELLO, enc_hello(dep.secret(), nonce, raw.binding(), tag=full[:31]), request_id=0)
    assert expect_error_and_close(raw)[0] == "Auth"
    # the old answer (a bare HMAC of the nonce) is not a Hello
    raw = RawConn(dep.addr(0))
    _, _, nonce, _ = raw.recv_frame()
    raw.send_frame(HELLO, hmac.new(dep.secret(), nonce, hashlib.sha256).digest(), request_id=0)
    assert expect_error_and_close(raw, "authentication")[0] == "Auth"
    # a client's proof relabelled as a server's (peer) proof
    raw = RawConn(dep.addr(0))
    _, _, nonce, _ = raw.recv_frame()
    client_tag = hello_tag(dep.secret(), nonce, raw.binding())
    raw.send_frame(HELLO, enc_hello(dep.secret(), nonce, raw.binding(), peer_rank=0, tag=client_tag), request_id=0)
    assert expect_error_and_close(raw, "authentication")[0] == "Auth"
    # no auth at all: straight to a request
    raw = RawConn(dep.addr(0))
    raw.recv_frame()
    raw.send_frame(REQUEST, REQ["Stats"])
    assert expect_error_and_close(raw, "authentication")[0] == "Auth"
    # the client library with a forged cluster file
    fake = tmp_path / "fake"
    fake.mkdir()
    cf = dep.cluster()
    cf["secret"] = "ab" * 32
    (fake / "cluster.json").write_text(json.dumps(cf))
    with pytest.raises(pdcx.AuthError):
        pdcx.connect(fake)
    assert_serving(dep)


def test_oversized_claims_are_refused_without_reading_them(dep):
    raw = authed(dep)
    raw.send(header(REQUEST, len(REQ["Ping"]), payload_len=1 << 40) + REQ["Ping"])
    expect_error_and_close(raw, "payload", "exceeds")
    raw = authed(dep)
    raw.send(header(REQUEST, (64 << 20) + 1))
    expect_error_and_close(raw, "body", "exceeds")
    raw = RawConn(dep.addr(0))
    raw.recv_frame()
    raw.send(header(HELLO, 32, request_id=0, payload_len=1 << 20))
    expect_error_and_close(raw, "payload")
    # before authenticating, a peer may not make the server buffer more than a handshake needs
    raw = RawConn(dep.addr(0))
    raw.recv_frame()
    raw.send(header(HELLO, 1 << 20, request_id=0))
    expect_error_and_close(raw, "body", "exceeds")
    # a Stage whose items claim more than the frame carries
    obj = dep.client().open_object("bad/canary")
    raw = authed(dep)
    body, _ = raw.call(enc_stage([(1, obj.id, [0], [10], 1 << 30)]), payload=b"\x00" * 40)
    assert decode_error(body)[0] == "Protocol"
    body, _ = raw.call(REQ["Ping"])
    assert body.startswith(RESP_WELCOME)
    raw.close()
    assert_serving(dep)


def test_client_vanishing_mid_transfer_changes_nothing(dep):
    obj = dep.client().open_object("bad/canary")
    # 1. A Stage frame claiming 1 MiB, only 100 KiB sent, then the socket closes.
    big = dep.client().open_container("bad").create_object("bad/big", (1 << 18,), "int32", fill=7)
    raw = authed(dep)
    body = enc_stage([(11, big.id, [0], [1 << 18], 1 << 20)])
    raw.send(header(REQUEST, len(body), 5, 1 << 20) + body + b"\x01" * (100 << 10))
    raw.close()
    # 2. A complete Stage, then the socket closes before the Commit.
    raw = authed(dep)
    body, _ = raw.call(enc_stage([(12, obj.id, [0], [10], 40)]), payload=b"\xee" * 40)
    assert body.startswith(RESP_STAGED), decode_error(body)
    raw.close()
    # 3. Staged on one connection, committed from another: refused.
    raw = authed(dep)
    body, _ = raw.call(enc_stage([(13, obj.id, [0], [10], 40)]), payload=b"\xee" * 40)
    assert body.startswith(RESP_STAGED)
    other = authed(dep)
    body, _ = other.call(enc_commit([13]))
    assert decode_error(body)[0] == "NotFound"
    body, _ = other.call(enc_commit([999]))
    assert decode_error(body)[0] == "NotFound"
    other.close()
    raw.close()
    assert (big[...] == 7).all()
    assert_serving(dep)
    # The raw path itself works: stage + commit on one connection, then read it back raw.
    raw = authed(dep)
    data = struct.pack("<10i", *range(100, 110))
    body, _ = raw.call(enc_stage([(14, obj.id, [0], [10], 40)]), payload=data)
    assert body.startswith(RESP_STAGED)
    body, _ = raw.call(enc_commit([14]))
    assert body.startswith(RESP_COMMITTED), decode_error(body)
    body, payload = raw.call(enc_read(obj.id, [0], [12]))
    assert body.startswith(RESP_DATA) and payload == data + struct.pack("<2i", 10, 11)
    raw.close()
    assert obj[:12].tolist() == list(range(100, 110)) + [10, 11]


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip() or p.returncode}")
    yield mnt
    if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30, check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30, check=False)


def test_full_disk_gives_nospace_and_loses_nothing(small_tmpfs, deployment):
    """Fill an 8 MiB tmpfs holding the whole root: writes fail with NoSpaceError, everything
    written before reads back intact, the server keeps answering, and (deleting nothing) a
    restart recovers the same state."""
    d = deployment(n=1, root=small_tmpfs / "root")
    try:
        c = d.client()
        cont = c.create_container("full", tags={"k": "v"})
        row = 256 << 10
        obj = cont.create_object("full/x", (64, row), "uint8")
        written = 0
        with pytest.raises(pdcx.NoSpaceError):
            for i in range(64):
                obj[i] = (i % 250) + 1
                written += 1
        assert 5 <= written < 40, written
        rows = np.arange(written) % 250 + 1

        def intact(o) -> None:
            got = o[:written]
            assert (got == rows[:, None]).all(), "data written before the disk filled must survive"
            assert not o[written:].any(), "the failed writes must leave nothing behind"

        intact(obj)
        with pytest.raises(pdcx.NoSpaceError):  # still full, still the same clear error
            obj[written] = 99
        t = obj.write_async(np.full((1, row), 99, np.uint8), offset=(written, 0))
        with pytest.raises(pdcx.NoSpaceError):
            t.wait()
        assert t.status() == "failed"
        assert [s["rank"] for s in c.stats()] == [0]
        assert c.open_container("full").tags["k"] == "v"
        assert c.query(k="v") == [] and [o.name for o in c.objects()] == ["full/x"]
        intact(c.open_object("full/x"))

        d.restart()
        c2 = d.client()
        intact(c2.open_object("full/x"))
        assert dict(c2.open_container("full").tags) == {"k": "v"}
        with pytest.raises(pdcx.NoSpaceError):
            c2.open_object("full/x")[written] = 99
        intact(c2.open_object("full/x"))
    finally:
        d.cleanup()  # before the tmpfs is unmounted

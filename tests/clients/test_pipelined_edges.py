"""Requests pipelined into the edges of a connection's life: behind a ConnectRequest that
is refused, behind closeSession, behind an error that closes the connection, an auth packet
right behind the ConnectRequest, and a burst of requests whose replies the client does not
read. Each must get ZooKeeper's answer (or none) in order, and the server keeps serving
everyone else with bounded memory."""

import os
import struct
import time

import pytest

import rawzk
from rawzk import Writer

from test_bad_input import still_serving


def raw_frames(*payloads):
    return b"".join(rawzk.frame(p) for p in payloads)


def request(xid, op, body=b""):
    return struct.pack(">ii", xid, op) + body


def open_raw(server):
    return rawzk.RawConn(server.hostport, handshake=False, io_timeout=5)


def test_refused_session_with_requests_behind_it(server):
    """A ConnectRequest for an unknown session, with a sync and a create right behind it:
    the only answer is the expired ConnectResponse (timeout 0), then the connection
    closes, nothing behind it runs, and the server keeps serving."""
    c = open_raw(server)
    c.sock.sendall(raw_frames(
        rawzk.encode_connect(session_id=0x1234_5678_9abc, timeout=10000),
        request(1, rawzk.OP_SYNC, Writer().ustring("/").bytes()),
        request(2, rawzk.OP_CREATE, rawzk.encode_create("/refused-session-node"))))
    resp = c.read_connect_response()
    assert resp.timeout == 0
    closed, frames = c.wait_closed(5)
    assert closed and frames == []
    still_serving(server)
    with rawzk.RawConn(server.hostport) as check:
        assert check.exists("/refused-session-node") is None


def test_zxid_ahead_with_a_sync_behind_it(server):
    """A client that has seen a zxid the server does not have is closed without an answer,
    also when a request is already queued behind its ConnectRequest."""
    c = open_raw(server)
    c.sock.sendall(raw_frames(rawzk.encode_connect(last_zxid=1 << 40, timeout=10000),
                              request(1, rawzk.OP_SYNC, Writer().ustring("/").bytes())))
    closed, frames = c.wait_closed(5)
    assert closed and frames == []
    still_serving(server)


def test_nothing_runs_after_close_session(server, base):
    """closeSession with a create, a sync and a read pipelined behind it: closeSession is
    answered, the connection closes, and the create never happens."""
    c = rawzk.RawConn(server.hostport, io_timeout=5)
    p = f"{base}/after-close"
    c.sock.sendall(raw_frames(
        request(1, rawzk.OP_CLOSESESSION),
        request(2, rawzk.OP_CREATE, rawzk.encode_create(p)),
        request(3, rawzk.OP_SYNC, Writer().ustring("/").bytes()),
        request(4, rawzk.OP_GETDATA, rawzk.encode_path_watch("/"))))
    hdr, _ = c.read_frame_parsed()
    assert (hdr.xid, hdr.err) == (1, 0)
    closed, frames = c.wait_closed(5)
    assert closed
    for f in frames:  # whatever else comes is an error, never a result
        xid, _, err = struct.unpack(">iqi", f[:16])
        assert err != 0, f"request {xid} answered after closeSession"
    with rawzk.RawConn(server.hostport) as check:
        assert check.exists(p) is None


def test_nothing_runs_after_a_closing_error(server, base):
    """An unknown opcode behind a pending write, then a create: the unknown opcode gets
    Unimplemented and the connection closes; the client gets no answer for the create
    behind it. Apache answers the bad opcode at once, ahead of the write's reply, and still
    runs requests it had already read behind it; ringkeeper keeps replies in request order
    and runs nothing after a reply that closes the connection (to the client both look like
    a connection lost with a write in flight)."""
    c = rawzk.RawConn(server.hostport, io_timeout=5)
    first, later = f"{base}/before-bad-op", f"{base}/after-bad-op"
    c.sock.sendall(raw_frames(
        request(1, rawzk.OP_CREATE, rawzk.encode_create(first)),
        request(2, 999, b"\0\0\0\0"),
        request(3, rawzk.OP_CREATE, rawzk.encode_create(later))))
    closed, frames = c.wait_closed(5)
    assert closed
    answers = {xid: err for xid, _, err in (struct.unpack(">iqi", f[:16]) for f in frames)}
    assert answers.get(2) == rawzk.UNIMPLEMENTED and answers.get(1, 0) == 0, answers
    if server.kind == "ringkeeper":  # Apache may answer 3 when it read it before closing
        assert 3 not in answers, answers
        with rawzk.RawConn(server.hostport) as check:
            assert check.exists(later) is None


def test_auth_right_behind_connect_is_answered_after_it(server):
    """The Java client re-sends its auth packets right behind the ConnectRequest on every
    reconnect: the first frame back must be the ConnectResponse, then the auth reply, and a
    write behind the auth already carries its ids."""
    c = open_raw(server)
    node = f"/auth-behind-connect-{os.getpid()}-{time.monotonic_ns()}"
    acl = [rawzk.ACL(rawzk.PERM_ALL, "digest", rawzk.digest_id("carol", "pw"))]
    c.sock.sendall(raw_frames(
        rawzk.encode_connect(timeout=10000),
        request(rawzk.XID_AUTH, rawzk.OP_AUTH, Writer().int(0).ustring("digest").buffer(b"carol:pw").bytes()),
        request(1, rawzk.OP_CREATE, rawzk.encode_create(node, b"x", acl=acl)),
        request(2, rawzk.OP_GETDATA, rawzk.encode_path_watch(node))))
    resp = c.read_connect_response()
    assert resp.timeout > 0 and resp.session_id != 0
    hdr, _ = c.read_frame_parsed()
    assert (hdr.xid, hdr.err) == (rawzk.XID_AUTH, 0)
    hdr, _ = c.read_frame_parsed()
    assert (hdr.xid, hdr.err) == (1, 0)
    hdr, _ = c.read_frame_parsed()
    assert (hdr.xid, hdr.err) == (2, 0), "the read after auth uses carol's digest id"
    c.close()


def test_failed_auth_behind_connect_closes_after_the_connect_response(server):
    """An auth packet with an unknown scheme right behind the ConnectRequest: the
    ConnectResponse comes first, then AuthFailed, then the connection closes and the write
    behind the auth does not run."""
    c = open_raw(server)
    node = f"/failed-auth-behind-connect-{os.getpid()}-{time.monotonic_ns()}"
    c.sock.sendall(raw_frames(
        rawzk.encode_connect(timeout=10000),
        request(rawzk.XID_AUTH, rawzk.OP_AUTH, Writer().int(0).ustring("nosuch").buffer(b"x").bytes()),
        request(1, rawzk.OP_CREATE, rawzk.encode_create(node))))
    resp = c.read_connect_response()
    assert resp.timeout > 0
    hdr, _ = c.read_frame_parsed()
    assert (hdr.xid, hdr.err) == (rawzk.XID_AUTH, rawzk.AUTH_FAILED)
    assert c.wait_closed(5)[0]
    with rawzk.RawConn(server.hostport) as check:
        assert check.exists(node) is None


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_unread_replies_do_not_grow_memory(make_server):
    """A client that sends a burst of 2000 reads of a 256 KiB node in one go and reads no
    reply (500 MiB of replies) leaves the server's memory bounded: the connection stops
    being served until it reads; other clients are served meanwhile."""
    s = make_server()
    if s.kind != "ringkeeper":
        pytest.skip("measures ringkeeper's own memory")
    with rawzk.RawConn(s.hostport) as setup:
        setup.create("/big", b"x" * (256 * 1024))
    c = rawzk.RawConn(s.hostport, io_timeout=5)
    before = rss_bytes(s.proc.pid)
    burst = raw_frames(*(request(i, rawzk.OP_GETDATA, rawzk.encode_path_watch("/big"))
                         for i in range(1, 2001)))
    c.sock.sendall(burst)
    time.sleep(1.5)
    still_serving(s)
    grown = rss_bytes(s.proc.pid) - before
    assert grown < 128 * 1024 * 1024, f"server memory grew by {grown >> 20} MiB"
    # and the connection is served, in order, once it reads
    for xid in range(1, 21):
        hdr, r = c.read_frame_parsed()
        assert (hdr.xid, hdr.err) == (xid, 0)
    c.close()

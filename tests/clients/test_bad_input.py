"""Bad input on the client port: oversized and negative frame lengths, truncated records,
invalid paths and UTF-8, unknown opcodes, malformed multi, an HTTP request, and data over
jute.maxbuffer. Each gets ZooKeeper's reply or a close, and afterwards a fresh client
still works (the server keeps serving everyone else)."""

import struct

import pytest

import rawzk
from rawzk import Writer, frame

MAXBUF = 10000


def still_serving(server):
    with rawzk.RawConn(server.hostport, io_timeout=5) as c:
        assert c.exists("/") is not None
        c.close_session()


@pytest.fixture
def small(make_server):
    """A dedicated server with jute.maxbuffer=10000."""
    return make_server(**{"jute.maxbuffer": MAXBUF})


def closes_silently(hostport, data, handshake):
    c = rawzk.RawConn(hostport, handshake=handshake, io_timeout=5)
    try:
        c.send_raw(data)
        closed, frames = c.wait_closed(5)
        return closed and frames == []
    finally:
        c.close()


@pytest.mark.parametrize("handshake", [False, True], ids=["before-connect", "after-connect"])
def test_frame_over_maxbuffer_closes(small, handshake):
    """A frame length > jute.maxbuffer closes the connection without a reply, before or
    after the handshake."""
    assert closes_silently(small.hostport, struct.pack(">i", MAXBUF + 1) + b"x" * 64, handshake)
    assert closes_silently(small.hostport, struct.pack(">i", 0x7FFFFFFF), handshake)
    still_serving(small)


@pytest.mark.parametrize("handshake", [False, True], ids=["before-connect", "after-connect"])
def test_negative_and_tiny_frames_close(server, handshake):
    """Negative length, zero length and a 3-byte request frame close the connection
    without a reply."""
    assert closes_silently(server.hostport, struct.pack(">i", -5), handshake)
    assert closes_silently(server.hostport, struct.pack(">i", -1), handshake)
    assert closes_silently(server.hostport, frame(b""), handshake)
    if handshake:
        assert closes_silently(server.hostport, frame(b"\0\0\1"), handshake)
    still_serving(server)


def test_truncated_connect_request_closes(server):
    """A ConnectRequest body that is too short closes the connection silently."""
    assert closes_silently(server.hostport, frame(b"\0" * 10), False)
    still_serving(server)


def test_truncated_record_is_marshalling_error(raw):
    """A request whose record is cut short (string length beyond the frame) gets
    MarshallingError (-5) and the connection stays usable."""
    c = raw()
    c.send_frame(struct.pack(">ii", 1, rawzk.OP_GETDATA) + struct.pack(">i", 100) + b"/ab")
    hdr, _ = c.read_frame_parsed()
    assert (hdr.xid, hdr.err) == (1, rawzk.MARSHALLING_ERROR)
    c.send_frame(struct.pack(">ii", 2, rawzk.OP_CREATE) + Writer().ustring("/zz").int(5).bytes())
    hdr, _ = c.read_frame_parsed()
    assert (hdr.xid, hdr.err) == (2, rawzk.MARSHALLING_ERROR)
    c.xid = 2
    assert c.exists("/") is not None
    assert c.exists("/zz") is None


def test_invalid_paths_and_utf8(raw, base):
    """NUL in a path, invalid UTF-8, bad create flags, a TTL mode on plain create →
    BadArguments (-8) and the connection stays usable."""
    c = raw()
    bad_utf8 = Writer().buffer(f"{base}/\xff".encode("latin-1")).buffer(b"") \
        .acls(rawzk.OPEN_ACL_UNSAFE).int(0).bytes()
    assert c.call_err(rawzk.OP_CREATE, bad_utf8) == rawzk.BAD_ARGUMENTS
    assert c.call_err(rawzk.OP_CREATE, rawzk.encode_create(f"{base}/a\0b")) == rawzk.BAD_ARGUMENTS
    assert c.call_err(rawzk.OP_EXISTS, rawzk.encode_path_watch(f"{base}/a\0b")) == \
        rawzk.BAD_ARGUMENTS
    assert c.call_err(rawzk.OP_CREATE, rawzk.encode_create(f"{base}/f", flags=99)) == \
        rawzk.BAD_ARGUMENTS
    for op in (rawzk.OP_CREATE, rawzk.OP_CREATE2):
        assert c.call_err(op, rawzk.encode_create(f"{base}/t", flags=rawzk.PERSISTENT_WITH_TTL)) \
            == rawzk.BAD_ARGUMENTS
    assert c.call_err(rawzk.OP_DELETECONTAINER, Writer().ustring(base).bytes()) == \
        rawzk.BAD_ARGUMENTS
    assert c.get_children(base) == []


def test_unknown_opcode_unimplemented_then_close(raw, server):
    """An unknown opcode gets Unimplemented (-6) and then the connection is closed."""
    c = raw()
    xid = c.send_request(999, b"\0\0\0\0")
    hdr, _ = c.read_frame_parsed()
    assert hdr.xid == xid and hdr.err == rawzk.UNIMPLEMENTED
    assert c.wait_closed(5)[0]
    still_serving(server)


def test_malformed_multi_and_watch_mode(raw):
    """A read op inside multi, a write op inside multiRead and an unknown addWatch mode
    are MarshallingError (-5) in the reply header; the connection stays usable."""
    c = raw()
    assert c.multi([rawzk.m_get_data("/")]) == (rawzk.MARSHALLING_ERROR, None)
    assert c.multi([rawzk.m_create("/mr-x")], rawzk.OP_MULTIREAD) == \
        (rawzk.MARSHALLING_ERROR, None)
    assert c.call_err(rawzk.OP_ADDWATCH, Writer().ustring("/").int(7).bytes()) == \
        rawzk.MARSHALLING_ERROR
    assert c.exists("/mr-x") is None


def test_http_request_on_client_port_closes(server):
    """'GET / HTTP/1.1' on the client port is closed without any reply bytes."""
    req = b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n"
    assert closes_silently(server.hostport, req, False)
    still_serving(server)


def test_setdata_over_maxbuffer_closes_connection(small):
    """Data under jute.maxbuffer is stored; a setData whose frame exceeds it closes the
    connection without a reply and changes nothing."""
    with rawzk.RawConn(small.hostport) as c:
        c.create("/big", b"x" * (MAXBUF - 200))
        assert c.get_data("/big")[1].dataLength == MAXBUF - 200
        c.send_request(rawzk.OP_SETDATA, Writer().ustring("/big").buffer(b"y" * (MAXBUF + 100))
                       .int(-1).bytes())
        closed, frames = c.wait_closed(5)
        assert closed and frames == []
    with rawzk.RawConn(small.hostport) as c:
        data, st = c.get_data("/big")
        assert data == b"x" * (MAXBUF - 200) and st.version == 0


def test_kazoo_setdata_over_maxbuffer(small, kazoo_factory):
    """kazoo sees the oversized write as a connection loss, reconnects, and the node is
    unchanged."""
    from kazoo.exceptions import ConnectionLoss
    zk = kazoo_factory(small.hostport)
    zk.create("/k", b"small")
    with pytest.raises(ConnectionLoss):
        zk.set("/k", b"z" * (MAXBUF * 2))
    zk.retry(zk.exists, "/")
    assert zk.retry(zk.get, "/k")[0] == b"small"


def test_garbage_storm_then_normal_clients(server):
    """A burst of random garbage connections does not disturb the server."""
    import random
    rnd = random.Random(1234)
    for i in range(20):
        c = rawzk.RawConn(server.hostport, handshake=(i % 2 == 1), io_timeout=3)
        try:
            c.send_raw(rnd.randbytes(rnd.randint(1, 200)))
            c.wait_closed(0.3)
        except (rawzk.ConnectionClosed, OSError):
            pass
        finally:
            c.close()
    still_serving(server)

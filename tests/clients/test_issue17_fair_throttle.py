"""Issue 17, fair under overload (ringkeeper only; Apache's throttle makes no such promise):
connections kept in a closed loop with more requests outstanding than globalOutstandingLimit
are served evenly. Each of 8 raw connections keeps 100 creates in flight until it has had
1,500 answered, against globalOutstandingLimit=64; one selector thread reads every
connection's replies as they come and counts them per connection. When the first connection is
done, every other must have had at least a third of its requests answered. With ZooKeeper's
throttle (every connection with a request in process stops being read while the server is
over the limit) whichever connection read first when the server dipped under the limit kept
the room: the others had 31-525 answers (mostly ~40) when the first had its 1,500; with the
fair share (`client_core::Core::throttled`) 775-1,500 in five runs. Counts, not timings,
decide the test."""

import selectors
import struct

import pytest

import rawzk

pytestmark = pytest.mark.ringkeeper_only

LIMIT, CONNS, OUTSTANDING, PER_CONN = 64, 8, 100, 1500


def create_frame(xid, path):
    return rawzk.frame(struct.pack(">ii", xid, rawzk.OP_CREATE) + rawzk.encode_create(path, b"x" * 64))


def test_connections_over_the_outstanding_limit_are_served_evenly(make_server):
    s = make_server(zookeeper__globalOutstandingLimit=LIMIT)
    with rawzk.RawConn(s.hostport) as c:
        c.create("/fair")
    conns = [rawzk.RawConn(s.hostport, io_timeout=60) for _ in range(CONNS)]
    # One thread reads every connection as its replies come (a selector), so the client side
    # takes replies from all connections alike and the counts show the server's order.
    sel = selectors.DefaultSelector()
    sent, answered, bufs = [0] * CONNS, [0] * CONNS, [bytearray() for _ in range(CONNS)]
    at_first_done = None

    def send(i):
        sent[i] += 1
        conns[i].sock.sendall(create_frame(sent[i], f"/fair/c{i}-{sent[i]}"))

    try:
        for i, c in enumerate(conns):
            c.sock.setblocking(False)
            sel.register(c.sock, selectors.EVENT_READ, i)
        for _ in range(OUTSTANDING):
            for i in range(CONNS):
                send(i)
        while sum(answered) < CONNS * PER_CONN:
            ready = sel.select(timeout=60)
            assert ready, f"no reply for 60 s; answered {answered}"
            for key, _ in ready:
                i = key.data
                chunk = conns[i].sock.recv(1 << 16)
                assert chunk, f"connection {i} closed; answered {answered}"
                bufs[i] += chunk
                while len(bufs[i]) >= 4:
                    n = struct.unpack(">i", bufs[i][:4])[0]
                    if len(bufs[i]) < 4 + n:
                        break
                    xid, _zxid, err = struct.unpack(">iqi", bufs[i][4:20])
                    del bufs[i][:4 + n]
                    answered[i] += 1
                    assert (xid, err) == (answered[i], 0), (i, xid, err)
                    if answered[i] == PER_CONN and at_first_done is None:
                        at_first_done = list(answered)
                    if sent[i] < PER_CONN:
                        conns[i].sock.setblocking(True)
                        send(i)
                        conns[i].sock.setblocking(False)
    finally:
        sel.close()
        for c in conns:
            c.close()
    print(f"answered per connection when the first was done: {at_first_done}")
    assert min(at_first_done) >= PER_CONN // 3, f"a connection was starved: {at_first_done}"
    with rawzk.RawConn(s.hostport) as c:
        assert c.get_all_children_number("/fair") == CONNS * PER_CONN

"""One committed tree published to every client core (issue 13): the pipeline core applies each
txn once and the client cores read from the root that came with the last commit batch. These
tests hold the ordering rules clients rely on with two client cores, under concurrent writes,
on a standalone server and through a follower of a 3-member ensemble (writers on the leader):

- read-your-writes on one connection that pipelines write, read, write, read... (each read sees
  exactly its own preceding write, never its next one, even when both writes are committed in
  one batch);
- a watch event reaches a connection before any reply that shows the change (checked on raw
  sockets, frame by frame: kazoo hands events and replies to different threads);
- sync then read on any connection sees every write acknowledged before the sync.

Apache ignores the ringkeeper.* key, so the standalone tests check the expectations against it."""

import threading
import time

import pytest
from kazoo.client import KazooClient

import rawzk
from test_ensemble import ensemble  # noqa: F401 (the fixture)

OBSERVERS = 6
WRITERS = 3
ROUNDS = 25
PIPELINED = 200
KEYS = [f"/o/k{i}" for i in range(4)]


def _kazoo(hostport):
    zk = KazooClient(hosts=hostport, timeout=20)
    zk.start(timeout=20)
    return zk


class _Writers:
    """Threads that keep rewriting `keys` through sessions of their own until stopped."""

    def __init__(self, hostport, keys):
        self.stop = threading.Event()
        self.errors = []
        self.clients = [_kazoo(hostport) for _ in range(WRITERS)]
        self.threads = [threading.Thread(target=self._run, args=(zk, keys), daemon=True) for zk in self.clients]

    def _run(self, zk, keys):
        n = 0
        try:
            while not self.stop.is_set():
                pending = [zk.set_async(k, str(n + i).encode()) for i, k in enumerate(keys)]
                for p in pending:
                    p.get(timeout=20)
                n += len(keys)
        except Exception as e:  # reported by the test
            self.errors.append(e)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(30)
        for zk in self.clients:
            zk.stop()
            zk.close()
        assert not self.errors, self.errors


def _create_keys(hostport):
    zk = _kazoo(hostport)
    try:
        zk.ensure_path("/o")
        for k in KEYS:
            zk.create(k, b"")
    finally:
        zk.stop()
        zk.close()


def _pipelined_read_your_writes(write_hostport, hostport):
    owners = [_kazoo(hostport) for _ in range(OBSERVERS)]
    try:
        for j, zk in enumerate(owners):
            zk.create(f"/o/own{j}", b"")
        with _Writers(write_hostport, KEYS):
            # write, read, write, read... on every owner's connection at once, all sent before
            # the first reply: the writes of the bursts are committed in few batches, many
            # connections hold fenced writes in the same pass (`commit_queue::Rounds`), and
            # each read must see exactly the write its connection sent just before it.
            bursts = []
            for j, zk in enumerate(owners):
                path = f"/o/own{j}"
                sets, gets = [], []
                for i in range(PIPELINED):
                    sets.append(zk.set_async(path, f"{j}:{i}".encode()))
                    gets.append(zk.get_async(path))
                bursts.append((sets, gets))
            for j, (sets, gets) in enumerate(bursts):
                for i in range(PIPELINED):
                    stat = sets[i].get(timeout=30)
                    data, read_stat = gets[i].get(timeout=30)
                    assert data == f"{j}:{i}".encode(), (j, i, data)
                    assert read_stat.version == stat.version == i + 1
    finally:
        for zk in owners:
            zk.stop()
            zk.close()


def _sync_then_read(write_hostport, hostport):
    writer = _kazoo(write_hostport)
    readers = [_kazoo(hostport) for _ in range(OBSERVERS)]
    try:
        writer.create("/sy", b"0")
        with _Writers(write_hostport, KEYS):
            for n in range(1, ROUNDS * 4 + 1):
                stat = writer.set("/sy", str(n).encode())
                r = readers[n % len(readers)]
                r.sync("/sy")
                data, st = r.get("/sy")
                assert st.mzxid >= stat.mzxid and int(data) >= n, (n, data, st)
    finally:
        for zk in [writer, *readers]:
            zk.stop()
            zk.close()


def _version(r):
    """The Stat version from a getData reply body."""
    r.buffer()
    return r.stat().version


def _events_before_replies(write_hostport, hostport):
    observers = [rawzk.RawConn(hostport, timeout_ms=20000, io_timeout=20) for _ in range(OBSERVERS)]
    try:
        with _Writers(write_hostport, KEYS):
            for rnd in range(ROUNDS):
                for j, c in enumerate(observers):
                    path = KEYS[(rnd + j) % len(KEYS)]
                    c.events.clear()
                    _, r = c.call(rawzk.OP_GETDATA, rawzk.encode_path_watch(path, True))
                    watched_at = _version(r)
                    # Read again (no watch) until a reply shows a later version: by then the
                    # NodeDataChanged event must already have arrived on this connection.
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline:
                        _, r = c.call(rawzk.OP_GETDATA, rawzk.encode_path_watch(path, False))
                        if _version(r) > watched_at:
                            fired = [e for e in c.events if e.path == path]
                            assert fired, f"round {rnd}: a read shows {path} changed before its watch event"
                            assert fired[0].type == rawzk.EV_NODE_DATA_CHANGED
                            break
                    else:
                        pytest.fail(f"{path} never changed while the writers ran")
    finally:
        for c in observers:
            c.close()


def test_issue13_pipelined_read_your_writes_across_two_cores(make_server):
    s = make_server(ringkeeper__clientCores=2)
    _create_keys(s.hostport)
    _pipelined_read_your_writes(s.hostport, s.hostport)


def test_issue13_sync_then_read_sees_every_acknowledged_write(make_server):
    s = make_server(ringkeeper__clientCores=2)
    _create_keys(s.hostport)
    _sync_then_read(s.hostport, s.hostport)


def test_issue13_watch_event_precedes_every_reply_that_shows_the_change(make_server):
    s = make_server(ringkeeper__clientCores=2)
    _create_keys(s.hostport)
    _events_before_replies(s.hostport, s.hostport)


@pytest.mark.ringkeeper_only
def test_issue13_ordering_through_a_follower_with_two_cores(ensemble):  # noqa: F811
    e = ensemble(3, client_cores=2)
    leader = e.wait_serving([1, 2, 3], timeout=90)
    follower = next(i for i in (1, 2, 3) if i != leader)
    lead, fol = e.hostport(leader), e.hostport(follower)
    _create_keys(lead)
    _pipelined_read_your_writes(lead, fol)
    _sync_then_read(lead, fol)
    _events_before_replies(lead, fol)


@pytest.mark.ringkeeper_only
def test_issue13_an_error_owed_between_two_pipelined_writes_keeps_its_place(make_server):
    """setData, a request the decoder refuses without closing (deleteContainer from a client:
    BadArguments), setData, getData — sent at once: the error reply is owed between the two
    writes' replies, so the second write needs a commit batch of its own (an answer owed on the
    core waits behind the first). Every reply arrives, in order, and the connection stays."""
    s = make_server(ringkeeper__clientCores=2)
    c = rawzk.RawConn(s.hostport, io_timeout=10)
    try:
        c.create("/pe", b"0")
        for rnd in range(50):
            xids = [
                c.send_request(rawzk.OP_SETDATA, rawzk.Writer().ustring("/pe").buffer(b"a").int(-1).bytes()),
                c.send_request(rawzk.OP_DELETECONTAINER, rawzk.Writer().ustring("/pe").bytes()),
                c.send_request(rawzk.OP_SETDATA, rawzk.Writer().ustring("/pe").buffer(b"b").int(-1).bytes()),
                c.send_request(rawzk.OP_GETDATA, rawzk.encode_path_watch("/pe", False)),
            ]
            errs = []
            for x in xids:
                hdr, r = c.read_reply(x)
                errs.append(hdr.err)
            assert errs == [0, rawzk.BAD_ARGUMENTS, 0, 0], (rnd, errs)
            assert r.buffer() == b"b"
    finally:
        c.close()


def _pipelined_reads_between_writes_of_other_nodes(hostport):
    """On each connection, 200 times over, all sent before the first reply: set A; get A; set B;
    get C; set C; get B. Each read waits behind a write of its connection and must show exactly
    the writes sent before it, whichever of its connection's writes (of its own node or of
    another) the pipeline commits with it."""
    conns = [_kazoo(hostport) for _ in range(OBSERVERS)]
    try:
        bursts = []
        for j, zk in enumerate(conns):
            a, b, c = (f"/m{j}/{n}" for n in "abc")
            for p in (a, b, c):
                zk.create(p, b"-", makepath=True)
            ops = []
            for i in range(PIPELINED):
                ops.append((zk.set_async(a, b"%d" % i), None))
                ops.append((zk.get_async(a), b"%d" % i))
                ops.append((zk.set_async(b, b"%d" % i), None))
                ops.append((zk.get_async(c), b"%d" % (i - 1) if i else b"-"))
                ops.append((zk.set_async(c, b"%d" % i), None))
                ops.append((zk.get_async(b), b"%d" % i))
            bursts.append(ops)
        for j, ops in enumerate(bursts):
            for k, (result, expected) in enumerate(ops):
                got = result.get(timeout=30)
                if expected is not None:
                    assert got[0] == expected, (j, k, got[0], expected)
    finally:
        for zk in conns:
            zk.stop()
            zk.close()


def _next_sequential_name_unseen_before_its_create(hostport):
    """create(/s/n-, sequential) then exists(the name the next create will take), pipelined 200
    deep on each connection: the exists waits behind a create of its connection and must not
    show the node the next create makes, so every exists finds nothing."""
    conns = [_kazoo(hostport) for _ in range(OBSERVERS)]
    try:
        bursts = []
        for j, zk in enumerate(conns):
            parent = f"/s{j}"
            zk.create(parent, b"")
            ops = []
            for i in range(PIPELINED):
                ops.append(zk.create_async(f"{parent}/n-", b"", sequence=True))
                ops.append(zk.exists_async(f"{parent}/n-{i + 1:010d}"))
            bursts.append((parent, ops))
        for parent, ops in bursts:
            for i in range(PIPELINED):
                assert ops[2 * i].get(timeout=30) == f"{parent}/n-{i:010d}"
                assert ops[2 * i + 1].get(timeout=30) is None, (parent, i)
    finally:
        for zk in conns:
            zk.stop()
            zk.close()


def _reads_between_writes_see_nothing_after_the_next_write(hostport, rounds=4, triples=50, first="set",
                                                          middle="get"):
    """On each connection, `triples` at a time before the first reply: set /t-<j>/a (or, with
    `first="sync"`, sync /); get /hot (or, with `middle="ping"`, a ping); set /t-<j>/b, while
    other sessions rewrite /hot without pause. ZooKeeper answers the read after the first
    request and before the second set, so its reply header's zxid is at least the first's and
    below the second set's, and the /hot it shows was last changed at or before that zxid:
    never a write of another session ordered after its own connection's next write, whichever
    commit batch the three share. A ping's reply keeps the same place and zxid bounds."""
    hot, base = f"/hot-{first}-{middle}", f"/t-{first}-{middle}-"
    ping = middle == "ping"
    conns = [rawzk.RawConn(hostport, io_timeout=30) for _ in range(OBSERVERS)]
    try:
        conns[0].create(hot, b"0")
        for j, c in enumerate(conns):
            c.create(f"{base}{j}", b"")
            for n in "ab":
                c.create(f"{base}{j}/{n}", b"")
        with _Writers(hostport, [hot] * 8):
            for rnd in range(rounds):
                sent = []
                for j, c in enumerate(conns):
                    xids = []
                    for i in range(triples):
                        xids.append((
                            c.send_request(rawzk.OP_SYNC, rawzk.Writer().ustring("/").bytes()) if first == "sync" else
                            c.send_request(rawzk.OP_SETDATA, rawzk.Writer().ustring(f"{base}{j}/a").buffer(b"%d" % i).int(-1).bytes()),
                            c.send_request(rawzk.OP_PING, b"", xid=rawzk.XID_PING) if ping else
                            c.send_request(rawzk.OP_GETDATA, rawzk.encode_path_watch(hot, False)),
                            c.send_request(rawzk.OP_SETDATA, rawzk.Writer().ustring(f"{base}{j}/b").buffer(b"%d" % i).int(-1).bytes()),
                        ))
                    sent.append(xids)
                for c, xids in zip(conns, sent):
                    for i, (xa, xr, xb) in enumerate(xids):
                        ha, _ = c.read_reply(xa)
                        hr, r = c.read_reply(xr)
                        mzxid = 0 if ping else (r.buffer(), r.stat().mzxid)[1]
                        hb, _ = c.read_reply(xb)
                        assert (ha.err, hr.err, hb.err) == (0, 0, 0), (rnd, i, ha, hr, hb)
                        assert ha.zxid <= hr.zxid < hb.zxid, (rnd, i, hex(ha.zxid), hex(hr.zxid), hex(hb.zxid))
                        assert mzxid <= hr.zxid, (rnd, i, hex(mzxid), hex(hr.zxid), hex(hb.zxid))
    finally:
        for c in conns:
            c.close()


def test_issue17_pipelined_reads_between_writes_of_other_nodes_see_exactly_theirs(make_server):
    s = make_server(ringkeeper__clientCores=2)
    _pipelined_reads_between_writes_of_other_nodes(s.hostport)
    _next_sequential_name_unseen_before_its_create(s.hostport)
    _reads_between_writes_see_nothing_after_the_next_write(s.hostport)
    _reads_between_writes_see_nothing_after_the_next_write(s.hostport, first="sync")
    _reads_between_writes_see_nothing_after_the_next_write(s.hostport, rounds=2, middle="ping")


@pytest.mark.ringkeeper_only
def test_issue17_unfenced_writes_through_a_follower(ensemble):  # noqa: F811
    e = ensemble(3, client_cores=2)
    leader = e.wait_serving([1, 2, 3], timeout=90)
    follower = next(i for i in (1, 2, 3) if i != leader)
    _pipelined_reads_between_writes_of_other_nodes(e.hostport(follower))
    _next_sequential_name_unseen_before_its_create(e.hostport(follower))
    _reads_between_writes_see_nothing_after_the_next_write(e.hostport(follower))
    _reads_between_writes_see_nothing_after_the_next_write(e.hostport(follower), first="sync")
    _reads_between_writes_see_nothing_after_the_next_write(e.hostport(follower), rounds=2, middle="ping")

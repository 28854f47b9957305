"""One committed tree published to every client core (issue 13): the pipeline core applies each
txn once and the client cores read from the root that came with the last commit batch. These
tests hold the ordering rules clients rely on with two client cores, under concurrent writes:

- read-your-writes on one connection that pipelines write, read, write, read... (each read sees
  exactly its own preceding write, never its next one, even when both writes are committed in
  one batch);
- a watch event reaches a connection before any reply that shows the change (checked on raw
  sockets, frame by frame: kazoo hands events and replies to different threads);
- sync then read on any connection sees every write acknowledged before the sync.

Apache ignores the ringkeeper.* key, so the same tests check the expectations against it."""

import threading

import pytest
from kazoo.client import KazooClient

import rawzk

OBSERVERS = 6
WRITERS = 3
ROUNDS = 25
PIPELINED = 200


def _kazoo(s):
    zk = KazooClient(hosts=s.hostport, timeout=20)
    zk.start(timeout=20)
    return zk


class _Writers:
    """Threads that keep rewriting /o/k<i> through their own sessions until stopped."""

    def __init__(self, s, keys):
        self.stop = threading.Event()
        self.errors = []
        self.clients = [_kazoo(s) for _ in range(WRITERS)]
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


def test_issue13_pipelined_read_your_writes_across_two_cores(make_server):
    s = make_server(ringkeeper__clientCores=2)
    setup = _kazoo(s)
    try:
        keys = [f"/o/k{i}" for i in range(4)]
        setup.ensure_path("/o")
        for k in keys:
            setup.create(k, b"")
        owners = [_kazoo(s) for _ in range(OBSERVERS)]
        try:
            for j, zk in enumerate(owners):
                zk.create(f"/o/own{j}", b"")
            with _Writers(s, keys):
                for j, zk in enumerate(owners):
                    path = f"/o/own{j}"
                    # write, read, write, read... all sent before the first reply: the
                    # writes of one burst are committed in few batches, and each read
                    # must see exactly the write sent just before it.
                    sets, gets = [], []
                    for i in range(PIPELINED):
                        sets.append(zk.set_async(path, f"{j}:{i}".encode()))
                        gets.append(zk.get_async(path))
                    for i in range(PIPELINED):
                        stat = sets[i].get(timeout=30)
                        data, read_stat = gets[i].get(timeout=30)
                        assert data == f"{j}:{i}".encode(), (i, data)
                        assert read_stat.version == stat.version == i + 1
        finally:
            for zk in owners:
                zk.stop()
                zk.close()
    finally:
        setup.stop()
        setup.close()


def test_issue13_sync_then_read_sees_every_acknowledged_write(make_server):
    s = make_server(ringkeeper__clientCores=2)
    writer = _kazoo(s)
    readers = [_kazoo(s) for _ in range(OBSERVERS)]
    try:
        writer.create("/sy", b"0")
        with _noise(s):
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


class _noise:
    """Concurrent writes elsewhere in the tree, so commit batches hold several txns."""

    def __init__(self, s):
        self.s = s

    def __enter__(self):
        setup = _kazoo(self.s)
        try:
            setup.ensure_path("/noise")
            for i in range(4):
                setup.create(f"/noise/k{i}", b"")
        finally:
            setup.stop()
            setup.close()
        self.w = _Writers(self.s, [f"/noise/k{i}" for i in range(4)])
        return self.w.__enter__()

    def __exit__(self, *exc):
        return self.w.__exit__(*exc)


def _version(r):
    """The Stat version from a getData reply body."""
    r.buffer()
    return r.stat().version


def test_issue13_watch_event_precedes_every_reply_that_shows_the_change(make_server):
    s = make_server(ringkeeper__clientCores=2)
    setup = _kazoo(s)
    observers = []
    try:
        setup.ensure_path("/o")
        keys = [f"/o/k{i}" for i in range(4)]
        for k in keys:
            setup.create(k, b"")
        observers = [rawzk.RawConn(s.hostport, timeout_ms=20000, io_timeout=20) for _ in range(OBSERVERS)]
        with _Writers(s, keys):
            for rnd in range(ROUNDS):
                for j, c in enumerate(observers):
                    path = keys[(rnd + j) % len(keys)]
                    c.events.clear()
                    _, r = c.call(rawzk.OP_GETDATA, rawzk.encode_path_watch(path, True))
                    watched_at = _version(r)
                    # Read again (no watch) until a reply shows a later version: by then the
                    # NodeDataChanged event must already have arrived on this connection.
                    for _ in range(2000):
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
        setup.stop()
        setup.close()

"""issue 13: a follower that needs a SNAP larger than the leader's per-follower send window
(SNAP_QUEUED_BYTES_MAX, 8 MiB: the snapshot streams in 1 MiB chunks, each queued only while the
follower's queue is short) catches up while a writer keeps writing through the leader: no
election anywhere (`elections` and the leader's epoch unchanged), every acknowledged write on
every member, identical trees. Real processes through scripts/ensemble.sh (tick 200 ms,
snapCount 50, so the leader's in-memory log no longer covers the stopped follower)."""

import re
import threading
import time

import pytest

from helpers import wait_until
from test_admin_http import prometheus
from test_ensemble import assert_acked_on, assert_same_trees, client, ensemble  # noqa: F401 (fixture)
from test_four_letter_words import four_letter_word

pytestmark = pytest.mark.ringkeeper_only

# 24 MiB of znode data: three times the leader's per-follower SNAP window.
BIG_NODES = 240
BIG_NODE_BYTES = 100 * 1024
SNAP_WINDOW_BYTES = 8 * 1024 * 1024


def epoch(e, i):
    m = re.search(r"Zxid: 0x([0-9a-f]+)", four_letter_word(e.hostport(i), "srvr"))
    assert m, f"server {i}: srvr names no zxid"
    return int(m.group(1), 16) >> 32


def elections(e, i):
    return prometheus(e.base + 10200 + i)["elections"]


def test_issue13_snap_larger_than_the_send_window_streams_under_writes_without_an_election(ensemble,
                                                                                             kazoo_factory):
    e = ensemble(3, snap_count=50)
    leader = e.wait_serving([1, 2, 3])
    follower = next(i for i in (1, 2, 3) if i != leader)
    other = next(i for i in (1, 2, 3) if i not in (leader, follower))
    c = client(kazoo_factory, e.hostport(leader))
    c.create("/big")
    c.create("/live")
    e.kill9(follower)
    blob = bytes(range(256)) * (BIG_NODE_BYTES // 256)
    for n in range(BIG_NODES):
        c.create(f"/big/n{n:04d}", blob)
    lead_epoch = epoch(e, leader)
    before = {i: elections(e, i) for i in (leader, other)}

    acked = {}
    gaps = []
    stop = threading.Event()

    def writer():
        w = client(kazoo_factory, e.hostport(leader))
        last = time.monotonic()
        n = 0
        try:
            while not stop.is_set():
                path, data = f"/live/w{n:06d}", b"w%d" % n
                n += 1
                try:
                    w.create_async(path, data).get(timeout=10.0)
                    acked[path] = data
                    now = time.monotonic()
                    gaps.append(now - last)
                    last = now
                except Exception:
                    time.sleep(0.02)
        finally:
            w.stop()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        wait_until(lambda: len(acked) >= 50, timeout=30.0, what="the writer under way")
        e.restart(follower)
        e.wait_serving([1, 2, 3], timeout=60.0)
        wait_until(lambda: "installing the leader's snapshot" in e.log(follower), timeout=30.0,
                   what="the follower installed a SNAP")
        streamed = wait_until(
            lambda: re.search(r"streamed peer %d a snapshot at 0x[0-9a-f]+: (\d+) bytes in (\d+) ms" % follower,
                              e.log(leader)),
            timeout=30.0, what="the leader's stream finished")
        snap_bytes, snap_ms = int(streamed.group(1)), int(streamed.group(2))
        assert snap_bytes > 2 * SNAP_WINDOW_BYTES, f"the SNAP ({snap_bytes} bytes) outgrows the send window"
        at_restart = len(acked)
        wait_until(lambda: len(acked) >= at_restart + 50, timeout=30.0, what="writes after the follower rejoined")
    finally:
        stop.set()
        t.join(timeout=30.0)
    assert not t.is_alive()
    print(f"\nSNAP of {snap_bytes} bytes streamed in {snap_ms} ms; {len(acked)} writes acknowledged meanwhile, "
          f"longest gap between acknowledgements {max(gaps) * 1000:.0f} ms")

    # No election anywhere: same epoch on every member, no new election on the members that stayed
    # up, and the restarted follower served once (its start-up) without any other election.
    assert {epoch(e, i) for i in (1, 2, 3)} == {lead_epoch}
    assert {i: elections(e, i) for i in (leader, other)} == before
    assert elections(e, follower) == 1
    assert e.leader() == leader

    for i in (1, 2, 3):
        assert_acked_on(e, i, kazoo_factory, "/live", acked)
    fc = client(kazoo_factory, e.hostport(follower))
    try:
        assert len(fc.get_children("/big")) == BIG_NODES
        assert fc.get(f"/big/n{BIG_NODES - 1:04d}")[0] == blob
    finally:
        fc.stop()
    c.stop()
    assert_same_trees(e, [1, 2, 3])


# More than twice commitLogCount (500, ZooKeeper's minimum): the leader's memory no longer holds
# the txns the stopped follower lacks.
BEHIND_WINDOW_WRITES = 1200


@pytest.mark.parametrize("factor", [None, "-1"])
def test_issue13_follower_behind_the_memory_window_gets_a_diff_from_disk_or_a_snap(tmp_path, kazoo_factory, factor):
    """With the default snapshotSizeFactor (0.33) and no snapshot since the follower stopped,
    the leader reads the txns the follower lacks from its log on disk (a DIFF); with -1 (reading
    the log disabled, as in ZooKeeper) the follower gets a SNAP. Either way it catches up with
    every acknowledged write and the same tree."""
    from test_ensemble import Ensemble
    e = Ensemble(3, tmp_path)
    if factor is not None:
        e.env["RK_EXTRA_CONFIG"] = f"snapshotSizeFactor={factor}"
    e.start()
    try:
        leader = e.wait_serving([1, 2, 3])
        follower = next(i for i in (1, 2, 3) if i != leader)
        c = client(kazoo_factory, e.hostport(leader))
        c.create("/d")
        acked = {}
        for n in range(20):
            c.create(f"/d/a{n:05d}", b"a%d" % n)
            acked[f"/d/a{n:05d}"] = b"a%d" % n
        e.kill9(follower)
        for start in range(0, BEHIND_WINDOW_WRITES, 100):
            batch = [(f"/d/b{n:05d}", b"b%d" % n) for n in range(start, start + 100)]
            for (p, d), r in zip(batch, [c.create_async(p, d) for p, d in batch]):
                r.get(timeout=30.0)
                acked[p] = d
        e.restart(follower)
        e.wait_serving([1, 2, 3], timeout=60.0)
        for n in range(20):
            c.create(f"/d/c{n:05d}", b"c")
            acked[f"/d/c{n:05d}"] = b"c"
        c.stop()
        diff_line = "DIFF for peer %d from the log on disk" % follower
        if factor is None:
            assert diff_line in e.log(leader), e.tail(leader)
            assert "installing the leader's snapshot" not in e.log(follower), e.tail(follower)
        else:
            assert diff_line not in e.log(leader)
            assert "sending peer %d a snapshot" % follower in e.log(leader), e.tail(leader)
            assert "installing the leader's snapshot" in e.log(follower), e.tail(follower)
        for i in (1, 2, 3):
            assert_acked_on(e, i, kazoo_factory, "/d", acked)
        assert_same_trees(e, [1, 2, 3])
    finally:
        e.stop()

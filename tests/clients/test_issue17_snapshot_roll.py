"""Issue 17: the members of an ensemble do not all snapshot at the same zxid. As Apache
ZooKeeper documents for snapCount, each server takes its next snapshot after a number of txns
drawn at random in snapCount / 2 + 1 ..= snapCount (snapCount - 1 for an odd count), so the quorum is not slowed by every
member rolling its log and writing a snapshot at once (on a shared disk, or in a busy hour).
A user sees it in the members' data directories: different snapshot files, none taken later
than snapCount txns after the one before."""

import os
import re

import pytest

from helpers import RK_BIN, selected_kinds, wait_until
from test_ensemble import client, ensemble  # noqa: F401

pytestmark = [
    pytest.mark.skipif(not os.access(RK_BIN, os.X_OK), reason="ringkeeper binary not built"),
    pytest.mark.skipif("ringkeeper" not in selected_kinds(), reason="ringkeeper's ensemble script"),
]

SNAP_COUNT = 200
WRITES = 1_400


def snapshot_zxids(e, i):
    data = os.path.join(e.dir, str(i), "data")
    return sorted(int(m.group(1), 16) for name in os.listdir(data)
                  if (m := re.fullmatch(r"snapshot\.([0-9a-f]+)", name)))


def test_members_snapshot_at_different_zxids_within_snap_count(ensemble, kazoo_factory):
    e = ensemble(3, snap_count=SNAP_COUNT)
    e.wait_serving([1, 2, 3])
    zk = client(kazoo_factory, e.hostport(1))
    zk.create("/s")
    # One write at a time, so the members mostly take the txns in small batches and each can
    # stop near its own roll (a batch is counted at once, and a member that falls behind takes
    # in several commits in one pass).
    for n in range(WRITES):
        zk.create(f"/s/n{n:05d}", b"x")
    last = zk.exists("/s/n%05d" % (WRITES - 1)).mzxid
    # Each member has snapshotted up to within snapCount of the last write (written in the
    # background: wait for the files).
    wait_until(lambda: all(snapshot_zxids(e, i) and last - snapshot_zxids(e, i)[-1] <= SNAP_COUNT
                           for i in (1, 2, 3)),
               timeout=30, what="every member's snapshots to reach the last writes")
    snaps = {i: snapshot_zxids(e, i) for i in (1, 2, 3)}
    # An epoch's txns start at counter 1: the gaps are counted within the last epoch.
    epoch = last >> 32
    gaps = {i: [b - a for a, b in zip(s, s[1:]) if a >> 32 == epoch] for i, s in snaps.items()}
    assert all(len(g) >= 4 for g in gaps.values()), snaps
    # Never sooner than snapCount / 2 + 1 txns after the one before, and never much later than
    # snapCount (slack: the check runs once per pass, which may take in several commits, and a
    # snapshot still being written defers the next).
    assert min(min(g) for g in gaps.values()) > SNAP_COUNT // 2, gaps
    assert max(max(g) for g in gaps.values()) <= SNAP_COUNT + 50, gaps
    # Somewhere in the lower half of the range too: a fixed snapCount would space them
    # SNAP_COUNT apart on every member.
    assert min(min(g) for g in gaps.values()) < SNAP_COUNT * 9 // 10, gaps
    # And not in step: with the same fixed count all three lists would be identical.
    assert not (snaps[1] == snaps[2] == snaps[3]), snaps

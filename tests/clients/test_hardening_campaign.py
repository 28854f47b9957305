"""Hardening: repeated kill -9 campaigns (ringkeeper only). Writers keep writing while a
server, or an ensemble member, is killed with SIGKILL and restarted, round after round; at the
end every write that was ever acknowledged is read back (on every member of an ensemble) with
its data, and an ensemble's members hold identical trees.

Rounds: RK_KILL9_ROUNDS (default 5 in CI; the hardening issue's campaign is 20+ rounds, run
by hand: `RK_KILL9_ROUNDS=25 pytest ... test_hardening_campaign.py`). RK_KILL9_SEED picks the
kill schedule (printed, so a failing schedule can be replayed).
"""

import os
import random
import threading
import time

import pytest

from test_ensemble import WRITE_TIMEOUT_S, assert_acked_on, assert_same_trees, client, ensemble  # noqa: F401

pytestmark = pytest.mark.ringkeeper_only

ROUNDS = int(os.environ.get("RK_KILL9_ROUNDS", "5"))
SEED = int(os.environ.get("RK_KILL9_SEED", str(int(time.time()) % 100000)))


class Writers:
    """`n` kazoo clients writing creates (plain and sequential) and multis under `prefix`
    until stopped; every acknowledged write is recorded in `acked` (path -> data). A write
    that fails or times out has an unknown outcome and is not recorded."""

    def __init__(self, make_client, prefix, n=4):
        self.make_client = make_client
        self.prefix = prefix
        self.n = n
        self.acked = {}
        self.lock = threading.Lock()
        self.seq = 0

    def run_for(self, stop):
        threads = [threading.Thread(target=self._writer, args=(w, stop), daemon=True) for w in range(self.n)]
        for t in threads:
            t.start()
        return threads

    def _writer(self, w, stop):
        c = self.make_client()
        try:
            while not stop.is_set():
                with self.lock:
                    i = self.seq
                    self.seq += 1
                data = b"w%d-%d" % (w, i)
                try:
                    if i % 4 == 3:
                        t = c.transaction()
                        t.create(f"{self.prefix}/m{i:07d}a", data)
                        t.create(f"{self.prefix}/m{i:07d}b", data)
                        res = t.commit_async().get(timeout=WRITE_TIMEOUT_S)
                        assert res == [f"{self.prefix}/m{i:07d}a", f"{self.prefix}/m{i:07d}b"], res
                        paths = res
                    elif i % 4 == 2:
                        paths = [c.create_async(f"{self.prefix}/s-", data, sequence=True).get(timeout=WRITE_TIMEOUT_S)]
                    else:
                        paths = [c.create_async(f"{self.prefix}/n{i:07d}", data).get(timeout=WRITE_TIMEOUT_S)]
                    with self.lock:
                        for p in paths:
                            self.acked[p] = data
                except Exception:
                    time.sleep(0.02)
        finally:
            try:
                c.stop()
                c.close()
            except Exception:
                pass


def check_all_acked(zk, prefix, acked):
    present = {f"{prefix}/{k}" for k in zk.get_children(prefix)}
    missing = sorted(set(acked) - present)
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged writes lost: {missing[:5]}"
    wrong = [p for p in acked if zk.get(p)[0] != acked[p]]
    assert not wrong, f"{len(wrong)} acknowledged writes have the wrong data: {wrong[:5]}"


def test_hardening_kill9_campaign_standalone(make_server, kazoo_factory):
    from kazoo.retry import KazooRetry
    rng = random.Random(SEED)
    # snapCount 300: snapshots (and log rolls) happen between and during the kills.
    s = make_server(snapCount=300)
    setup = kazoo_factory(s.hostport)
    setup.create("/campaign")
    setup.stop()

    def make_client():
        return kazoo_factory(s.hostport, connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.3),
                             command_retry=KazooRetry(max_tries=0))

    w = Writers(make_client, "/campaign")
    counts = []
    for r in range(ROUNDS):
        stop = threading.Event()
        threads = w.run_for(stop)
        time.sleep(rng.uniform(0.3, 1.5))
        s.kill9()
        stop.set()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
        s.start()
        counts.append(len(w.acked))
        # Checked every round: a loss is found in the round that caused it.
        zk = kazoo_factory(s.hostport)
        check_all_acked(zk, "/campaign", w.acked)
        zk.stop()
    print(f"\nstandalone kill -9 campaign (seed {SEED}): {ROUNDS} rounds, acknowledged writes after "
          f"each round {counts}, 0 lost")
    assert counts[-1] > 50 * ROUNDS, f"too little load: {counts}"


def test_hardening_kill9_campaign_ensemble(ensemble, kazoo_factory):  # noqa: F811
    rng = random.Random(SEED)
    e = ensemble(3, snap_count=300)
    e.wait_serving([1, 2, 3])
    hosts = ",".join(e.hostport(i) for i in (1, 2, 3))
    setup = client(kazoo_factory, hosts)
    setup.create("/campaign")
    setup.stop()
    w = Writers(lambda: client(kazoo_factory, hosts), "/campaign", n=3)
    stop = threading.Event()
    threads = w.run_for(stop)
    actions = []
    try:
        for r in range(ROUNDS):
            time.sleep(rng.uniform(0.3, 1.5))
            leader = e.leader()
            victim = leader if (leader and rng.random() < 0.5) else rng.choice([1, 2, 3])
            e.kill9(victim)
            actions.append(f"{victim}{'(leader)' if victim == leader else ''}")
            time.sleep(rng.uniform(0.1, 1.0))
            e.restart(victim)
            e.wait_serving([1, 2, 3], timeout=60.0)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    print(f"\nensemble kill -9 campaign (seed {SEED}): killed {', '.join(actions)}; "
          f"{len(w.acked)} writes acknowledged")
    assert len(w.acked) > 30 * ROUNDS, f"only {len(w.acked)} writes got through"
    e.wait_serving([1, 2, 3], timeout=60.0)
    for i in (1, 2, 3):
        assert_acked_on(e, i, kazoo_factory, "/campaign", w.acked)
    assert_same_trees(e, [1, 2, 3])

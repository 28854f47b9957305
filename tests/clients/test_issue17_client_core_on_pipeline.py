"""Issue 17: `ringkeeper.clientCoreOnPipeline=true` runs a server's one client core on its pipeline
core's thread, for several servers on a small machine (the benchmark rig: three members on two
CPUs). A user runs it as any other server: the clients, the ensemble's failover, watches across
members and the trees must behave exactly as with a client core of its own; and the server must
really run one executor thread, not quietly ignore the key."""

import os
import threading

import pytest

from helpers import RK_BIN, Server, default_config, selected_kinds, zkcli
from test_ensemble import assert_killed_leader_catches_up, client, ensemble, write_round  # noqa: F401
from test_four_letter_words import four_letter_word, mntr

pytestmark = [
    pytest.mark.skipif(not os.access(RK_BIN, os.X_OK), reason="ringkeeper binary not built"),
    pytest.mark.skipif("ringkeeper" not in selected_kinds(), reason="a ringkeeper configuration key"),
]

ON_PIPELINE = "ringkeeper.clientCoreOnPipeline=true"


def thread_names(pid):
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return names


def assert_one_executor(pid):
    names = thread_names(pid)
    assert not any(n.startswith("rk-client") for n in names), f"a client core thread runs: {names}"
    assert any(n.startswith("rk-pipeline") for n in names), names


def test_a_standalone_server_with_its_client_core_on_the_pipeline_serves_real_clients(kazoo_factory):
    cfg = default_config()
    cfg["ringkeeper.clientCoreOnPipeline"] = "true"
    cfg["4lw.commands.whitelist"] = "*"
    s = Server("ringkeeper", cfg).start()
    try:
        assert_one_executor(s.proc.pid)
        assert "ringkeeper.clientCoreOnPipeline=true" in four_letter_word(s.hostport, "conf").splitlines()
        zk = kazoo_factory(s.hostport)
        fired = threading.Event()
        zk.create("/one", b"a")
        zk.get("/one", watch=lambda event: fired.set())
        # Another session's write fires the first one's watch.
        other = kazoo_factory(s.hostport)
        other.set("/one", b"b")
        assert fired.wait(10), "the data watch fired"
        assert zk.get("/one")[0] == b"b"
        # Pipelined writes and reads of one session stay in order on the one thread.
        znodes_before = int(mntr(s.hostport)["zk_znode_count"])
        results = [zk.create_async(f"/one/n{i}", b"%d" % i) for i in range(200)]
        reads = [zk.get_async(f"/one/n{i}") for i in range(200)]
        assert [r.get(timeout=10) for r in results] == [f"/one/n{i}" for i in range(200)]
        assert [r.get(timeout=10)[0] for r in reads] == [b"%d" % i for i in range(200)]
        out = zkcli(s.hostport, ["get /one", "ls /one"])
        assert "b" in out and any("n199" in line for line in out), out
        assert int(mntr(s.hostport)["zk_znode_count"]) == znodes_before + 200
        # It stops cleanly on SIGTERM: the client core ends with the pipeline it runs beside.
        s.stop()
        assert s.proc.returncode == 0, s.log_tail()
        assert "ringkeeper stopped cleanly" in s.log_text()
    finally:
        s.cleanup()


def test_an_ensemble_of_one_thread_members_fails_over_and_keeps_every_acknowledged_write(
        ensemble, kazoo_factory):
    e = ensemble(3, extra_config=ON_PIPELINE)
    leader = e.wait_serving([1, 2, 3])
    for i in (1, 2, 3):
        assert_one_executor(e.pid(i))
    clients = [client(kazoo_factory, e.hostport(i)) for i in (1, 2, 3)]
    clients[0].create("/w")
    # A watch set on one member fires for a write through another.
    follower = next(i for i in (1, 2, 3) if i != leader)
    fired = threading.Event()
    clients[follower - 1].exists("/w/watched", watch=lambda event: fired.set())
    clients[leader - 1].create("/w/watched", b"x")
    assert fired.wait(10), "a watch on a follower fired for a write through the leader"
    acked = {"/w/watched": b"x"}
    write_round(clients, "/w", 0, 150, acked)
    assert len(acked) == 151, "every write acknowledged while all members serve"

    e.kill9(leader)
    survivors = [i for i in (1, 2, 3) if i != leader]
    clients.pop(leader - 1).stop()
    new_leader = e.wait_serving(survivors, timeout=30.0)
    assert new_leader != leader
    before = len(acked)
    write_round(clients, "/w", 150, 100, acked)
    assert len(acked) - before >= 90, f"writes go on after the election ({len(acked) - before} of 100)"
    assert_killed_leader_catches_up(e, clients, survivors, leader, kazoo_factory, acked)


def test_the_key_is_refused_with_more_than_one_client_core():
    cfg = default_config()
    cfg["ringkeeper.clientCoreOnPipeline"] = "true"
    cfg["ringkeeper.clientCores"] = "2"
    s = Server("ringkeeper", cfg)
    try:
        s.spawn()
        assert s.proc.wait(timeout=30) != 0
        assert "ringkeeper.clientCoreOnPipeline" in s.log_text(), s.log_tail()
    finally:
        s.cleanup()

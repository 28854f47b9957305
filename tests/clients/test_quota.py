"""Quotas as ZooKeeper 3.8 has them (issue 19), against ringkeeper and Apache ZooKeeper side by
side: zkCli's and `ringkeeper cli`'s setquota/listquota/delquota print the same on both
servers (limits and the usage the server keeps in zookeeper_stats, the parent/child/missing
path refusals, delquota removing the quota directories it empties); usage follows kazoo's
creates, setData and deletes; with enforceQuota a create or setData past a hard limit gets
QuotaExceeded and a soft limit does not refuse; usage and enforcement survive a restart; in a
ringkeeper ensemble every member keeps the same usage, also a member restarted by kill -9."""
import subprocess

import pytest
from kazoo.exceptions import QuotaExceededError

from helpers import free_port, zkcli
from test_cli import TIMEOUT, cli_bin, normalized


def usage(zk, path):
    data, _ = zk.get(f"/zookeeper/quota{path}/zookeeper_stats")
    return data.decode()


def run_script(server, who, lines):
    """A script through zkCli (who == "zk") or `ringkeeper cli` ("rk"), output lines."""
    if who == "zk":
        return zkcli(server.hostport, lines)
    p = subprocess.run([cli_bin(), "cli", "--server", server.hostport], input="\n".join(lines) + "\nquit\n",
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
    return p.stdout.splitlines()


def test_quota_commands_print_what_zkcli_prints(server):
    script = [
        "create BASE x",
        "create BASE/a 12345",
        "create BASE/a/b 678",
        "setquota -n 5 BASE/a",
        "listquota BASE/a",
        "setquota -B 100 BASE/a",
        "listquota BASE/a",
        "setquota -n 2 BASE/a/b",
        "setquota -n 2 BASE",
        "setquota -n 0 BASE/a",
        "setquota -b -1 BASE/a",
        "setquota -n x BASE/a",
        "setquota -n 3 BASE/nope",
        "setquota -n 3 /zookeeper/quota/x",
        "setquota -n 1 -b 2 BASE/a",
        "listquota BASE/nope",
        "setquota -n 1 BASE/a",
        "delquota -n BASE/a",
        "listquota BASE/a",
        "delquota BASE/a",
        "listquota BASE/a",
        "delquota BASE/a",
        "ls /zookeeper/quotaBASE",
    ]
    outs = {}
    for who in ("zk", "rk"):
        base = f"/quota-{who}-{free_port()}"
        outs[who] = normalized(run_script(server, who, [l.replace("BASE", base) for l in script]), base)
    assert sorted(outs["rk"]) == sorted(outs["zk"]), "\n".join(
        ["--- zkCli"] + outs["zk"] + ["--- ringkeeper cli"] + outs["rk"])
    text = "\n".join(outs["rk"])
    assert "Output stat for B/a count=2,bytes=8" in text, text
    assert "Output quota for B/a count=5,bytes=-1=;byteHardLimit=100;countHardLimit=-1" in text, text
    assert "[Warning]: the count quota you create is less than the existing count:2" in text, text


def test_usage_follows_writes_and_enforce_quota_refuses_past_hard_limits(make_server, kazoo_factory):
    s = make_server(enforceQuota="true")
    zk = kazoo_factory(s.hostport)
    zk.create("/q", b"ab")
    zk.create("/q/a", b"cde")
    out = run_script(s, "rk", ["setquota -N 4 /q", "setquota -n 1 /q", "setquota -B 20 /q"])
    assert any("less than the existing count:2" in l for l in out), out
    assert usage(zk, "/q") == "count=2,bytes=5"
    zk.create("/q/b", b"1234")
    assert usage(zk, "/q") == "count=3,bytes=9", "soft count limit 1 passed: only logged"
    zk.create("/q/a/c", b"")
    with pytest.raises(QuotaExceededError):
        zk.create("/q/d")
    assert zk.exists("/q/d") is None
    zk.set("/q/b", b"x" * 15)
    assert usage(zk, "/q") == "count=4,bytes=20"
    with pytest.raises(QuotaExceededError):
        zk.set("/q/b", b"x" * 16)
    zk.delete("/q/a/c")
    zk.create("/q/d", b"")
    zk.create("/elsewhere", b"x" * 100)
    assert usage(zk, "/q") == "count=4,bytes=20"
    zk.stop()
    s.restart()
    zk = kazoo_factory(s.hostport)
    assert usage(zk, "/q") == "count=4,bytes=20", "usage as it was before the restart"
    with pytest.raises(QuotaExceededError):
        zk.create("/q/e")
    out = run_script(s, "zk", ["listquota /q"])
    assert "Output stat for /q count=4,bytes=20" in out, out
    assert "Output quota for /q count=1,bytes=-1=;byteHardLimit=20;countHardLimit=4" in out, out


def test_without_enforce_quota_limits_only_count(make_server, kazoo_factory):
    s = make_server()
    zk = kazoo_factory(s.hostport)
    zk.create("/q")
    run_script(s, "zk", ["setquota -N 1 /q"])
    zk.create("/q/a", b"123")
    zk.create("/q/b")
    assert usage(zk, "/q") == "count=3,bytes=3"


@pytest.mark.ringkeeper_only
def test_every_member_keeps_the_same_usage(tmp_path, kazoo_factory):
    from test_ensemble import Ensemble, TEST_PREALLOC_KB
    e = Ensemble(3, tmp_path, 0, 100000, 1, TEST_PREALLOC_KB).start()
    try:
        leader = e.wait_serving([1, 2, 3])
        follower = next(i for i in (1, 2, 3) if i != leader)
        clients = {i: kazoo_factory(e.hostport(i)) for i in (1, 2, 3)}
        clients[leader].create("/q")
        p = subprocess.run([cli_bin(), "cli", "--server", e.hostport(follower), "setquota", "-n", "100", "/q"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        assert p.returncode == 0, p.stderr
        for n, i in enumerate((1, 2, 3, 1, 2, 3)):
            clients[i].create(f"/q/n{n}", b"x" * n)
        clients[follower].set("/q/n0", b"abc")
        clients[leader].delete("/q/n1")
        for i in (1, 2, 3):
            clients[i].sync("/q")
            assert usage(clients[i], "/q") == "count=6,bytes=17", f"member {i}"
        clients[follower].stop()
        e.kill9(follower)
        clients[leader].create("/q/after", b"1234")
        e.restart(follower)
        e.wait_serving([follower])
        again = kazoo_factory(e.hostport(follower))
        again.sync("/q")
        assert usage(again, "/q") == "count=7,bytes=21", "the restarted member recounted and caught up"
    finally:
        e.stop()

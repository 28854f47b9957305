"""Issue 17's namespace rig (scripts/netns.sh), ringkeeper only: a 3-member ensemble with each
member in its own network namespace and a 20 ms one-way delay on every path (netem where the
kernel has it, else a ringkeeper-bench delay-relay in front of each member, reached through
an nft redirect). kazoo, run inside
the client namespace, writes through one member and reads the node after sync through another;
the delay must really be in the paths (an exists round trip takes at least 2 x the delay, a
create at least 4 x: client to member and, for the quorum, member to member); `down` must leave
no namespace, veth or process behind. Needs root and network namespaces; skips
with the reason otherwise. The time bounds are lower bounds the rig guarantees (checks of the
rig, not performance thresholds)."""

import json
import os
import subprocess
import sys

import pytest

from helpers import REPO, RK_BIN

NETNS_SH = os.path.join(REPO, "scripts", "netns.sh")
BENCH_BIN = os.path.join(os.path.dirname(RK_BIN), "ringkeeper-bench")
DELAY_US = 20_000
MEMBERS = 3


def _unavailable():
    if not os.access(RK_BIN, os.X_OK) or not os.access(BENCH_BIN, os.X_OK):
        return "ringkeeper or ringkeeper-bench not built"
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    r = subprocess.run([NETNS_SH, "check"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return r.stdout.strip() or r.stderr.strip()
    return None


_why = _unavailable()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"namespace rig cannot run here: {_why}")

# Run by the venv's python inside the client namespace; prints one JSON line.
CLIENT_SCRIPT = r"""
import json, sys, time
from kazoo.client import KazooClient
a, b = sys.argv[1], sys.argv[2]
za = KazooClient(hosts=a, timeout=10.0)
zb = KazooClient(hosts=b, timeout=10.0)
za.start(timeout=30)
zb.start(timeout=30)
create_s = []
for i in range(5):
    t = time.monotonic()
    za.create("/netns-%d" % i, b"through-a-%d" % i)
    create_s.append(time.monotonic() - t)
zb.sync("/")
read = [zb.get("/netns-%d" % i)[0].decode() for i in range(5)]
exists_s = []
for _ in range(10):
    t = time.monotonic()
    zb.exists("/netns-0")
    exists_s.append(time.monotonic() - t)
za.stop(); zb.stop(); za.close(); zb.close()
print(json.dumps({"read": read, "create_s": create_s, "exists_s": exists_s}))
"""


def _sh(env, *args, timeout=180):
    return subprocess.run([NETNS_SH, *args], env=env, capture_output=True, text=True, timeout=timeout)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_ensemble_in_namespaces_with_delay(tmp_path):
    prefix = f"rkt{os.getpid() % 100000}"
    env = dict(os.environ, RK_NETNS_PREFIX=prefix, RK_NETNS_STATE=str(tmp_path / "state"), RK_BIN=RK_BIN,
               RK_BENCH_BIN=BENCH_BIN, RK_NETNS_TICK_MS="500",
               RK_NETNS_EXTRA_CONFIG="preAllocSize=4096")  # 4 MiB log segments: disk is not what it tests
    ens = str(tmp_path / "ensemble")
    pids = []
    try:
        up = _sh(env, "up", str(MEMBERS))
        assert up.returncode == 0, up.stderr
        mode = open(tmp_path / "state" / "mode").read().strip()
        r = _sh(env, "delay", str(DELAY_US))
        assert r.returncode == 0, r.stderr
        if mode == "relay":
            pids += [int(open(tmp_path / "state" / f"relay-m{i}.pid").read()) for i in range(1, MEMBERS + 1)]
        r = _sh(env, "ensemble-start", "rk", ens)
        assert r.returncode == 0, r.stderr + "".join(
            open(os.path.join(ens, str(i), "server.log")).read()[-2000:] for i in range(1, MEMBERS + 1))
        pids += [int(open(os.path.join(ens, str(i), "pid")).read()) for i in range(1, MEMBERS + 1)]
        leader = _sh(env, "leader").stdout.strip()
        assert leader in {"1", "2", "3"}, "no member says it leads"
        follower = next(i for i in ("1", "2", "3") if i != leader)
        conn = _sh(env, "conn").stdout.strip().split(",")
        # a write through a follower, read after sync through the leader
        a, b = conn[int(follower) - 1], conn[int(leader) - 1]
        r = _sh(env, "exec", "c", sys.executable, "-c", CLIENT_SCRIPT, a, b, timeout=120)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"mode {mode}: exists {min(out['exists_s']) * 1e3:.1f} ms, create {min(out['create_s']) * 1e3:.1f} ms (min)")
        assert out["read"] == [f"through-a-{i}" for i in range(5)]
        delay_s = DELAY_US / 1e6
        # the client's path to a member: there and back
        assert min(out["exists_s"]) >= 2 * delay_s, out
        # a create also crosses member-to-member paths (proposal and ack at least)
        assert min(out["create_s"]) >= 4 * delay_s, out
    finally:
        down = _sh(env, "down")
    assert down.returncode == 0, down.stderr
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix not in names, names
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "h-m1" not in links and "h-c" not in links, links
    assert pids and not [p for p in pids if _alive(p)], "processes left running"

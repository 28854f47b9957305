"""ringkeeper-bench, kept working (a short sweep; the full comparison is
scripts/bench-vs-zookeeper.sh): against the canned-reply responder (the ceiling) and against
ringkeeper, every workload completes without errors, the writes really happen on the server,
and the report pairs the runs into a summary table and SVG plots."""

import csv
import os
import socket
import subprocess

import pytest

from helpers import BENCH_BIN, free_port, wait_until

pytestmark = pytest.mark.ringkeeper_only

BENCH = BENCH_BIN


def bench(*args, timeout=120):
    r = subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"ringkeeper-bench {' '.join(args)}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def rows(out):
    with open(os.path.join(out, "results.csv")) as f:
        return list(csv.DictReader(f))


SHORT = ["--warmup-s", "0.3", "--measure-s", "0.7", "--clients", "4", "--outstanding", "20", "--znodes", "50"]


@pytest.fixture
def responder():
    if not os.access(BENCH, os.X_OK):
        pytest.skip("ringkeeper-bench not built (cargo build --release --workspace)")
    port = free_port()
    p = subprocess.Popen([BENCH, "responder", "--listen", f"127.0.0.1:{port}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    def listening():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    try:
        wait_until(listening, what="the responder to listen")
        yield f"127.0.0.1:{port}"
    finally:
        p.kill()
        p.wait()


def test_short_sweep_against_the_ceiling_and_ringkeeper(server, kazoo_factory, responder, tmp_path):
    out = str(tmp_path / "results")
    bench("run", "--servers", responder, "--ratios", "0,100", "--label", "ceiling-standalone", "--out", out, *SHORT)
    bench("run", "--servers", server.hostport, "--ratios", "0,50,100", "--label", "ringkeeper-standalone",
          "--out", out, *SHORT)
    bench("run", "--servers", server.hostport, "--ratios", "0", "--skip-setup", "--rate-from", out,
          "--rate-label", "ringkeeper-standalone", "--rate-share", "0.25", "--label", "ringkeeper-standalone",
          "--out", out, *SHORT)
    bench("run", "--servers", server.hostport, "--ratios", "50", "--workload", "create-delete", "--skip-setup",
          "--label", "ringkeeper-standalone", "--out", out, *SHORT)
    bench("run", "--servers", server.hostport, "--ratios", "0", "--workload", "watch", "--skip-setup",
          "--label", "ringkeeper-standalone", "--out", out, *SHORT)
    got = rows(out)
    assert [(r["label"], r["workload"], float(r["read_pct"])) for r in got] == [
        ("ceiling-standalone", "get-set", 0.0), ("ceiling-standalone", "get-set", 100.0),
        ("ringkeeper-standalone", "get-set", 0.0), ("ringkeeper-standalone", "get-set", 50.0),
        ("ringkeeper-standalone", "get-set", 100.0), ("ringkeeper-standalone", "get-set", 0.0),
        ("ringkeeper-standalone", "create-delete", 50.0),
        ("ringkeeper-standalone", "watch", 0.0)]
    for r in got:
        assert int(r["errors"]) == 0, r
        assert float(r["ops_per_s"]) > 100, r
        assert 0 < float(r["p50_ms"]) <= float(r["p99_ms"]) <= float(r["max_ms"]), r
        # Fairness (issue 17): each connection's own p99, median and worst, within the point's
        # latencies (hdrhistogram reports a bucket's top: a hair over the max at most).
        median, worst, spread = (float(r[k]) for k in ("conn_p99_median_ms", "conn_p99_worst_ms", "conn_p99_spread"))
        assert 0 < median <= worst <= float(r["max_ms"]) * 1.01 + 0.01, r
        assert abs(spread - worst / median) <= 0.01 * spread + 0.005, r
        # The host's steal during the window (CPU-s/s over both CPUs), read from /proc/stat.
        assert 0 <= float(r["host_steal_per_s"]) <= os.cpu_count(), r
    closed, paced = got[2], got[5]
    assert float(closed["target_rate"]) == 0
    assert abs(float(paced["target_rate"]) - 0.25 * float(closed["ops_per_s"])) <= 1, (closed, paced)
    # Paced, not flat out: never above its rate (a closed loop would run at 4x). Below it only
    # as far as a shared machine stalls the load (CI's other tests run beside this one).
    assert 0.5 * float(paced["target_rate"]) < float(paced["ops_per_s"]) < 1.1 * float(paced["target_rate"]), paced
    watch = got[-1]
    assert float(watch["events_per_s"]) > 0, "the watchers saw the writer's changes"

    # The writes were real: the pre-created znodes hold the payload and were set many times.
    zk = kazoo_factory(server.hostport)
    data, stat = zk.get("/rkbench/n0")
    assert len(data) == 1024
    versions = sum(zk.exists(f"/rkbench/n{i}").version for i in range(50))
    measured_writes = float(got[2]["ops_per_s"]) * float(got[2]["seconds"])
    assert versions >= measured_writes, (versions, measured_writes)
    assert zk.exists("/rkbench/c0") is None or zk.exists("/rkbench/c0").dataLength == 1024

    summary = bench("report", out)
    assert "| ceiling-standalone | ringkeeper-standalone |" in summary
    assert "### Latency at a fixed open-loop rate, standalone (get-set)" in summary
    for name in ("summary.md", "throughput.svg", "latency-p99.svg", "throughput.png", "latency-p99.png",
                 "ringkeeper-standalone.json"):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    with open(os.path.join(out, "throughput.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(out, "throughput.svg")) as f:
        # plotters draws each label's line and its legend entry as a coloured polyline (axes and
        # ticks are black ones): 2 labels.
        coloured = [l for l in f if l.startswith("<polyline") and 'stroke="#000000"' not in l]
        assert len(coloured) == 4, coloured

#!/usr/bin/env python3
"""Memory per znode, restart and SNAP catch-up (issue 13): ringkeeper against Apache ZooKeeper
3.8, side by side, in one run, on 127.0.0.1.

  scripts/bench-state.py [--binary PATH] [--znodes N] [--snap-znodes N] [--cores 1,2,4]
                         [--only memory,snap,snap-zk] [--out DIR] [--docs] [--summarize]

1. Memory and restart, for ringkeeper with each --cores client-core count (unpinned) and for
   a standalone Apache ZooKeeper (java -Xmx$ZK_HEAP, G1, no -Xms): a fresh server, its RSS
   empty, `ringkeeper-bench fill` of N znodes of 100 bytes over 1,000 parents (8 connections,
   250 creates in flight each), then VmRSS/VmHWM from /proc/PID/status, bytes per znode
   ((RSS after the load - RSS empty) / N), the largest snapshot file and the data directory,
   ZooKeeper's live heap after a full GC (jcmd), then kill -9, start, and the time from the
   start until `ringkeeper-bench wait-read` reads the last-created znode, and RSS after that.
2. SNAP catch-up (snap: ringkeeper, snap-zk: ZooKeeper): a 3-member ensemble, --snap-znodes
   znodes loaded through the leader, a follower killed and its data directory wiped, then
   restarted while `ringkeeper-bench writer` writes through the leader (one write in flight);
   reports the longest gap between acknowledged writes (the seconds before the restart, and
   from the restart on), how the follower synced (SNAP or DIFF, from its log), the
   time until the follower reads the last-created znode, each member's srvr Mode/Zxid before
   and after (an election changes the leader or the epoch), and the SNAP size the leader logged
   (ringkeeper) or the follower's snapshot file.
Both servers: fsync on (forceSync=yes), snapCount 100000 (ZooKeeper snapshots at a random
point between snapCount/2 and snapCount; ringkeeper too since 2026-11-28, at snapCount before), tickTime 2000.
A memory guard stops a server (and reports how far it got) when the RSS of the servers under
test exceeds --rss-limit-mb (default: MemAvailable at start minus 6 GiB), since the machine
is shared. Results: <out>/state.{md,csv,json}, server logs; --docs replaces the section
"Memory per znode, restart and SNAP catch-up (issue 13)" of docs/benchmarks.md.
Environment: ZK_HEAP (3g), BENCH_BASE_PORT (28181; the run uses a few ports above it).
"""
import argparse
import csv
import datetime
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZK_CP = ":".join("/usr/share/java/%s.jar" % j for j in (
    "zookeeper", "netty-codec", "netty-resolver", "netty-transport-native-unix-common", "slf4j-simple"))
SECTION = "## Memory per znode, restart and SNAP catch-up (issue 13)"
# Polling period of the memory guard and RSS sampling, s.
SAMPLE_PERIOD_S = 0.5
# How long a server may take to answer srvr after it is started, s.
START_WAIT_S = 120
# Writes recorded before the follower restarts, and after it serves, s.
WRITER_BEFORE_S = 5
WRITER_AFTER_S = 5
GIB = 1 << 30
# Every ringkeeper server's core layout: unpinned, idle executors sleep at once (the servers
# share this host's CPUs with the load), and 1 MiB of io_uring memory per executor so that 4
# client cores fit an 8 MiB RLIMIT_MEMLOCK (a container's default, which only root with
# CAP_SYS_RESOURCE may raise; the script tries).
RK_SHARED = "ringkeeper.cpuPinning=false\nringkeeper.spinBeforeParkUs=0\nringkeeper.ioMemoryBytes=1048576\n"
# Locked memory a ringkeeper server is started with (its io_uring buffers: ringkeeper.ioMemoryBytes
# per executor, so more client cores need more), bytes; raised only where this user may.
MEMLOCK_BYTES = 256 << 20


def raise_memlock():
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (MEMLOCK_BYTES, MEMLOCK_BYTES))
    except (ValueError, OSError):
        pass


def now_ms():
    return time.time() * 1e3


def four(port, cmd):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(cmd.encode())
            out = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
            return out.decode(errors="replace")
    except OSError:
        return ""


def srvr(port):
    text = four(port, "srvr")
    mode = re.search(r"Mode: (\S+)", text)
    zxid = re.search(r"Zxid: (0x[0-9a-fA-F]+)", text)
    return {"mode": mode.group(1) if mode else None, "zxid": zxid.group(1) if zxid else None}


def mntr_value(port, key):
    m = re.search(r"^%s\s+(\S+)" % re.escape(key), four(port, "mntr"), re.M)
    return m.group(1) if m else None


def proc_status(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def rss(pid):
    return proc_status(pid).get("VmRSS", 0)


def mib(b):
    return None if b is None else round(b / (1 << 20), 1)


class Run:
    def __init__(self, a):
        self.a = a
        self.bench = os.path.join(os.path.dirname(a.binary), "ringkeeper-bench")
        if a.bench:
            self.bench = a.bench
        self.procs = []
        self.out = a.out
        os.makedirs(os.path.join(self.out, "data"), exist_ok=True)
        self.port = int(os.environ.get("BENCH_BASE_PORT", "28181"))
        self.zk_heap = os.environ.get("ZK_HEAP", "3g")

    # -- processes -------------------------------------------------------------------------
    def write_cfg(self, d, port, extra=""):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "zoo.cfg"), "w") as f:
            f.write("tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\n"
                    "clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nforceSync=yes\nsnapCount=100000\n"
                    "4lw.commands.whitelist=*\nadmin.enableServer=false\n%s" % (d, port, extra))

    def start(self, kind, d, log, main="org.apache.zookeeper.server.ZooKeeperServerMain"):
        cfg = os.path.join(d, "zoo.cfg")
        if kind == "rk":
            cmd = [self.a.binary, "serve", "--config", cfg]
        else:
            cmd = ["java", "-Xmx" + self.zk_heap, "-Dzookeeper.4lw.commands.whitelist=*",
                   "-Dzookeeper.admin.enableServer=false", "-cp", ZK_CP, main, cfg]
        p = subprocess.Popen(cmd, stdout=open(os.path.join(self.out, log), "a"), stderr=subprocess.STDOUT,
                             preexec_fn=raise_memlock if kind == "rk" else None)
        p.log = os.path.join(self.out, log)
        self.procs.append(p)
        return p

    def kill(self, p, sig=signal.SIGKILL):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_all(self):
        for p in self.procs:
            self.kill(p, signal.SIGTERM)
        self.procs = []

    def wait_mode(self, port, modes, proc=None):
        t = time.time()
        while time.time() - t < START_WAIT_S:
            if proc is not None and proc.poll() is not None:
                with open(proc.log, errors="replace") as f:
                    tail = re.sub(r"\x1b\[[0-9;]*m", "", f.read()).strip().splitlines()[-1:]
                raise RuntimeError("server exited with %s: %s" % (proc.returncode, " ".join(tail)[:300]))
            m = srvr(port)["mode"]
            if m in modes:
                return m
            time.sleep(0.2)
        raise RuntimeError("server on port %d not in mode %s within %d s" % (port, modes, START_WAIT_S))

    def guarded(self, cmd, watched, label):
        """Runs a ringkeeper-bench command while the servers in `watched` stay under the RSS
        limit; returns (parsed JSON or None, peak summed RSS, why it stopped or None)."""
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(os.path.join(self.out, "harness.log"), "a"),
                             text=True)
        peak, why = 0, None
        while p.poll() is None:
            total = sum(rss(w.pid) for w in watched)
            peak = max(peak, total)
            if total > self.a.rss_limit_mb << 20:
                why = "RSS %.1f GiB over the %.1f GiB limit" % (total / GIB, self.a.rss_limit_mb / 1024)
                p.kill()
                break
            dead = [w for w in watched if w.poll() is not None]
            if dead:
                why = "server exited with %s" % dead[0].returncode
                p.kill()
                break
            time.sleep(SAMPLE_PERIOD_S)
        out, _ = p.communicate()
        if why is None and p.returncode != 0:
            why = "%s failed (exit %s, see harness.log)" % (label, p.returncode)
        result = None
        if why is None:
            try:
                result = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                why = "%s printed no result" % label
        return result, peak, why

    def fill(self, port, n, watched):
        return self.guarded([self.bench, "fill", "--server", "127.0.0.1:%d" % port, "--znodes", str(n),
                             "--parents", str(self.a.parents), "--payload", str(self.a.payload)], watched, "fill")

    def wait_read(self, port, path, watched, timeout_s):
        return self.guarded([self.bench, "wait-read", "--server", "127.0.0.1:%d" % port, "--path", path,
                             "--timeout-s", str(timeout_s)], watched, "wait-read")

    # -- 1. memory and restart ---------------------------------------------------------------
    def memory(self, kind, cores):
        label = "ringkeeper-%dcore" % cores if kind == "rk" else "zookeeper"
        print("==> %s: memory and restart, %d znodes" % (label, self.a.znodes), flush=True)
        d = os.path.join(self.out, "data", label)
        port = self.port
        extra = ("ringkeeper.clientCores=%d\n%s" % (cores, RK_SHARED) if kind == "rk" else "")
        self.write_cfg(d, port, extra)
        row = {"server": label, "client_cores": cores if kind == "rk" else "", "znodes": self.a.znodes}
        try:
            p = self.start(kind, d, label + ".log")
            self.wait_mode(port, ("standalone",), p)
            time.sleep(2)
            empty = rss(p.pid)
            row["rss_empty_mib"] = mib(empty)
            fill, peak, why = self.fill(port, self.a.znodes, [p])
            if why:
                row["status"] = "load stopped at %s znodes: %s" % (mntr_value(port, "zk_znode_count"), why)
                row["hwm_mib"] = mib(proc_status(p.pid).get("VmHWM", peak))
                return row
            row["load_s"] = fill["seconds"]
            row["creates_per_s"] = fill["creates_per_s"]
            time.sleep(3)
            st = proc_status(p.pid)
            row["rss_mib"], row["hwm_mib"] = mib(st.get("VmRSS")), mib(st.get("VmHWM"))
            row["bytes_per_znode"] = round((st.get("VmRSS", 0) - empty) / self.a.znodes)
            if kind == "zk":
                row["live_heap_mib"] = zk_live_heap_mib(p.pid)
            # The largest snapshot: the newest may still be being written.
            sizes = sorted(os.path.getsize(f) for f in snapshots(d))
            row["snapshot_mib"] = mib(sizes[-1]) if sizes else None
            row["data_dir_mib"] = mib(dir_size(d))
            self.kill(p)
            self.procs.remove(p)
            t0 = time.time()
            p = self.start(kind, d, label + ".log")
            got, peak, why = self.wait_read(port, fill["last_path"], [p], 600)
            if why:
                row["status"] = "restart: %s" % why
                return row
            row["restart_s"] = round(time.time() - t0, 2)
            time.sleep(2)
            st = proc_status(p.pid)
            row["rss_restarted_mib"], row["hwm_restarted_mib"] = mib(st.get("VmRSS")), mib(st.get("VmHWM"))
            row["status"] = "ok"
            return row
        finally:
            self.stop_all()
            shutil.rmtree(d, ignore_errors=True)

    # -- 2. SNAP catch-up ----------------------------------------------------------------------
    def snap(self, kind):
        label = "ringkeeper-ensemble3" if kind == "rk" else "zookeeper-ensemble3"
        n = self.a.snap_znodes
        print("==> %s: SNAP catch-up, %d znodes" % (label, n), flush=True)
        cports = [self.port + 10 + i for i in (1, 2, 3)]
        servers = "".join("server.%d=127.0.0.1:%d:%d\n" % (i, self.port + 100 + i, self.port + 200 + i)
                          for i in (1, 2, 3))
        shared = ("ringkeeper.clientCores=1\n" + RK_SHARED if kind == "rk" else "")
        dirs = [os.path.join(self.out, "data", "%s-%d" % (label, i)) for i in (1, 2, 3)]
        row = {"server": label, "znodes": n}
        main = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        stop_file = os.path.join(self.out, "writer.stop")
        try:
            members = []
            for i, d in enumerate(dirs):
                self.write_cfg(d, cports[i], servers + shared)
                with open(os.path.join(d, "myid"), "w") as f:
                    f.write("%d\n" % (i + 1))
            for i, d in enumerate(dirs):
                members.append(self.start(kind, d, "%s-%d.log" % (label, i + 1), main))
            for c, m in zip(cports, members):
                self.wait_mode(c, ("leader", "follower"), m)
            modes = [srvr(c)["mode"] for c in cports]
            leader = modes.index("leader")
            follower = next(i for i in (2, 1, 0) if i != leader)
            fill, peak, why = self.fill(cports[leader], n, members)
            if why:
                row["status"] = "load stopped at %s znodes: %s" % (mntr_value(cports[leader], "zk_znode_count"), why)
                return row
            row["load_s"] = fill["seconds"]
            time.sleep(3)
            row["rss_mib_before"] = [mib(rss(m.pid)) for m in members]
            row["before"] = [srvr(c) for c in cports]
            self.kill(members[follower])
            for name in os.listdir(dirs[follower]):
                if name not in ("zoo.cfg", "myid"):
                    path = os.path.join(dirs[follower], name)
                    shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            if os.path.exists(stop_file):
                os.remove(stop_file)
            writer = subprocess.Popen(
                [self.bench, "writer", "--server", "127.0.0.1:%d" % cports[leader], "--stop-file", stop_file,
                 "--duration-s", str(self.a.snap_wait_s + 60)],
                stdout=subprocess.PIPE, stderr=open(os.path.join(self.out, "harness.log"), "a"), text=True)
            time.sleep(WRITER_BEFORE_S)
            restart_ms = now_ms()
            members[follower] = self.start(kind, dirs[follower], "%s-%d.log" % (label, follower + 1), main)
            got, peak, why = self.wait_read(cports[follower], fill["last_path"], members, self.a.snap_wait_s)
            served_ms = now_ms()
            row["follower_serves_s"] = None if why else round((served_ms - restart_ms) / 1e3, 2)
            row["peak_rss_sum_mib"] = mib(peak)
            time.sleep(WRITER_AFTER_S)
            open(stop_file, "w").close()
            out, _ = writer.communicate(timeout=self.a.snap_wait_s + 120)
            w = json.loads(out.strip().splitlines()[-1]) if writer.returncode == 0 and out.strip() else None
            row["after"] = [srvr(c) for c in cports]
            row["election"] = election_happened(row["before"], row["after"])
            if w:
                row["writes_per_s"] = w["writes_per_s"]
                row["max_gap_ms"] = w["max_gap_ms"]
                row["p99_gap_ms"] = w["p99_gap_ms"]
                cut = int(restart_ms // 1000)
                row["max_gap_before_restart_ms"] = max([b[2] for b in w["per_second"] if b[0] < cut] + [0.0])
                row["max_gap_catch_up_ms"] = max([b[2] for b in w["per_second"] if b[0] >= cut] + [0.0])
                row["gaps_over_100ms"] = len(w["gaps"])
                with open(os.path.join(self.out, "%s-writer.json" % label), "w") as f:
                    json.dump(dict(w, restart_unix_ms=restart_ms, served_unix_ms=served_ms), f)
                row["writer_errors"] = w["errors"]
            snap_sizes, snaps_sent = snap_log(os.path.join(self.out, "%s-%d.log" % (label, leader + 1)))
            row["snaps_sent"] = snaps_sent
            row["snap_mib"] = mib(max(snap_sizes)) if snap_sizes else None
            row["sync"] = sync_kind(os.path.join(self.out, "%s-%d.log" % (label, follower + 1)))
            fsnaps = snapshots(dirs[follower])
            row["follower_snapshot_mib"] = mib(os.path.getsize(fsnaps[-1])) if fsnaps else None
            row["status"] = ("follower did not serve within %d s: %s" % (self.a.snap_wait_s, why)) if why else "ok"
            return row
        finally:
            if os.path.exists(stop_file) is False:
                open(stop_file, "w").close()
            self.stop_all()
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)


def election_happened(before, after):
    if any(s["mode"] is None for s in after):
        return "unknown (a member did not answer srvr)"
    lb = [i for i, s in enumerate(before) if s["mode"] == "leader"]
    la = [i for i, s in enumerate(after) if s["mode"] == "leader"]
    epoch = lambda s: int(s["zxid"], 16) >> 32 if s["zxid"] else None
    if lb != la or epoch(before[lb[0]]) != epoch(after[la[0]]):
        return "yes"
    return "no"


def snap_log(path):
    """SNAP sizes a leader logged, and how many SNAPs it sent."""
    sizes, sent = [], 0
    try:
        with open(path, errors="replace") as f:
            for line in f:
                # The streamed SNAP (peer protocol 2), or the one-frame SNAP of earlier builds.
                m = re.search(r"streamed peer \d+ a snapshot at \S+: (\d+) bytes", line) or \
                    re.search(r"sending peer \d+ a snapshot at \S+ \((\d+) bytes\)", line)
                if m:
                    sizes.append(int(m.group(1)))
                    sent += 1
                elif "Sending snapshot last zxid of peer" in line:
                    sent += 1
    except OSError:
        pass
    return sizes, sent


def sync_kind(path):
    """How the restarted follower synced, from its log (the last sync it logged)."""
    kind = "not logged"
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if "installing the leader's snapshot" in line or "Getting a snapshot from leader" in line:
                    kind = "SNAP"
                elif "Getting a diff from the leader" in line:
                    kind = "DIFF"
    except OSError:
        pass
    return kind


def snapshots(d):
    out = []
    for sub in (d, os.path.join(d, "version-2")):
        if os.path.isdir(sub):
            out += [os.path.join(sub, f) for f in os.listdir(sub) if f.startswith("snapshot.")]
    return sorted(out, key=os.path.getmtime)


def dir_size(d):
    total = 0
    for base, _, files in os.walk(d):
        for f in files:
            try:
                total += os.stat(os.path.join(base, f)).st_blocks * 512
            except OSError:
                pass
    return total


def zk_live_heap_mib(pid):
    """Heap in use after a full GC (jcmd), MiB; None without jcmd."""
    if not shutil.which("jcmd"):
        return None
    subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=120)
    out = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"used (\d+)K", out)
    return round(int(m.group(1)) / 1024, 1) if m else None


MEM_COLS = [("server", "server"), ("client_cores", "client cores"), ("znodes", "znodes"),
            ("rss_empty_mib", "RSS empty MiB"), ("rss_mib", "RSS loaded MiB"), ("hwm_mib", "VmHWM MiB"),
            ("bytes_per_znode", "bytes/znode"), ("live_heap_mib", "live heap MiB"),
            ("snapshot_mib", "largest snapshot MiB"), ("data_dir_mib", "data dir MiB"), ("load_s", "load s"),
            ("creates_per_s", "creates/s"), ("restart_s", "restart to serving s"),
            ("rss_restarted_mib", "RSS restarted MiB"), ("hwm_restarted_mib", "VmHWM restarted MiB"),
            ("status", "status")]
SNAP_COLS = [("server", "ensemble"), ("znodes", "znodes"), ("snap_mib", "SNAP MiB (leader log)"),
             ("sync", "sync"), ("snaps_sent", "SNAPs sent"), ("follower_snapshot_mib", "follower snapshot MiB"),
             ("follower_serves_s", "follower serves after s"), ("max_gap_before_restart_ms", "max gap before ms"),
             ("max_gap_catch_up_ms", "max gap during catch-up ms"), ("p99_gap_ms", "p99 gap ms"), ("gaps_over_100ms", "gaps > 100 ms"),
             ("writes_per_s", "writes/s"), ("election", "election"), ("peak_rss_sum_mib", "peak RSS sum MiB"),
             ("status", "status")]


def table(rows, cols):
    cell = lambda v: "" if v is None else (json.dumps(v) if isinstance(v, (list, dict)) else str(v))
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(cell(r.get(k)) for k, _ in cols) + " |")
    return "\n".join(lines)


def targets(mem_rows, snap_rows):
    """Issue 13's targets against this run's rows (only what the rows measured)."""
    out = []
    ok = lambda r: r.get("status") == "ok"
    zk = next((r for r in mem_rows if r["server"] == "zookeeper" and ok(r)), None)
    rk = [r for r in mem_rows if r["server"].startswith("ringkeeper") and ok(r)]
    one = next((r for r in rk if r["client_cores"] == 1), None)
    for r in rk:
        if zk:
            ratio = r["rss_mib"] / zk["rss_mib"]
            out.append("- %s: RSS %.2f x ZooKeeper's (target <= 0.5: %s); restart %.1f s vs %.1f s (target: no "
                       "slower: %s)." % (r["server"], ratio, "met" if ratio <= 0.5 else "not met", r["restart_s"],
                                          zk["restart_s"], "met" if r["restart_s"] <= zk["restart_s"] else "not met"))
        if one and r is not one and one["rss_mib"] > one["rss_empty_mib"]:
            tree = one["rss_mib"] - one["rss_empty_mib"]
            per_core = (r["rss_mib"] - one["rss_mib"]) / (r["client_cores"] - 1)
            out.append("- %s: each client core beyond the first adds %.0f MiB, %.0f%% of the 1-core load's %.0f MiB "
                       "(target < 5%%: %s)." % (r["server"], per_core, 100 * per_core / tree, tree,
                                                 "met" if per_core < 0.05 * tree else "not met"))
    for r in mem_rows:
        if not ok(r):
            out.append("- %s: %s (no figures past that point)." % (r["server"], r.get("status")))
    for r in snap_rows:
        if ok(r):
            gap = r.get("max_gap_catch_up_ms")
            met = gap is not None and gap <= 100 and r.get("election") == "no"
            out.append("- %s: longest gap from the restart on %s ms, election %s, follower serving after %s s "
                       "(target: no gap > 100 ms, no election: %s)." % (
                           r["server"], r.get("max_gap_catch_up_ms"), r.get("election"), r.get("follower_serves_s"),
                           "met" if met else "not met"))
        else:
            out.append("- %s: %s (target not met)." % (r["server"], r.get("status")))
    return ["### Against issue 13's targets", ""] + out + [""] if out else []


def run_meta(a, r, cmd, minutes):
    """What the section says about the run (kept in state.json for --summarize)."""
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "zookeeper"], capture_output=True,
                             text=True).stdout
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[:1]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    return {
        "command": cmd,
        "run": "%s UTC%s" % (datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
                             "" if minutes is None else ", %.1f min" % minutes),
        "machine": "%d CPUs (%s), %.0f GiB, kernel %s" % (
            os.cpu_count(), cpu, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB, platform.release()),
        "ringkeeper": "`%s` (tree at %s)" % (a.binary, rev.strip()),
        "zookeeper": "Apache ZooKeeper %s (Debian), %s, `-Xmx%s` (no -Xms, default G1)" % (
            version, java[0] if java else "?", r.zk_heap),
        "load": "%d znodes of %d bytes over %d parents (SNAP part: %d znodes)" % (
            a.znodes, a.payload, a.parents, a.snap_znodes),
        "rss_limit_mb": a.rss_limit_mb,
    }


def render(meta, mem_rows, snap_rows):
    md = [SECTION, "",
          "- Run %s: `%s`." % (meta["run"], meta["command"]),
          "- Machine: %s; shared with other work, everything on 127.0.0.1." % meta["machine"],
          "- ringkeeper: %s, client cores unpinned (`ringkeeper.cpuPinning=false`, "
          "`ringkeeper.spinBeforeParkUs=0`, `ringkeeper.ioMemoryBytes=1048576`). %s." % (
              meta["ringkeeper"], meta["zookeeper"]),
          "- Both: forceSync=yes, snapCount=100000 (ZooKeeper snapshots at a random point between 50,000 and "
          "100,000 txns, ringkeeper likewise), tickTime 2000. Load: `ringkeeper-bench fill`, %s, "
          "8 connections x 250 creates in flight. Memory guard: %d MiB of server RSS." % (
              meta["load"], meta["rss_limit_mb"]),
          "- bytes/znode = (VmRSS after the load - VmRSS of the empty server) / znodes. Restart = kill -9, start, "
          "until a getData of the last-created znode succeeds. Live heap: jcmd GC.run then GC.heap_info.", ""]
    if mem_rows:
        md += ["### Memory and restart", "", table(mem_rows, MEM_COLS), ""]
    if snap_rows:
        md += ["### SNAP catch-up under load (3 members, one follower wiped and restarted)", "",
               "The writer keeps one setData of 100 bytes in flight through the leader; a gap is the time between "
               "two consecutive acknowledged writes. Before: the %d s before the follower restarts. Election: the "
               "leader or its epoch (srvr Zxid) changed. ringkeeper members run 1 client core each." % WRITER_BEFORE_S,
               "", table(snap_rows, SNAP_COLS), ""]
        for s in snap_rows:
            md.append("- %s: srvr before %s, after %s; writer errors %s." % (
                s["server"], json.dumps(s.get("before")), json.dumps(s.get("after")),
                json.dumps(s.get("writer_errors"))))
        md.append("")
    md += targets(mem_rows, snap_rows)
    return "\n".join(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/ringkeeper"))
    ap.add_argument("--bench", help="ringkeeper-bench (default: beside --binary, else this tree's)")
    ap.add_argument("--znodes", type=int, default=1_000_000)
    ap.add_argument("--snap-znodes", type=int, help="znodes of the SNAP part (default --znodes)")
    ap.add_argument("--parents", type=int, default=1000)
    ap.add_argument("--payload", type=int, default=100)
    ap.add_argument("--cores", default="1,2,4")
    ap.add_argument("--only", default="memory,snap,snap-zk")
    ap.add_argument("--snap-wait-s", type=int, default=240)
    avail = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) // 1024
    ap.add_argument("--rss-limit-mb", type=int, default=max(avail - 6144, 1024))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results",
                                                  "state-" + datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")))
    ap.add_argument("--docs", action="store_true")
    ap.add_argument("--summarize", action="store_true",
                    help="run nothing: write the results (and with --docs, the section) of --out's state.json again")
    a = ap.parse_args()
    a.binary = os.path.abspath(a.binary)
    a.snap_znodes = a.snap_znodes or a.znodes
    if not a.bench:
        beside = os.path.join(os.path.dirname(a.binary), "ringkeeper-bench")
        a.bench = beside if os.path.exists(beside) else os.path.join(ROOT, "target/release/ringkeeper-bench")
    only = set(a.only.split(","))
    r = Run(a)
    for port in [] if a.summarize else [r.port] + [r.port + k + i for k in (10, 100, 200) for i in (1, 2, 3)]:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                sys.exit("port %d on 127.0.0.1 is taken; set BENCH_BASE_PORT to a free range" % port)
    started = time.time()
    mem_rows, snap_rows = [], []
    if a.summarize:
        with open(os.path.join(a.out, "state.json")) as f:
            saved = json.load(f)
        mem_rows, snap_rows = saved["memory"], saved["snap"]
        meta = saved.get("meta") or run_meta(a, r, saved.get("command", "?"), None)
    else:
        try:
            def one(rows, server, f, *args):
                try:
                    rows.append(f(*args))
                except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
                    rows.append({"server": server, "status": "error: %s" % e})
                print(json.dumps(rows[-1]), flush=True)

            if "memory" in only:
                for c in [int(x) for x in a.cores.split(",") if x]:
                    one(mem_rows, "ringkeeper-%dcore" % c, r.memory, "rk", c)
                one(mem_rows, "zookeeper", r.memory, "zk", 0)
            if "snap" in only:
                one(snap_rows, "ringkeeper-ensemble3", r.snap, "rk")
            if "snap-zk" in only:
                one(snap_rows, "zookeeper-ensemble3", r.snap, "zk")
        finally:
            r.stop_all()
        meta = run_meta(a, r, "scripts/bench-state.py " + " ".join(sys.argv[1:]), (time.time() - started) / 60)
    text = render(meta, mem_rows, snap_rows)
    with open(os.path.join(a.out, "state.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "state.json"), "w") as f:
        json.dump({"memory": mem_rows, "snap": snap_rows, "command": meta["command"], "meta": meta}, f, indent=1)
    with open(os.path.join(a.out, "state.csv"), "w", newline="") as f:
        w = csv.writer(f)
        keys = sorted({k for r_ in mem_rows + snap_rows for k in r_})
        w.writerow(["part"] + keys)
        for part, rows in (("memory", mem_rows), ("snap", snap_rows)):
            for r_ in rows:
                w.writerow([part] + [json.dumps(r_[k]) if isinstance(r_.get(k), (list, dict)) else r_.get(k, "")
                                     for k in keys])
    print(text)
    if a.docs:
        path = os.path.join(ROOT, "docs", "benchmarks.md")
        doc = open(path).read()
        start = doc.find(SECTION)
        if start < 0:
            doc = doc.rstrip("\n") + "\n\n" + text
        else:
            nxt = doc.find("\n## ", start + len(SECTION))
            doc = doc[:start] + text + ("\n" + doc[nxt + 1:] if nxt >= 0 else "")
        open(path, "w").write(doc)
        print("docs/benchmarks.md: section replaced")
    print("results: %s" % a.out)


if __name__ == "__main__":
    main()

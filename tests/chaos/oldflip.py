"""Deliberate reproduction attempt of seed 101's stall (issue 18, docs/reliability.md): a member
killed -9, one bit flipped in a log segment OLDER than its newest snapshot (the segment the
recovery should never need), restarted under load; does it serve again, and how soon?

    scripts/chaos.sh --oldflip TRIES [--seed N] [--dir DIR]     (runs this in the rig)

Each try (GAP_S after the previous one): wait until the target member (the followers and the
leader in turn) has a snapshot newer than its oldest segment, kill -9 it, flip a random bit in
the written part of that segment (within its first HEAD_BYTES on even tries, as seed 101's
byte 4184), restart it, and time until it answers `srvr` with a mode and a session on it can
`sync` and read. A member that does not serve within SERVE_WAIT_S is the stall: its log tail
is printed (members run with RUST_LOG=debug) and kept, then it is wiped to rejoin.
Rules: the same seed picks the same members, bytes and bits; every try is logged with its
figures; exit status 1 when a try stalled, 0 when every try served, 2 on a rig error."""

import argparse
import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "clients"))

import rawzk  # noqa: E402
import workloads  # noqa: E402
from history import History  # noqa: E402
from nemesis import NETNS_SH, Nemesis  # noqa: E402

SERVE_WAIT_S = 40.0
GAP_S = 20.0  # between tries: new snapshots, segments and (after a leader's kill) epochs
HEAD_BYTES = 8192  # even tries flip a bit this near the segment's start (seed 101: byte 4184)
SNAPSHOT_WAIT_S = 120.0
SEGMENT = re.compile(r"^log\.([0-9a-f]{16})$")
SNAPSHOT = re.compile(r"^snapshot\.([0-9a-f]{16})$")


def files(d, pattern):
    """{zxid: path} of the files in d whose names match pattern."""
    out = {}
    for nm in os.listdir(d):
        m = pattern.match(nm)
        if m:
            out[int(m.group(1), 16)] = os.path.join(d, nm)
    return out


def old_segment(d):
    """The oldest log segment that starts before the newest snapshot and is not the newest
    segment (recovery starts at the snapshot, so it never needs it), or None."""
    segs, snaps = files(d, SEGMENT), files(d, SNAPSHOT)
    if len(segs) < 2 or not snaps:
        return None
    oldest = min(segs)
    return segs[oldest] if oldest < max(snaps) and oldest != max(segs) else None


def serves(host):
    """True when a new session on host can sync and read."""
    try:
        with rawzk.RawConn(host, timeout_ms=10000, io_timeout=3) as c:
            c.sync("/")
            c.get_children("/")
            c.close_session()
        return True
    except (rawzk.ZKError, *workloads.LOST):
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=101)
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    t0 = time.monotonic()

    def log(msg):
        print(f"[{time.monotonic() - t0:8.2f}] {msg}", flush=True)

    ens = os.path.join(a.dir, "ensemble")
    os.makedirs(ens, exist_ok=True)
    nem = Nemesis(a.seed, ["bitflip"], "rk", ens, 3, log)
    os.environ.setdefault("RUST_LOG", "debug")
    r = subprocess.run([NETNS_SH, "ensemble-start", "rk", ens], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        log(f"ensemble-start: {r.stderr.strip()}")
        return 2
    hosts = subprocess.run([NETNS_SH, "conn"], capture_output=True, text=True).stdout.strip().split(",")
    workloads.setup(hosts)
    ctx = workloads.Context(hosts, History(), a.seed)
    threads = workloads.start(ctx, ["register", "creates", "sessions"])
    stalls = 0
    try:
        for t in range(a.tries):
            time.sleep(GAP_S)
            leader = nem.leader()
            order = [m for m in (1, 2, 3) if m != leader] + [leader or 1]
            i = order[t % 3]
            d = nem.member_dir(i)
            deadline = time.monotonic() + SNAPSHOT_WAIT_S
            while old_segment(d) is None and time.monotonic() < deadline:
                time.sleep(1.0)
            seg = old_segment(d)
            if seg is None:
                log(f"try {t}: member {i} has no segment older than a snapshot after {SNAPSHOT_WAIT_S} s")
                return 2
            nem.kill9(i)
            with open(seg, "r+b") as fh:
                data = fh.read()
                used = len(data.rstrip(b"\0")) or len(data)
                off, bit = nem.rng.randrange(min(used, HEAD_BYTES) if t % 2 == 0 else used), nem.rng.randrange(8)
                fh.seek(off)
                fh.write(bytes([data[off] ^ (1 << bit)]))
            log_path = nem.member_log(i)
            log_start = os.path.getsize(log_path)
            snaps = sorted(files(d, SNAPSHOT))
            log(f"try {t}: member {i} ({'leader' if i == leader else 'follower'}) killed; bit {bit} of byte {off} "
                f"of {os.path.basename(seg)} (written {used} B) flipped; newest snapshot {snaps[-1]:#x}; restarting")
            t_start = time.monotonic()
            nem.start_member(i)
            served = None
            while time.monotonic() - t_start < SERVE_WAIT_S:
                if nem.role(i) and serves(hosts[i - 1]):
                    served = time.monotonic() - t_start
                    break
                time.sleep(0.2)
            if served is not None:
                log(f"try {t}: member {i} serves {served:.1f} s after the restart")
                continue
            stalls += 1
            with open(log_path, errors="replace") as fh:
                fh.seek(log_start)
                tail = fh.read()
            keep = os.path.join(a.dir, f"stall-{t}-member{i}.log")
            with open(keep, "w") as fh:
                fh.write(tail)
            log(f"try {t}: STALL: member {i} alive={nem.alive(i)} role={nem.role(i)} does not serve "
                f"{SERVE_WAIT_S} s after the restart; its log since the restart: {keep}")
            nem.wipe(i)
    finally:
        ctx.stop.set()
        for th in threads:
            th.join(30)
        subprocess.run([NETNS_SH, "ensemble-stop", ens], capture_output=True, timeout=60)
    log(f"{a.tries} tries, {stalls} stalls")
    return 1 if stalls else 0


if __name__ == "__main__":
    threading.excepthook = lambda args: print(f"thread {args.thread}: {args.exc_value}", file=sys.stderr)
    sys.exit(main())

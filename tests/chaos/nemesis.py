"""The chaos rig's nemesis (issue 18): a seeded schedule of faults against an ensemble run by
scripts/netns.sh (one member per network namespace, observers included: every fault may hit
them). One fault at a time: quiet, fault, hold, heal; or, with `overlap`, two at once: fault A,
fault B a moment later, hold, heal B, heal A (pairs that share a heal, such as two kinds of nft
rule, are not combined). Every fault is healed before the next and at the end (`heal_all`).

Faults (names for --nemesis):
  partition  majority/minority split, a lone leader cut off, asymmetric one-way (the leader
             hears no follower, or no follower hears the leader), a bridge (A sees B and C,
             B and C do not see each other): nft drops in the members' namespaces
  delay      one-way delay + jitter on every path (netem, or the delay relays: restarting
             them resets every connection)
  loss       1/5/20% of the packets arriving at a member (or every member) dropped at random (nft)
  dup        5/20/50% of the packets a member (or every member) sends are sent twice (nft netdev
             egress `dup to` its own device; no netem here)
  reorder    5/10/20% of the packets a member (or every member) sends wait in a slow htb class
             while the others overtake them (nft sets the class at random)
  kill       kill -9 of a member (the leader half the time), restart after the hold
  stop       SIGSTOP of a member (the leader half the time), SIGCONT after the hold
  clock      a member's wall clock stepped by up to +-10 min, or running 2x / 0.5x
             (libfaketime; CLOCK_MONOTONIC untouched)
  disk       a member's data volume (its own loop-mounted ext4, VOLUME_MB) filled to the last byte
  ioerror    every write, fallocate and fsync in a member's data dir fails with EIO (a FUSE
             pass-through with direct_io, tests/chaos/faultfs.py; the log's O_DIRECT passes)
  bitflip    a member killed -9, one bit of one of its files (log, snapshot, epoch) flipped,
             restarted: it must serve (recovered from the quorum) or refuse naming the file;
             a refusing member is wiped and rejoins (an operator's repair)
Rules: everything runs through scripts/netns.sh (no second copy of its logic); every action
is logged with its time; randomness only from the seed."""

import os
import random
import re
import signal
import subprocess
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NETNS_SH = os.path.join(REPO, "scripts", "netns.sh")
ALL = ["partition", "kill", "stop", "delay", "loss", "dup", "reorder", "clock", "disk", "bitflip", "ioerror"]
# Faults healed by the same `netns.sh heal` (it removes every nft rule and qdisc): never overlapped.
SHARED_HEAL = {"partition", "loss", "dup", "reorder"}
OVERLAP_GAP_S = (1.0, 4.0)  # from the first fault to the second, and from healing B to healing A
# TCP counters read in every member's namespace and the clients' around dup/reorder faults:
# what the receivers saw (duplicate segments answered with a D-SACK; segments queued out of order).
TCP_COUNTERS = ("TcpExtTCPDSACKOldSent", "TcpExtTCPOFOQueue")
QUIET_S = (2.0, 5.0)
HOLD_S = (3.0, 10.0)
SERVE_WAIT_S = 60.0
VOLUME_MB = 256  # 64 MB filled by itself in 6 minutes (logs and snapshots are not purged)
FAULTFS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faultfs.py")
FAULTFS_PYTHON = "/usr/bin/python3"  # Debian's python3-fusepy lives there, not in the venv
MEMBER_FILES = {"zoo.cfg", "myid", "server.log", "pid", "faketime", "ballast", "lost+found"}


def _write(path, text):
    with open(path, "w") as f:
        f.write(text + "\n")


def _switch(path, fault, healed):
    """Writes `fault` to the control file `path` now; the returned heal writes `healed`."""
    _write(path, fault)
    return lambda: _write(path, healed)


class Nemesis:
    def __init__(self, seed, kinds, kind, ens_dir, n, log, overlap=False):
        self.rng = random.Random(f"nemesis-{seed}")
        self.kinds, self.kind, self.dir, self.n, self.log = kinds, kind, ens_dir, n, log
        self.overlap = overlap
        self.counts = {}
        self.overlaps = {}  # "A+B" -> times both were active at once
        self.tcp = dict.fromkeys(TCP_COUNTERS, 0)  # increments seen during dup/reorder faults
        self.findings = []  # problems the faults themselves revealed (e.g. a silent bit flip)
        self.stopped = set()
        self.rig_errors = []
        self.mounts, self.fuse_procs = [], []

    # -- plumbing -----------------------------------------------------------------------

    def sh(self, *args, timeout=120):
        return subprocess.run([NETNS_SH, *args], capture_output=True, text=True, timeout=timeout)

    def note(self, msg):
        self.log(f"nemesis: {msg}")

    def member_dir(self, i):
        return os.path.join(self.dir, str(i))

    def member_log(self, i):
        """Member i's server log: where scripts/netns.sh writes it (RK_NETNS_LOG_DIR, which
        scripts/chaos.sh sets: off the member's volume), else in its dir."""
        logs = os.environ.get("RK_NETNS_LOG_DIR")
        return os.path.join(logs, f"member{i}.server.log") if logs else os.path.join(self.member_dir(i), "server.log")

    def pid(self, i):
        try:
            with open(os.path.join(self.member_dir(i), "pid")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def alive(self, i):
        p = self.pid(i)
        if p is None:
            return False
        try:
            with open(f"/proc/{p}/stat") as f:
                return f.read().rsplit(") ", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def role(self, i):
        m = re.search(r"Mode: (\w+)", self.sh("srvr", str(i), timeout=10).stdout)
        return m.group(1) if m else None

    def leader(self):
        for i in range(1, self.n + 1):
            if self.role(i) == "leader":
                return i
        return None

    def victim(self):
        leader = self.leader()
        if leader and self.rng.random() < 0.5:
            return leader
        return self.rng.randrange(1, self.n + 1)

    def start_member(self, i):
        if self.alive(i):  # overlapping faults: e.g. a bitflip restarted a member a kill stopped
            self.note(f"member {i} is already running; not started again")
            return
        r = self.sh("member-start", self.kind, self.dir, str(i))
        if r.returncode != 0:
            self.note(f"member-start {i} failed: {r.stderr.strip()}")

    def kill9(self, i):
        p = self.pid(i)
        if p is None:
            return
        try:
            os.kill(p, signal.SIGCONT)
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for _ in range(100):
            if not self.alive(i):
                break
            time.sleep(0.05)
        self.stopped.discard(i)

    def wait_serving(self, ids, timeout=SERVE_WAIT_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            roles = {i: self.role(i) for i in ids}
            if all(r in ("leader", "follower", "observer") for r in roles.values()):
                return True
            time.sleep(0.5)
        return False

    # -- volumes (disk fault) ----------------------------------------------------------------

    def make_volumes(self, disk, ioerror):
        """Before the ensemble starts: with `disk`, each member's data on its own loop-mounted
        ext4; with `ioerror`, the member's dir is a faultfs mount (tests/chaos/faultfs.py) over
        its backing dir (the loop volume, if any), failing writes while DIR/I.ctl says eio."""
        for i in range(1, self.n + 1):
            d = self.member_dir(i)
            back = d + ".back" if ioerror else d
            os.makedirs(back, exist_ok=True)
            if disk:
                img = os.path.join(self.dir, f"vol{i}.img")
                subprocess.run(["truncate", "-s", f"{VOLUME_MB}M", img], check=True)
                subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True, capture_output=True)
                subprocess.run(["mount", "-o", "loop", img, back], check=True, capture_output=True)
                self.mounts.append(back)
            if ioerror:
                os.makedirs(d, exist_ok=True)
                _write(d + ".ctl", "ok")
                self.fuse_procs.append(subprocess.Popen(
                    [FAULTFS_PYTHON, FAULTFS, back, d, d + ".ctl"], stdout=subprocess.DEVNULL,
                    stderr=open(d + ".faultfs.log", "w")))
                for _ in range(100):
                    if os.path.ismount(d):
                        break
                    time.sleep(0.05)
                else:
                    raise RuntimeError(f"faultfs did not mount {d}")
                self.mounts.append(d)

    def drop_volumes(self):
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", m], capture_output=True)
        for p in self.fuse_procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.mounts, self.fuse_procs = [], []

    # -- faults --------------------------------------------------------------------------

    def partition(self):
        others = lambda i: [f"m{j}" for j in range(1, self.n + 1) if j != i]  # noqa: E731
        leader = self.leader() or 1
        shape = self.rng.choice(["minority", "leader", "oneway-in", "oneway-out", "bridge"])
        if shape in ("minority", "leader"):
            size = (self.n - 1) // 2
            cut = {leader} if shape == "leader" else set(self.rng.sample(range(1, self.n + 1), size))
            if shape == "leader" and size > 1:
                cut |= set(self.rng.sample([j for j in range(1, self.n + 1) if j != leader], size - 1))
            rest = [j for j in range(1, self.n + 1) if j not in cut]
            for i in cut:
                self.sh("block", str(i), *[f"m{j}" for j in rest])
            for j in rest:
                self.sh("block", str(j), *[f"m{i}" for i in cut])
            what = f"{shape}: {sorted(cut)} | {rest}"
        elif shape == "oneway-in":  # the leader hears no one
            self.sh("block", str(leader), *others(leader))
            what = f"one-way: leader {leader} receives nothing from the others"
        elif shape == "oneway-out":  # no one hears the leader
            for j in range(1, self.n + 1):
                if j != leader:
                    self.sh("block", str(j), f"m{leader}")
            what = f"one-way: nobody receives from leader {leader}"
        else:
            hub = self.rng.randrange(1, self.n + 1)
            rest = [j for j in range(1, self.n + 1) if j != hub]
            for j in rest:
                self.sh("block", str(j), *[f"m{k}" for k in rest if k != j])
            what = f"bridge: {hub} sees all, {rest} do not see each other"
        return what, lambda: self.sh("heal")

    def delay(self):
        us, jitter = self.rng.choice([2000, 10000, 50000]), self.rng.choice([0, 1000, 20000])
        self.sh("delay", str(us), str(jitter))
        return f"delay {us} us jitter {jitter} us", lambda: self.sh("delay", "0")

    def loss(self):
        """Random loss of packets arriving at every member (or at the leader alone)."""
        pct = self.rng.choice([1, 5, 20])
        leader = self.leader()
        targets = [leader] if leader and self.rng.random() < 0.5 else list(range(1, self.n + 1))
        for i in targets:
            self.sh("loss", str(i), str(pct))
        return f"loss {pct}% of packets arriving at {targets}", lambda: self.sh("heal")

    def tcp_counters(self):
        """The sums of TCP_COUNTERS over every member's namespace and the clients' (absolute,
        nstat's history untouched)."""
        tot = dict.fromkeys(TCP_COUNTERS, 0)
        for ns in [f"m{i}" for i in range(1, self.n + 1)] + ["c"]:
            out = self.sh("exec", ns, "nstat", "-as", *TCP_COUNTERS, timeout=10).stdout
            for line in out.splitlines():
                f = line.split()
                if len(f) >= 2 and f[0] in tot and f[1].isdigit():
                    tot[f[0]] += int(f[1])
        return tot

    def packet_fault(self, verb, what, pcts):
        """dup/reorder: PCT% of the packets sent by the leader, or by every member."""
        pct = self.rng.choice(pcts)
        leader = self.leader()
        targets = [leader] if leader and self.rng.random() < 0.5 else list(range(1, self.n + 1))
        before = self.tcp_counters()
        for i in targets:
            r = self.sh(verb, str(i), str(pct))
            if r.returncode != 0:
                self.rig_errors.append(f"{verb} {i} {pct}: {r.stderr.strip()}")

        def heal():
            self.sh("heal")
            after = self.tcp_counters()
            seen = {k: after[k] - before[k] for k in TCP_COUNTERS}
            for k, v in seen.items():
                self.tcp[k] += max(v, 0)
            self.note(f"{verb} healed; TCP counters over the members: {seen}")
        return f"{what} {pct}% of the packets sent by {targets}", heal

    def dup(self):
        return self.packet_fault("dup", "duplicate", [5, 20, 50])

    def reorder(self):
        return self.packet_fault("reorder", "reorder (slow class)", [5, 10, 20])

    def kill(self):
        i = self.victim()
        self.kill9(i)
        return f"kill -9 member {i}", lambda: self.start_member(i)

    def stop(self):
        i = self.victim()
        p = self.pid(i) if self.alive(i) else None  # overlapping faults: it may be dead
        if p:
            try:
                os.kill(p, signal.SIGSTOP)
                self.stopped.add(i)
            except ProcessLookupError:
                p = None

        def heal():
            if p:
                try:
                    os.kill(p, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            self.stopped.discard(i)
        return f"SIGSTOP member {i}", heal

    def clock(self):
        i = self.rng.randrange(1, self.n + 1)
        f = os.path.join(self.member_dir(i), "faketime")
        spec = self.rng.choice([f"{self.rng.choice('+-')}{self.rng.randint(5, 600)}", "+0 x2", "+0 x0.5"])
        return f"clock of member {i}: faketime {spec!r}", _switch(f, spec, "+0")

    def disk(self):
        i = self.rng.randrange(1, self.n + 1)
        ballast = os.path.join(self.member_dir(i), "ballast")
        st = os.statvfs(self.member_dir(i))
        subprocess.run(["fallocate", "-l", str(st.f_bavail * st.f_frsize), ballast], capture_output=True)
        fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:  # the last blocks fallocate left
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)

        def heal():
            try:
                os.unlink(ballast)
            except FileNotFoundError:
                pass
        return f"disk of member {i} full", heal

    def ioerror(self):
        i = self.victim()
        return (f"writes and fsyncs of member {i}'s data dir fail with EIO",
                _switch(self.member_dir(i) + ".ctl", "eio", "ok"))

    def bitflip(self):
        i = self.rng.randrange(1, self.n + 1)
        self.kill9(i)
        files = []
        for root, dirs, names in os.walk(self.member_dir(i)):
            dirs[:] = [d for d in dirs if d != "lost+found"]
            for nm in names:
                p = os.path.join(root, nm)
                if nm not in MEMBER_FILES and not nm.endswith(".img") and os.path.getsize(p) > 0:
                    files.append(p)
        if not files:
            return f"bitflip: member {i} has no files", lambda: self.start_member(i)
        path = self.rng.choice(sorted(files))
        with open(path, "r+b") as fh:
            data = fh.read()
            used = len(data.rstrip(b"\0")) or len(data)  # flip inside what was written
            off = self.rng.randrange(used)
            bit = self.rng.randrange(8)
            fh.seek(off)
            fh.write(bytes([data[off] ^ (1 << bit)]))
        rel = os.path.relpath(path, self.member_dir(i))
        log_path = self.member_log(i)
        log_start = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        self.start_member(i)
        self.note(f"bit {bit} of byte {off} of member {i}'s {rel} flipped; restarted")

        def heal():
            if self.wait_serving([i], timeout=20.0) and self.alive(i):
                self.note(f"member {i} serves after the flip in {rel}")
                return
            with open(log_path, errors="replace") as fh:
                fh.seek(log_start)
                tail = fh.read()
            named = os.path.basename(path) in tail
            if (self.alive(i) and os.path.exists(os.path.join(self.member_dir(i), "ballast"))
                    and "the disk is full" in tail):
                # An overlapping `disk` fault holds this member's volume full: it cannot log
                # what its leader sends to sync it, so it serves no one until there is room
                # (as ZooKeeper's follower); its log says so. Left as it is: once the disk is
                # healed it must sync and serve, which "members serve after healing" checks.
                self.note(f"member {i} does not serve after the flip in {rel} while its disk is full (its log "
                          f"says so); left to rejoin once the disk is healed")
                return
            self.note(f"member {i} does not serve after the flip in {rel}; its log "
                      f"{'names' if named else 'does NOT name'} the file; wiping it to rejoin")
            if not named:
                self.findings.append(f"member {i} did not serve after a bit flip in {rel} (byte {off}) and its "
                                     f"log does not name the file: {tail[-300:]!r}")
            self.wipe(i)
        return f"bitflip in member {i}'s {rel}", heal

    def wipe(self, i):
        """kill -9 member i, delete its data (not its config, log or pid), restart it: it
        rejoins with an empty dir (an operator's repair)."""
        self.kill9(i)
        for root, dirs, names in os.walk(self.member_dir(i), topdown=False):
            for nm in names:
                if root == self.member_dir(i) and nm in MEMBER_FILES:
                    continue
                os.unlink(os.path.join(root, nm))
            for d in dirs:
                if d != "lost+found":
                    os.rmdir(os.path.join(root, d))
        self.start_member(i)

    # -- schedule --------------------------------------------------------------------------

    def run(self, stop):
        try:
            self.schedule(stop)
        except Exception as e:  # a bug in the rig: reported as a rig error, never silent
            self.rig_errors.append(f"nemesis: {type(e).__name__}: {e}")
            self.note(f"rig error: {type(e).__name__}: {e}")

    def inject(self, kind):
        what, heal = getattr(self, kind)()
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.note(f"{kind}: {what}")
        return heal

    def schedule(self, stop):
        while not stop.is_set():
            if stop.wait(self.rng.uniform(*QUIET_S)):
                break
            kind = self.rng.choice(self.kinds)
            heal = self.inject(kind)
            second = None
            partners = [k for k in self.kinds if k != kind and not {k, kind} <= SHARED_HEAL]
            if self.overlap and partners:
                stop.wait(self.rng.uniform(*OVERLAP_GAP_S))
                second = self.rng.choice(partners)
                heal2 = self.inject(second)
                pair = "+".join(sorted([kind, second]))
                self.overlaps[pair] = self.overlaps.get(pair, 0) + 1
            stop.wait(self.rng.uniform(*HOLD_S))
            if second:
                heal2()
                self.note(f"healed {second} ({kind} still active)")
                stop.wait(self.rng.uniform(*OVERLAP_GAP_S))
            heal()
            self.note(f"healed {kind}")
            self.revive()

    def revive(self):
        """Restarts members that died (a crash under a fault is noted as a finding)."""
        for i in range(1, self.n + 1):
            if not self.alive(i) and i not in self.stopped:
                self.note(f"member {i} is not running; restarting it")
                self.start_member(i)

    def heal_all(self):
        self.sh("heal")
        self.sh("delay", "0")
        for i in range(1, self.n + 1):
            p = self.pid(i)
            if p:
                try:
                    os.kill(p, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            ft = os.path.join(self.member_dir(i), "faketime")
            if os.path.exists(ft):
                _write(ft, "+0")
            ballast = os.path.join(self.member_dir(i), "ballast")
            if os.path.exists(ballast):
                os.unlink(ballast)
            if os.path.exists(self.member_dir(i) + ".ctl"):
                _write(self.member_dir(i) + ".ctl", "ok")
        self.stopped.clear()
        self.revive()

"""Issue 17: an ensemble's leader writes its txn log beside its loop without ever blocking on
its disk, so a leader whose own disk is slow goes on taking in acks, committing and sending
heartbeats. Each member's dataLogDir is an ext4 volume whose flushes the test can make hang
(`HungDisks`). While the leader's disk hangs, the two followers are a quorum: writes through
the leader and through a follower commit and are answered (kazoo). ZooKeeper behaves so (its
SyncRequestProcessor is a thread of its own); a leader that called fdatasync on its loop's
thread stops until its disk returns, and loses its followers past syncLimit. A follower's
disk hanging likewise stops no write through the others. Once the hangs end, every member has
every write in its tree and in its own txn log. Needs root, loop devices and FUSE (Debian's
python3-fusepy); skips with the reason otherwise."""

import os
import subprocess
import time

import pytest
from kazoo.client import KazooClient

from helpers import REPO, RK_BIN, wait_until
from test_ensemble import Ensemble

FAULTFS = os.path.join(REPO, "tests", "chaos", "faultfs.py")
FAULTFS_PYTHON = "/usr/bin/python3"  # Debian's python3-fusepy lives there, not in the venv
# How long a write may take to be answered while one member's disk hangs: a bound on
# liveness (a member stuck on its disk never answers), not a latency figure.
ANSWER_S_MAX = 20


def _unavailable():
    if not os.access(RK_BIN, os.X_OK):
        return "ringkeeper binary not built"
    if os.geteuid() != 0:
        return "FUSE mounts need root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if subprocess.run([FAULTFS_PYTHON, "-c", "import fusepy"], capture_output=True).returncode != 0:
        return "python3-fusepy is not installed"
    return None


_why = _unavailable()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"cannot run: {_why}")


class HungDisks:
    """One ext4 volume per member for its dataLogDir, whose flushes can be made to hang: the
    volume is a loop device over an image on a faultfs mount (tests/chaos/faultfs.py). A FUSE
    file system answers an io_uring write on the submitting thread, so the log cannot live on
    faultfs itself; through ext4 and a loop device the writes are the kernel's own, and a
    flush (fdatasync, or an O_DSYNC write's) reaches faultfs as the loop device's fsync of
    its image, which "stall" holds."""

    VOLUME_MB = 128

    def __init__(self, root, n):
        self.root, self.fuse, self.procs, self.loops, self.volumes = root, [], [], [], []
        for i in range(1, n + 1):
            back, fs, vol = (os.path.join(root, f"{k}{i}") for k in ("back", "fs", "log"))
            for d in (back, fs, vol):
                os.makedirs(d)
            self.say(i, "ok")
            self.procs.append(subprocess.Popen([FAULTFS_PYTHON, FAULTFS, back, fs, fs + ".ctl"],
                                               stdout=subprocess.DEVNULL, stderr=open(fs + ".faultfs.log", "w")))
            wait_until(lambda: os.path.ismount(fs), timeout=10, what=f"faultfs mounted at {fs}")
            self.fuse.append(fs)
            img = os.path.join(fs, "volume.img")
            subprocess.run(["truncate", "-s", f"{self.VOLUME_MB}M", img], check=True)
            subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True, capture_output=True)
            loop = subprocess.run(["losetup", "-f", "--show", img], check=True, capture_output=True,
                                  text=True).stdout.strip()
            self.loops.append(loop)
            subprocess.run(["mount", loop, vol], check=True, capture_output=True)
            self.volumes.append(vol)

    @staticmethod
    def log_dir(root, i):
        return os.path.join(root, f"log{i}")

    def say(self, i, word):
        with open(os.path.join(self.root, f"fs{i}.ctl"), "w") as f:
            f.write(word)

    def hang(self, i):
        self.say(i, "stall")

    def lift(self, i):
        self.say(i, "ok")

    def close(self):
        for i in range(1, len(self.fuse) + 1):
            self.say(i, "ok")
        for v in self.volumes:
            subprocess.run(["umount", v], capture_output=True)
        for loop in self.loops:
            subprocess.run(["losetup", "-d", loop], capture_output=True)
        for m in self.fuse:
            subprocess.run(["umount", "-l", m], capture_output=True)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _client(e, i):
    kz = KazooClient(hosts=e.hostport(i), timeout=10.0)
    kz.start(timeout=15)
    return kz


def _answered(kz, path, data):
    """Creates `path` and waits for the answer, at most ANSWER_S_MAX seconds."""
    kz.create_async(path, data).get(timeout=ANSWER_S_MAX)


def _tear_down(disks, clients, e):
    """Lifts every hang, stops the clients and the ensemble, removes the volumes."""
    for i in (1, 2, 3):
        disks.lift(i)
    for c in clients:
        try:
            c.stop()
            c.close()
        except Exception:
            pass
    try:
        e.stop()
    finally:
        disks.close()


def _stop_and_check_logged(clients, e, tmp_path, written):
    """Stops the clients (emptying `clients`) and the ensemble; then every member's own txn
    log holds every write in `written` (`ringkeeper log-dump`)."""
    while clients:
        c = clients.pop()
        c.stop()
        c.close()
    e.stop()
    for i in (1, 2, 3):
        logged = ""
        log_dir = os.path.join(HungDisks.log_dir(str(tmp_path / "disks"), i), "version-2")
        if not os.path.isdir(log_dir):
            log_dir = HungDisks.log_dir(str(tmp_path / "disks"), i)
        for name in sorted(os.listdir(log_dir)):
            if name.startswith("log.") and name[4:].isalnum():
                r = subprocess.run([RK_BIN, "log-dump", os.path.join(log_dir, name)], capture_output=True,
                                   text=True, timeout=30)
                assert r.returncode == 0, r.stderr
                logged += r.stdout
        for who in written:
            assert f"/overlap/{who}" in logged, (i, who, logged[-2000:])


@pytest.mark.timeout(240)
def test_a_quorum_commits_while_one_members_disk_hangs(tmp_path):
    disks = HungDisks(str(tmp_path / "disks"), 3)
    e = Ensemble(3, tmp_path)
    e.env["RK_EXTRA_CONFIG"] = f"dataLogDir={HungDisks.log_dir(str(tmp_path / 'disks'), '@ID@')}"
    clients = []
    try:
        e.start()
        leader = e.wait_serving([1, 2, 3])
        f1, f2 = [i for i in (1, 2, 3) if i != leader]
        for i in (1, 2, 3):
            clients.append(_client(e, i))
        kz = {i: clients[i - 1] for i in (1, 2, 3)}
        kz[leader].create("/overlap", b"")
        written = {}

        # The leader's disk hangs: the followers' acks commit writes through the leader and
        # through a follower; the leader applies them and answers its own client.
        disks.hang(leader)
        for i, who in ((leader, "via-hung-leader"), (f1, "via-follower")):
            _answered(kz[i], f"/overlap/{who}", who.encode())
            written[who] = who.encode()
        disks.lift(leader)

        # A follower's disk hangs: writes through the leader and the other follower are
        # committed by those two (the hung follower acks only after its own sync).
        disks.hang(f1)
        for i, who in ((leader, "via-leader"), (f2, "via-other-follower")):
            _answered(kz[i], f"/overlap/{who}", who.encode())
            written[who] = who.encode()
        disks.lift(f1)

        # Every member has every write in its tree...
        for i in (1, 2, 3):
            kz[i].sync("/overlap")
            assert {c: kz[i].get(f"/overlap/{c}")[0] for c in kz[i].get_children("/overlap")} == written, i
        # ... and in its own txn log, once its disk returned (the hung ones included).
        _stop_and_check_logged(clients, e, tmp_path, written)
    finally:
        _tear_down(disks, clients, e)


# This test's tick: syncLimit (5 ticks) 5 s, the shortest session 2 s (2 ticks).
SLOW_TICK_MS = 1000
SESSION_S = 2.0
SYNC_LIMIT_S = 5 * SLOW_TICK_MS / 1000
# A hang longer than a session's timeout and shorter than syncLimit.
HANG_SHORT_S = 3.5


@pytest.mark.timeout(240)
def test_a_follower_whose_disk_hangs_keeps_its_sessions_until_synclimit(tmp_path):
    """A follower's loop never stops on its disk, as ZooKeeper's follower goes on while its
    SyncRequestProcessor waits: during a hang shorter than syncLimit it answers its leader's
    pings (which carry its clients' session touches), so a session on it outlives a hang
    longer than the session's timeout, and it applies the commits the other two make, so a
    write through it is answered while its own disk hangs. A hang past syncLimit with acks
    owed gets it dropped by the leader (ZooKeeper's transaction timeout), and once its disk
    returns it syncs and has every write."""
    disks = HungDisks(str(tmp_path / "disks"), 3)
    e = Ensemble(3, tmp_path)
    e.env["RK_TICK_TIME"] = str(SLOW_TICK_MS)
    e.env["RK_EXTRA_CONFIG"] = f"dataLogDir={HungDisks.log_dir(str(tmp_path / 'disks'), '@ID@')}"
    clients = []
    try:
        e.start()
        leader = e.wait_serving([1, 2, 3], timeout=60)
        hung = next(i for i in (1, 2, 3) if i != leader)
        kz_leader = _client(e, leader)
        clients.append(kz_leader)
        kz = KazooClient(hosts=e.hostport(hung), timeout=SESSION_S)
        clients.append(kz)
        kz.start(timeout=15)
        states = []
        kz.add_listener(states.append)
        session = kz.client_id[0]
        assert kz._session_timeout <= SESSION_S * 1000, kz._session_timeout
        kz.create("/overlap", b"")
        kz.create("/overlap/mine", b"", ephemeral=True)
        written = {}

        disks.hang(hung)
        hung_at = time.monotonic()
        # Its clients' writes are answered: the leader and the other follower commit them,
        # and the hung follower applies their commits while its own write waits.
        _answered(kz, "/overlap/via-hung-follower", b"via-hung-follower")
        written["via-hung-follower"] = b"via-hung-follower"
        assert time.monotonic() - hung_at < HANG_SHORT_S, "the write waited for the hung disk"
        time.sleep(max(0.0, HANG_SHORT_S - (time.monotonic() - hung_at)))
        disks.lift(hung)
        time.sleep(SESSION_S)
        # The session lived through a hang longer than its timeout; its ephemeral too.
        assert kz.client_id[0] == session and "LOST" not in states, states
        assert kz_leader.exists("/overlap/mine") is not None, "the hung follower's session expired"

        # Past syncLimit, with an ack owed: dropped by the leader, as ZooKeeper's leader does.
        disks.hang(hung)
        kz_leader.create("/overlap/while-dropped", b"while-dropped")
        written["while-dropped"] = b"while-dropped"
        wait_until(lambda: "acknowledged none of its outstanding proposals" in e.log(leader),
                   timeout=SYNC_LIMIT_S + 15, what="the leader to drop the follower that owes acks")
        disks.lift(hung)
        e.wait_serving([1, 2, 3], timeout=60)
        kz_back = _client(e, hung)
        clients.append(kz_back)
        kz_back.sync("/overlap")
        got = {c: kz_back.get(f"/overlap/{c}")[0] for c in kz_back.get_children("/overlap")}
        assert {c: v for c, v in got.items() if c != "mine"} == written, got
        _stop_and_check_logged(clients, e, tmp_path, written)
    finally:
        _tear_down(disks, clients, e)

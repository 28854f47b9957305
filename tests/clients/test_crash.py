"""Crash safety (ringkeeper only; RK_ONLY_TESTS_ON_APACHE=1 runs them on Apache too):
kill -9 under concurrent write load loses no acknowledged write; after snapshots, two
restarts in a row give the same tree (paths, data, all Stat fields, ACLs)."""

import threading
import time

import pytest

import rawzk

pytestmark = pytest.mark.ringkeeper_only


def dump_tree(hostport, root="/"):
    """{path: (data, Stat, ACL list)} for every node, /zookeeper/config excluded."""
    out = {}
    with rawzk.RawConn(hostport, timeout_ms=10000) as c:
        stack = [root]
        while stack:
            p = stack.pop()
            data, st = c.get_data(p)
            acl, _ = c.get_acl(p)
            out[p] = (data, st, acl)
            for k in c.get_children(p):
                child = (p.rstrip("/") + "/" + k)
                if child != "/zookeeper/config":
                    stack.append(child)
        c.close_session()
    return out


def test_kill9_under_load_keeps_acknowledged_writes(make_server, kazoo_factory):
    """N kazoo writers create persistent and sequential nodes (and overwrite data) while
    the server is killed with SIGKILL; after a restart on the same data dir every
    acknowledged create and setData is there with its data."""
    from kazoo.retry import KazooRetry
    s = make_server(snapCount=200)
    setup = kazoo_factory(s.hostport)
    setup.create("/crash")
    setup.create("/crash/seq")
    setup.create("/crash/reg", b"0")
    setup.stop()

    n_writers = 4
    acked = [[] for _ in range(n_writers)]      # (path, data)
    acked_sets = [[] for _ in range(n_writers)]  # (version, data) on /crash/reg
    errors = []
    stop = threading.Event()
    clients = [kazoo_factory(s.hostport, connection_retry=KazooRetry(max_tries=0),
                             command_retry=KazooRetry(max_tries=0)) for _ in range(n_writers)]

    def writer(t):
        zk = clients[t]
        i = 0
        try:
            while not stop.is_set():
                data = f"w{t}-{i}".encode()
                if i % 3 == 0:
                    p = zk.create("/crash/seq/n-", data, sequence=True)
                elif i % 3 == 1:
                    p = zk.create(f"/crash/w{t}-{i}", data)
                else:
                    st = zk.set("/crash/reg", data)
                    acked_sets[t].append((st.version, data))
                    i += 1
                    continue
                acked[t].append((p, data))
                i += 1
        except Exception as e:  # connection loss once the server is gone
            errors.append(repr(e))

    threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(n_writers)]
    for th in threads:
        th.start()
    time.sleep(1.5)
    total_before_kill = sum(map(len, acked))
    s.kill9()
    stop.set()
    for th in threads:
        th.join(20)
    assert not any(th.is_alive() for th in threads)
    for c in clients:
        c.stop()
    all_acked = [x for lst in acked for x in lst]
    assert total_before_kill > 50, f"too little load generated ({total_before_kill} writes)"

    s.start()
    verify = kazoo_factory(s.hostport)
    missing = []
    for p, data in all_acked:
        try:
            got, _ = verify.get(p)
        except Exception as e:
            missing.append((p, repr(e)))
            continue
        if got != data:
            missing.append((p, got, data))
    print(f"{len(all_acked)} creates and {sum(map(len, acked_sets))} sets acknowledged "
          f"before kill -9; writer errors: {errors[:2]}")
    assert not missing, f"{len(missing)} of {len(all_acked)} acknowledged creates lost: {missing[:10]}"
    # the register's version is at least the highest acknowledged one, and if equal the
    # data is the acknowledged data
    data, st = verify.get("/crash/reg")
    top = max((v for lst in acked_sets for v in lst), default=(0, b"0"))
    assert st.version >= top[0]
    if st.version == top[0]:
        assert data == top[1]
    # sequence numbers stayed unique and the counter continues after them
    seq = verify.get_children("/crash/seq")
    assert len(seq) == len(set(seq))
    nxt = verify.create("/crash/seq/n-", sequence=True)
    assert int(nxt[-10:]) >= max(int(x[-10:]) for x in seq) + 1 if seq else True


def test_restart_after_snapshots_gives_same_tree(make_server):
    """With snapCount=100, write ~600 txns (creates, sets, deletes, ACLs, a multi), kill -9,
    restart, dump the whole tree; kill -9 and restart again: the dump is identical, and a
    graceful SIGTERM restart gives the same tree again."""
    s = make_server(snapCount=100)
    with rawzk.RawConn(s.hostport) as c:
        c.create("/snap", b"root")
        for i in range(150):
            c.create(f"/snap/n{i:03d}", f"d{i}".encode())
        for i in range(0, 150, 2):
            c.set_data(f"/snap/n{i:03d}", f"v2-{i}".encode())
        for i in range(0, 150, 5):
            c.delete(f"/snap/n{i:03d}")
        for i in range(100):
            c.create("/snap/s-", f"s{i}".encode(), flags=rawzk.PERSISTENT_SEQUENTIAL)
        c.create("/snap/deep")
        for i in range(50):
            c.create(f"/snap/deep/{i}", bytes([i]) * i)
        c.set_acl("/snap/n001", [rawzk.ACL(rawzk.PERM_READ | rawzk.PERM_ADMIN, "world", "anyone")])
        err, _ = c.multi([rawzk.m_create("/snap/m"), rawzk.m_set("/snap", b"multi"),
                          rawzk.m_delete("/snap/n003")])
        assert err == 0
        last = c.last_zxid
    s.kill9()
    s.start()
    first = dump_tree(s.hostport)
    assert first["/snap"][0] == b"multi"
    assert "/snap/n003" not in first and "/snap/m" in first
    assert len([p for p in first if p.startswith("/snap/s-")]) == 100
    assert first["/snap/n001"][2] == [rawzk.ACL(17, "world", "anyone")]
    assert max(st.mzxid for _, st, _ in first.values()) == last
    s.kill9()
    s.start()
    second = dump_tree(s.hostport)
    assert_same_tree(first, second)
    rc = s.stop()
    if s.kind == "ringkeeper":
        assert rc == 0          # Apache's JVM exits 143 on SIGTERM
    s.start()
    assert_same_tree(first, dump_tree(s.hostport))


def assert_same_tree(a, b):
    assert sorted(a) == sorted(b), (set(a) ^ set(b))
    diffs = [(p, a[p], b[p]) for p in a if a[p] != b[p]]
    assert not diffs, f"{len(diffs)} nodes differ, e.g. {diffs[:3]}"


SECTOR, PAYLOAD = 512, 508


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli), as the txn log uses it."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def seal(index, payload):
    """Sector `index` holding `payload` (docs/storage-format.md: payload, then the CRC-32C of
    the sector's file offset as u64 BE followed by the payload)."""
    payload = payload.ljust(PAYLOAD, b"\0")
    return payload + crc32c((index * SECTOR).to_bytes(8, "big") + payload).to_bytes(4, "big")


def log_batches(log_dir):
    """(segment path, logical stream, [logical offsets of batches]) of the newest txn log
    segment: the sectors' payloads laid end to end, walked batch by batch."""
    import os
    segs = sorted(n for n in os.listdir(log_dir) if n.startswith("log.") and n != "log.spare")
    path = os.path.join(log_dir, segs[-1])
    with open(path, "rb") as f:
        data = f.read()
    stream = b"".join(data[o:o + PAYLOAD] for o in range(0, len(data), SECTOR))
    batches, off = [], 0
    while stream[off:off + 4] == b"RKLB":
        batches.append(off)
        body_len = int.from_bytes(stream[off + 12:off + 16], "big")
        off += (40 + body_len + 7) // 8 * 8
    return path, stream, batches


def file_offset(logical):
    return logical // PAYLOAD * SECTOR + logical % PAYLOAD


def test_damaged_log_refuses_to_start_and_torn_tail_is_cut(make_server):
    """A flipped bit anywhere in a written sector is corruption: the server refuses to start
    and names the file and byte. A batch whose write never completed (its sectors valid or
    never written, at the end of the log) is a torn write: the server starts, keeps every
    acknowledged write, and goes on writing."""
    s = make_server()
    if s.kind != "ringkeeper":
        pytest.skip("ringkeeper's own log format")
    with rawzk.RawConn(s.hostport) as c:
        for i in range(5):
            c.create(f"/d{i}", f"v{i}".encode())
    s.kill9()
    path, stream, batches = log_batches(s.log_dir)
    assert len(batches) >= 5, batches

    # torn tail: the first sector of a batch after the last one reached the disk, the rest
    # did not (its header promises a 5000-byte body)
    end = batches[-1] + (40 + int.from_bytes(stream[batches[-1] + 12:batches[-1] + 16], "big") + 7) // 8 * 8
    index = end // PAYLOAD
    head = stream[index * PAYLOAD:end] + b"RKLB" + (2).to_bytes(4, "big") + b"\0" * 4 + \
        (5000).to_bytes(4, "big") + b"\x5a" * 200
    with open(path, "r+b") as f:
        f.seek(index * SECTOR)
        f.write(seal(index, head[:PAYLOAD]))
    s.start()
    with rawzk.RawConn(s.hostport) as c:
        assert [c.get_data(f"/d{i}")[0] for i in range(5)] == [f"v{i}".encode() for i in range(5)]
        c.create("/after-torn-tail", b"t")
    assert "torn" in s.log_text().lower()
    s.kill9()

    # corruption: a flipped byte inside the first client write's batch, valid batches after it
    path, stream, batches = log_batches(s.log_dir)
    at = file_offset(batches[1] + 40)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xff]))
    with pytest.raises(RuntimeError) as failed:
        s.start()
    msg = str(failed.value)
    assert "corrupt" in msg and path.rsplit("/", 1)[1] in msg and f"byte {at // SECTOR * SECTOR}" in msg, msg
    assert "panicked" not in msg

"""Watches: the one-shot trigger table, persistent and recursive watches (addWatch),
removeWatches / checkWatches, setWatches(2) on reconnect, and the ordering of a
notification before the reply of the write that fired it. Mostly rawzk (exact frames),
plus kazoo's watch callbacks."""

import threading

import rawzk
from rawzk import (EV_NODE_CHILDREN_CHANGED as CHILD, EV_NODE_CREATED as CREATED,
                   EV_NODE_DATA_CHANGED as CHANGED, EV_NODE_DELETED as DELETED)
from helpers import wait_until

QUIET = 0.3  # seconds without a frame after which no more events are expected


def evs(conn, quiet=QUIET):
    """Drain events from conn and return [(type, path)], clearing the list."""
    out = [(e.type, e.path) for e in conn.quiet_events(quiet)]
    for e in conn.events:
        assert e.state == 3, e  # SyncConnected
    conn.events.clear()
    return out


def test_exists_watch_trigger_table(raw, base):
    """exists-watch: NodeCreated on create of an absent node; NodeDataChanged on set;
    NodeDeleted on delete; not fired by setACL or child changes; one-shot."""
    w, c = raw(), raw()
    p = f"{base}/x"
    assert w.exists(p, watch=True) is None
    c.create(p, b"1")
    assert evs(w) == [(CREATED, p)]
    c.set_data(p, b"2")
    assert evs(w) == []                    # one-shot: already fired
    w.exists(p, watch=True)
    c.set_acl(p, rawzk.OPEN_ACL_UNSAFE)
    c.create(f"{p}/kid")
    c.delete(f"{p}/kid")
    assert evs(w) == []
    c.set_data(p, b"3")
    assert evs(w) == [(CHANGED, p)]
    w.exists(p, watch=True)
    c.delete(p)
    assert evs(w) == [(DELETED, p)]


def test_data_watch_trigger_table(raw, base):
    """getData-watch: NodeDataChanged on set (even with equal data), NodeDeleted on
    delete; a failed (bad version) set fires nothing."""
    w, c = raw(), raw()
    p = f"{base}/d"
    c.create(p, b"a")
    w.get_data(p, watch=True)
    assert c.call_err(rawzk.OP_SETDATA, rawzk.Writer().ustring(p).buffer(b"z").int(5)
                      .bytes()) == rawzk.BAD_VERSION
    assert evs(w) == []
    c.set_data(p, b"a")
    assert evs(w) == [(CHANGED, p)]
    w.get_data(p, watch=True)
    c.delete(p)
    assert evs(w) == [(DELETED, p)]


def test_child_watch_trigger_table(raw, base):
    """getChildren-watch: NodeChildrenChanged on child create and child delete,
    NodeDeleted when the node itself goes; not fired by set on the node, set on a child,
    or grandchild changes."""
    w, c = raw(), raw()
    p = f"{base}/p"
    c.create(p)
    c.create(f"{p}/k")
    w.get_children(p, watch=True)
    c.set_data(p, b"x")
    c.set_data(f"{p}/k", b"x")
    c.create(f"{p}/k/g")
    c.delete(f"{p}/k/g")
    assert evs(w) == []
    c.create(f"{p}/k2")
    assert evs(w) == [(CHILD, p)]
    w.get_children2(p, watch=True)
    c.delete(f"{p}/k2")
    assert evs(w) == [(CHILD, p)]
    w.get_children(p, watch=True)
    c.delete(f"{p}/k")
    assert evs(w) == [(CHILD, p)]
    w.get_children(p, watch=True)
    c.delete(p)
    assert evs(w) == [(DELETED, p)]


def test_combined_watches_one_event_per_type(raw, base):
    """A node watched by exists + getData + getChildren of one session: a delete sends
    one NodeDeleted (not three) and the parent's child watch gets NodeChildrenChanged."""
    w, c = raw(), raw()
    p = f"{base}/n"
    c.create(p)
    w.exists(p, watch=True)
    w.get_data(p, watch=True)
    w.get_children(p, watch=True)
    w.get_children(base, watch=True)
    c.delete(p)
    got = evs(w)
    assert sorted(got) == sorted([(DELETED, p), (CHILD, base)])


def test_multi_fires_watches(raw, base):
    """A committed multi fires the watches of each op; a rolled-back one fires none."""
    w, c = raw(), raw()
    a, b = f"{base}/a", f"{base}/b"
    c.create(a)
    w.get_data(a, watch=True)
    w.exists(b, watch=True)
    err, _ = c.multi([rawzk.m_set(a, b"1"), rawzk.m_create(b), rawzk.m_check(a, 99)])
    assert err == 0
    assert evs(w) == []
    err, res = c.multi([rawzk.m_set(a, b"1"), rawzk.m_create(b)])
    assert err == 0 and res[1].err == 0
    assert sorted(evs(w)) == sorted([(CHANGED, a), (CREATED, b)])


def test_notification_precedes_reply_of_triggering_write(raw, base):
    """A connection that watches a node and then writes it receives the notification
    frame (xid -1) before the reply to its own write."""
    a = raw()
    p = f"{base}/self"
    a.create(p)
    a.get_data(p, watch=True)
    a.get_children(base, watch=True)
    xid = a.send_request(rawzk.OP_SETDATA, rawzk.Writer().ustring(p).buffer(b"v").int(-1).bytes())
    hdr1, ev = a.read_frame_parsed()
    assert hdr1.xid == rawzk.XID_NOTIFICATION and ev.type == CHANGED and ev.path == p
    hdr2, _ = a.read_frame_parsed()
    assert hdr2.xid == xid and hdr2.err == 0
    # delete fires the parent's child watch, again before the reply
    a.exists(p, watch=True)
    xid = a.send_request(rawzk.OP_DELETE, rawzk.Writer().ustring(p).int(-1).bytes())
    frames = [a.read_frame_parsed()[0].xid for _ in range(3)]
    assert frames == [rawzk.XID_NOTIFICATION, rawzk.XID_NOTIFICATION, xid]
    assert sorted((e.type, e.path) for e in a.events[-2:]) == sorted([(DELETED, p), (CHILD, base)])


def test_other_sessions_see_event_before_reading_new_state(raw, base):
    """Watcher B gets the notification; a read after it sees the new value."""
    a, b = raw(), raw()
    p = f"{base}/v"
    a.create(p, b"old")
    b.get_data(p, watch=True)
    a.set_data(p, b"new")
    assert b.wait_events(1)[0].type == CHANGED
    assert b.get_data(p)[0] == b"new"


def test_persistent_watch(raw, base):
    """addWatch PERSISTENT: fires for the node's create/set/delete and its direct
    children changes, and stays registered after firing; not for grandchildren."""
    w, c = raw(), raw()
    p = f"{base}/pw"
    w.add_watch(p, rawzk.AW_PERSISTENT)
    c.create(p)
    c.set_data(p, b"1")
    c.set_data(p, b"2")
    c.create(f"{p}/k")
    c.create(f"{p}/k/g")
    c.set_data(f"{p}/k", b"x")
    c.delete(f"{p}/k/g")
    c.delete(f"{p}/k")
    c.delete(p)
    c.create(p)
    assert evs(w) == [(CREATED, p), (CHANGED, p), (CHANGED, p), (CHILD, p), (CHILD, p),
                      (DELETED, p), (CREATED, p)]
    assert w.check_watches_err(p, rawzk.WT_ANY) == 0


def test_persistent_recursive_watch(raw, base):
    """addWatch PERSISTENT_RECURSIVE: created/changed/deleted for the node and every
    descendant, never NodeChildrenChanged; stays registered."""
    w, c = raw(), raw()
    p = f"{base}/rw"
    w.add_watch(p, rawzk.AW_PERSISTENT_RECURSIVE)
    c.create(p)
    c.create(f"{p}/a")
    c.create(f"{p}/a/b")
    c.set_data(f"{p}/a/b", b"x")
    c.delete(f"{p}/a/b")
    c.create(f"{base}/rwother")  # sibling with a common name prefix: not watched
    assert evs(w) == [(CREATED, p), (CREATED, f"{p}/a"), (CREATED, f"{p}/a/b"),
                      (CHANGED, f"{p}/a/b"), (DELETED, f"{p}/a/b")]


def test_remove_and_check_watches(raw, base):
    """checkWatches/removeWatches: 0 when such a watch exists, NoWatcher (-121) otherwise;
    a removed watch no longer fires; removing by type leaves the other type."""
    w, c = raw(), raw()
    p = f"{base}/r"
    c.create(p)
    assert w.check_watches_err(p, rawzk.WT_DATA) == rawzk.NO_WATCHER
    assert w.remove_watches_err(p, rawzk.WT_ANY) == rawzk.NO_WATCHER
    w.get_data(p, watch=True)
    w.get_children(p, watch=True)
    assert w.check_watches_err(p, rawzk.WT_DATA) == 0
    assert w.check_watches_err(p, rawzk.WT_CHILDREN) == 0
    assert w.remove_watches_err(p, rawzk.WT_DATA) == 0
    assert w.check_watches_err(p, rawzk.WT_DATA) == rawzk.NO_WATCHER
    c.set_data(p, b"x")
    assert evs(w) == []
    c.create(f"{p}/k")
    assert evs(w) == [(CHILD, p)]
    w.get_data(p, watch=True)
    w.add_watch(f"{base}/other", rawzk.AW_PERSISTENT)
    assert w.remove_watches_err(p, rawzk.WT_ANY) == 0
    assert w.remove_watches_err(f"{base}/other", rawzk.WT_ANY) == 0
    c.set_data(p, b"y")
    c.create(f"{base}/other")
    assert evs(w) == []
    # another session's watch is not ours to remove
    c.get_data(p, watch=True)
    assert w.remove_watches_err(p, rawzk.WT_DATA) == rawzk.NO_WATCHER


def test_set_watches_on_reconnect_fires_missed_events(raw, server, base):
    """A client that reconnects with SetWatches(relativeZxid) gets the events it missed:
    NodeDataChanged for a data watch on a node changed after that zxid, NodeCreated for an
    exist watch on a node created since, NodeChildrenChanged for a child watch, and
    NodeDeleted for a data watch on a node that is gone. Unchanged nodes fire nothing."""
    a = raw(timeout_ms=20000)
    c = raw()
    d, e, ch, gone, same = (f"{base}/{n}" for n in ("d", "e", "ch", "gone", "same"))
    for n in (d, ch, gone, same):
        a.create(n)
    a.get_data(same)
    rel = a.last_zxid
    a.close()                              # drop the socket, not the session
    c.set_data(d, b"x")
    c.create(e)
    c.create(f"{ch}/k")
    c.delete(gone)
    b = raw(session_id=a.session.session_id, passwd=a.session.passwd, last_zxid=rel,
            timeout_ms=20000)
    assert b.session.timeout > 0
    hdr = b.set_watches(rel, data=[d, gone, same], exist=[e], child=[ch])
    assert hdr.err == 0
    got = evs(b)
    assert sorted(got) == sorted([(CHANGED, d), (DELETED, gone), (CREATED, e), (CHILD, ch)])


def test_set_watches2_persistent(raw, base):
    """SetWatches2 re-registers persistent and recursive watches: they fire afterwards
    (and keep firing)."""
    b, c = raw(), raw()
    p, r = f"{base}/p", f"{base}/r"
    c.create(p)
    c.create(r)
    hdr = b.set_watches(c.last_zxid, persistent=[p], recursive=[r])
    assert hdr.err == 0
    assert evs(b) == []
    c.set_data(p, b"1")
    c.set_data(p, b"2")
    c.create(f"{r}/x")
    c.create(f"{r}/x/y")
    assert evs(b) == [(CHANGED, p), (CHANGED, p), (CREATED, f"{r}/x"), (CREATED, f"{r}/x/y")]


def test_kazoo_watch_callbacks(zk, kazoo_factory, server, base):
    """kazoo data and child watch callbacks fire once per registration with the right
    event type and path."""
    other = kazoo_factory(server.hostport)
    p = f"{base}/k"
    zk.create(p, b"0")
    got = []
    lock = threading.Lock()

    def cb(ev):
        with lock:
            got.append((ev.type, ev.path))

    zk.get(p, watch=cb)
    zk.get_children(base, watch=cb)
    zk.exists(f"{base}/absent", watch=cb)
    other.set(p, b"1")
    other.create(f"{base}/absent")
    wait_until(lambda: len(got) >= 3, timeout=5, what="kazoo callbacks")
    assert sorted(got) == sorted([("CHANGED", p), ("CHILD", base), ("CREATED", f"{base}/absent")])


def test_kazoo_datawatch_survives_reconnect(zk, server, base):
    """kazoo's connection is taken over (another socket resumes its session, so the
    server closes kazoo's socket), the node changes while kazoo is away; kazoo resumes
    its session on a new connection and its DataWatch recipe sees the new data.
    (kazoo itself drops one-shot watches on a connection loss — it fires them with a NONE
    event — so the raw SetWatches path is covered by test_set_watches_on_reconnect_*.)"""
    from kazoo.recipe.watchers import DataWatch
    p = f"{base}/rw"
    zk.create(p, b"0")
    seen = []
    DataWatch(zk, p, func=lambda data, stat: seen.append(data))
    wait_until(lambda: seen == [b"0"], timeout=5, what="initial DataWatch call")
    sid, pw = zk.client_id
    try:
        with rawzk.RawConn(server.hostport, session_id=sid, passwd=pw, timeout_ms=10000) as r:
            assert r.session.session_id == sid
            r.set_data(p, b"changed-while-away")
    except (rawzk.ConnectionClosed, rawzk.ReadTimeout):
        # kazoo won the race and reconnected first; change the node from elsewhere
        with rawzk.RawConn(server.hostport) as other:
            other.set_data(p, b"changed-while-away")
    wait_until(lambda: b"changed-while-away" in seen, timeout=15,
               what="DataWatch update after kazoo reconnect")
    assert zk.client_id[0] == sid, "kazoo resumed the same session"
    assert zk.retry(zk.get, p)[0] == b"changed-while-away"

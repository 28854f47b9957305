"""Several client cores (ringkeeper.clientCores=2): connections land on either core through
SO_REUSEPORT, each core answers reads from the root of the one tree it last took, and the guarantees still hold
across cores: sync then read sees every acknowledged write, a watch fires for a write made
through the other core, a session resumed on a connection that landed on the other core
keeps its ephemerals and closes the old connection. Apache ignores the ringkeeper.* key,
so the same test checks the expectations against it."""

import rawzk

CONNECTIONS = 16


def test_writes_watches_and_sessions_across_cores(make_server):
    s = make_server(ringkeeper__clientCores=2)
    conns = [rawzk.RawConn(s.hostport, timeout_ms=10000, io_timeout=5) for _ in range(CONNECTIONS)]
    try:
        conns[0].create("/mc")
        watcher = conns[0]
        assert watcher.get_children("/mc", watch=True) == []
        for i, c in enumerate(conns):
            c.create(f"/mc/n{i:02d}", str(i).encode(), flags=rawzk.EPHEMERAL)
        # a child watch set through one connection fires for a create made through any other
        assert [(e.type, e.path) for e in watcher.wait_events(1)] == [(4, "/mc")]
        expected = [f"n{i:02d}" for i in range(CONNECTIONS)]
        for c in conns:
            assert c.sync("/mc") == "/mc"
            assert sorted(c.get_children("/mc")) == expected
        # data written through one connection is read back through every other
        conns[-1].set_data("/mc/n00", b"changed")
        for c in conns:
            c.sync("/mc/n00")
            data, st = c.get_data("/mc/n00")
            assert (data, st.version) == (b"changed", 1)

        # resume one session on fresh connections, one after another: the previous connection
        # is closed by the server each time, and the session's ephemeral stays its own
        owner = conns[3]
        sid, pw = owner.session.session_id, owner.session.passwd
        previous = owner
        for _ in range(6):
            nxt = rawzk.RawConn(s.hostport, timeout_ms=10000, session_id=sid, passwd=pw,
                                last_zxid=previous.last_zxid, io_timeout=5)
            assert nxt.session.session_id == sid and nxt.session.timeout > 0
            assert previous.wait_closed(5)[0], "the old connection of a resumed session is closed"
            assert nxt.exists("/mc/n03").ephemeralOwner == sid
            assert f"/mc/n03" in nxt.get_ephemerals("/mc")
            previous = nxt
        conns[3] = previous

        # closing sessions removes their ephemerals everywhere
        for i in range(0, CONNECTIONS, 2):
            conns[i].close_session()
        survivor = conns[1]
        survivor.sync("/mc")
        assert sorted(survivor.get_children("/mc")) == [f"n{i:02d}" for i in range(1, CONNECTIONS, 2)]
    finally:
        for c in conns:
            c.close()

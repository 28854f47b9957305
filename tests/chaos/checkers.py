"""Checkers of the chaos rig (issue 18): each takes a recorded history (tests/chaos/history.py)
or a connection's stream log and returns a list of violations (strings; empty = correct).

What ZooKeeper guarantees, and so what is checked (nothing more):
- writes are linearizable; a read is linearizable only after `sync` on the same session
  (a follower may serve a stale plain read): `check_register` checks CAS writes (setData with
  a version) and sync-then-get reads of each register by a bounded Wing & Gong search
  (Porcupine / Knossos style; ops of unknown outcome may take effect or not);
- per session: FIFO (a client's writes take effect in the order sent), monotonic reads and
  read-your-writes, also across a reconnect to another member (`check_sessions`);
- watches (`check_oneshot_stream`, `check_persistent_stream`, on one connection's stream):
  the event for a change arrives before any reply that shows the change; a one-shot watch
  fires once; a persistent recursive watch misses no change;
- sequential names (`check_sequential`): unique; with only sequential creates under a parent
  (and no deletes) its counter is the parent's cversion, so the names present are exactly
  0..n-1; every acknowledged name is present; names not acknowledged come from creates of
  unknown outcome only; one client's acknowledged names increase in the order it sent them;
- after healing: every acknowledged create present with its data (`check_acked`), no ephemeral
  of an ended session on any member (`check_ephemerals`), every member's tree identical
  (`check_same_trees`).
Rules: checkers are pure functions of their inputs; no I/O, no clocks."""

import heapq
from collections import Counter

from history import FAIL, INFO, OK

SEARCH_STEPS_MAX = 2_000_000  # Wing & Gong steps per register before giving up (unknown)


# ---------------------------------------------------------------- linearizable register

def _register_step(state, op):
    """(allowed, new state) for op applied to state (version, value)."""
    version, value = state
    if op.f == "cas":
        expected, new = op.value
        if op.type == FAIL:  # BadVersion: the version differed at its linearization point
            return version != expected, state
        if version != expected:
            return False, state
        if op.type == OK and op.result is not None and op.result != expected + 1:
            return False, state
        return True, (expected + 1, new)
    if op.f == "read":
        return (version, value) == tuple(op.result), state
    raise ValueError(f"not a register op: {op.f}")


class _Entry:
    __slots__ = ("id", "call", "match", "prev", "next", "t")

    def __init__(self, id_, call, t):
        self.id, self.call, self.t = id_, call, t
        self.match = self.prev = self.next = None


def linearizable(ops, init, step=_register_step, steps_max=SEARCH_STEPS_MAX):
    """Wing & Gong's search with Lowe's memo (as Porcupine): True, False, or None when the
    search passed steps_max. Ops with type INFO are optional (may or may not have happened)
    and never complete; FAIL ops of f "cas" constrain the state; reads that did not complete
    say nothing and are dropped."""
    ops = [o for o in ops if o.type == OK or (o.f == "cas" and o.type in (FAIL, INFO))]
    events = []
    for i, o in enumerate(ops):
        events.append((o.t_invoke, 0, i, True))
        events.append((o.t_complete, 1, i, False))
    events.sort(key=lambda e: (e[0], e[1]))  # calls before returns at equal times
    head = _Entry(-1, False, 0)
    last = head
    calls = {}
    for t, _, i, is_call in events:
        e = _Entry(i, is_call, t)
        if is_call:
            calls[i] = e
        else:
            calls[i].match = e
        e.prev, last.next = last, e
        last = e
    required = sum(1 for o in ops if o.type != INFO)  # OK, and FAIL cas: they happened

    def lift(e):
        e.prev.next = e.next
        if e.next:
            e.next.prev = e.prev
        m = e.match
        m.prev.next = m.next
        if m.next:
            m.next.prev = m.prev

    def unlift(e):
        m = e.match
        m.prev.next = m
        if m.next:
            m.next.prev = m
        e.prev.next = e
        if e.next:
            e.next.prev = e

    linearized = 0
    cache = set()
    stack = []
    state = init
    entry = head.next
    steps = 0
    while required > 0:
        steps += 1
        if steps > steps_max:
            return None
        if entry is not None and entry.call:
            op = ops[entry.id]
            allowed, new_state = step(state, op)
            if allowed:
                new_lin = linearized | (1 << entry.id)
                key = (new_lin, new_state)
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, state, linearized))
                    state, linearized = new_state, new_lin
                    if op.type != INFO:
                        required -= 1
                    lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:  # a return whose call is not linearized (or the end): undo the last choice
            if not stack:
                return False
            entry, state, _ = stack.pop()
            linearized &= ~(1 << entry.id)
            if ops[entry.id].type != INFO:
                required += 1
            unlift(entry)
            entry = entry.next
    return True


def check_register(history_ops, init=(0, b"")):
    """Linearizability of every register (ops f "cas"/"read", grouped by key). Returns
    (violations, unknown keys)."""
    by_key = {}
    for o in history_ops:
        if o.f in ("cas", "read"):
            by_key.setdefault(o.key, []).append(o)
    violations, unknown = [], []
    for key, ops in sorted(by_key.items()):
        r = linearizable(ops, init)
        if r is False:
            oks = [o for o in ops if o.type == OK]
            violations.append(f"register {key}: no linearization of {len(ops)} ops ({len(oks)} ok); "
                              f"ok ops by completion: {_brief(sorted(oks, key=lambda o: o.t_complete)[-8:])}")
        elif r is None:
            unknown.append(key)
    return violations, unknown


def _brief(ops):
    return "; ".join(f"{o.client}:{o.f}{o.value}->{o.type}{o.result}" for o in ops)


# ---------------------------------------------------------------- sessions

def check_sessions(history_ops):
    """Per (client, session): acknowledged writes ("sset", result = new version) take effect in
    the order sent (versions increase); a read ("sget", result = version) shows at least the
    version of every write acknowledged before it was sent (read-your-writes) and never less
    than an earlier read (monotonic reads), whichever member served it."""
    violations = []
    by_session = {}
    for o in history_ops:
        if o.f in ("sset", "sget") and o.type == OK:
            by_session.setdefault((o.client, o.session), []).append(o)
    for (client, session), ops in sorted(by_session.items(), key=lambda kv: str(kv[0])):
        ops.sort(key=lambda o: (o.t_invoke, o.extra.get("seq", 0)))
        last_write, last_read, last_read_op = -1, -1, None
        pending = []  # heap of (t_complete, version) of acknowledged writes not yet before a read
        seen = -1  # the highest version of a write acknowledged before the current read was sent
        for o in ops:
            if o.f == "sset":
                if o.result <= last_write:
                    violations.append(f"{client} session {session:#x}: write acknowledged as version {o.result} after "
                                      f"version {last_write} (FIFO order broken)")
                last_write = max(last_write, o.result)
                heapq.heappush(pending, (o.t_complete, o.result))
            else:
                while pending and pending[0][0] <= o.t_invoke:
                    seen = max(seen, heapq.heappop(pending)[1])
                if o.result < seen:
                    violations.append(f"{client} session {session:#x}: read on member {o.member} shows version "
                                      f"{o.result}, its own acknowledged write made version {seen} (read-your-writes)")
                if o.result < last_read:
                    violations.append(f"{client} session {session:#x}: read on member {o.member} shows version "
                                      f"{o.result} after a read of version {last_read} on member "
                                      f"{last_read_op.member} (monotonic reads)")
                if o.result > last_read:
                    last_read, last_read_op = o.result, o
    return violations


# ---------------------------------------------------------------- watches

def check_oneshot_stream(log, where=""):
    """One connection's stream, in arrival order: ("reg", path, version) = the reply of a
    getData that set a data watch; ("event", path, type); ("read", path, version) = a plain
    getData reply. A change must be announced before a reply shows it; a watch fires once."""
    violations = []
    armed = {}  # path -> version at registration, while the watch has not fired
    for item in log:
        kind, path = item[0], item[1]
        if kind == "reg":
            armed[path] = item[2]
        elif kind == "event":
            if path not in armed:
                violations.append(f"{where}one-shot watch on {path} fired again (or was never set)")
            armed.pop(path, None)
        elif kind == "read":
            if path in armed and item[2] > armed[path]:
                violations.append(f"{where}a read shows {path} at version {item[2]} before the event of "
                                  f"the watch set at version {armed[path]}")
    return violations


def check_persistent_stream(log, where=""):
    """One connection's stream with a persistent recursive watch: ("pre", path, version) read
    before addWatch, ("added",), ("base", path, version) read after it, ("event", path, type),
    ("read", path, version). Every change (a version step of a node only set, never created or
    deleted) after the watch is announced before a reply shows it, and nothing is announced
    that no reply can show: at each read v, v - base <= events so far <= v - pre."""
    violations = []
    pre, base, events, added = {}, {}, {}, False
    for item in log:
        kind = item[0]
        if kind == "added":
            added = True
            continue
        path = item[1]
        if kind == "pre":
            pre[path] = item[2]
        elif kind == "base":
            base[path] = item[2]
        elif kind == "event" and added:
            events[path] = events.get(path, 0) + 1
        elif kind == "read" and path in base and path in pre:
            n, v = events.get(path, 0), item[2]
            if n < v - base[path]:
                violations.append(f"{where}persistent watch: {path} read at version {v}, changed {v - base[path]} "
                                  f"times since the watch, only {n} events before the read (missed)")
            if n > v - pre[path]:
                violations.append(f"{where}persistent watch: {n} events for {path} but a read shows version {v}, "
                                  f"at most {v - pre[path]} changes since the watch (spurious)")
    return violations


# ---------------------------------------------------------------- sequential, acked, trees

def seq_number(name):
    return int(name[-10:])


def check_sequential(history_ops, final_children):
    """Ops f "seq" (key = parent, result = the created path when OK); final_children:
    {member: {parent: [child names]}} after healing."""
    violations = []
    by_parent = {}
    for o in history_ops:
        if o.f == "seq":
            by_parent.setdefault(o.key, []).append(o)
    for parent, ops in sorted(by_parent.items()):
        oks = [o for o in ops if o.type == OK]
        names = [o.result.rsplit("/", 1)[1] for o in oks]
        if len(set(names)) != len(names):
            dup = sorted(n for n, k in Counter(names).items() if k > 1)
            violations.append(f"{parent}: sequential names acknowledged twice: {dup[:5]}")
        unknown = sum(1 for o in ops if o.type == INFO)
        for member, parents in sorted(final_children.items()):
            present = set(parents.get(parent, []))
            missing = sorted(set(names) - present)
            if missing:
                violations.append(f"{parent} on member {member}: {len(missing)} acknowledged sequential nodes "
                                  f"missing: {missing[:5]}")
            nums = sorted(seq_number(n) for n in present)
            if nums != list(range(len(nums))):
                gaps = sorted(set(range(nums[-1] + 1)) - set(nums))[:5] if nums else []
                violations.append(f"{parent} on member {member}: sequence numbers not 0..{len(nums) - 1}: "
                                  f"gaps at {gaps}")
            phantom = len(present - set(names))
            if phantom > unknown:
                violations.append(f"{parent} on member {member}: {phantom} nodes not acknowledged but only "
                                  f"{unknown} creates had an unknown outcome")
        by_client = {}
        for o in sorted(oks, key=lambda o: o.t_invoke):
            by_client.setdefault(o.client, []).append(seq_number(o.result))
        for client, nums in sorted(by_client.items()):
            if any(b <= a for a, b in zip(nums, nums[1:])):
                violations.append(f"{parent}: {client}'s acknowledged sequence numbers do not increase in the "
                                  f"order sent: {nums[:10]}")
    return violations


def check_acked(history_ops, final_data):
    """Acknowledged creates (f "create", key = path, value = data) are on every member after
    healing with their data, and no acknowledged setData (f "sset", "wset", "cas"; result =
    the version it made) is undone. final_data: {member: {path: data of a created node, or
    the version of a set node, or None if absent}}."""
    violations = []
    creates = [o for o in history_ops if o.f == "create" and o.type == OK]
    sets = {}
    for o in history_ops:
        if o.f in ("sset", "wset", "cas") and o.type == OK:
            sets[o.key] = max(sets.get(o.key, -1), o.result)
    for member, data in sorted(final_data.items()):
        missing = [o.key for o in creates if data.get(o.key) is None]
        wrong = [o.key for o in creates if data.get(o.key) is not None and data[o.key] != o.value]
        if missing:
            violations.append(f"member {member}: {len(missing)} of {len(creates)} acknowledged creates missing: "
                              f"{missing[:5]}")
        if wrong:
            violations.append(f"member {member}: {len(wrong)} acknowledged creates with wrong data: {wrong[:5]}")
        undone = [f"{k} at version {data.get(k)}, acknowledged {v}" for k, v in sorted(sets.items())
                  if data.get(k) is None or data[k] < v]
        if undone:
            violations.append(f"member {member}: acknowledged setData undone: {undone[:5]}")
    return violations


def check_ephemerals(final_eph):
    """{member: [ephemeral names left under the ephemerals' parent]} once every session that
    made one has ended (closed or expired) and the session timeout has passed."""
    return [f"member {m}: ephemerals of ended sessions still present: {sorted(names)[:5]} ({len(names)})"
            for m, names in sorted(final_eph.items()) if names]


def check_same_trees(dumps):
    """dumps: {member: {path: (data, stat, acl)}}; all must be equal."""
    violations = []
    members = sorted(dumps)
    if not members:
        return violations
    ref = dumps[members[0]]
    for m in members[1:]:
        d = dumps[m]
        only_ref, only_m = sorted(set(ref) - set(d)), sorted(set(d) - set(ref))
        differ = sorted(p for p in set(ref) & set(d) if ref[p] != d[p])
        if only_ref or only_m or differ:
            violations.append(f"members {members[0]} and {m} differ: {len(only_ref)} paths only on {members[0]} "
                              f"{only_ref[:3]}, {len(only_m)} only on {m} {only_m[:3]}, {len(differ)} with other "
                              f"data/Stat/ACL {differ[:3]}")
    return violations

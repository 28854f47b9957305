"""Histories of the chaos rig (issue 18): every workload operation is recorded as an `Op` with
its client, invocation and completion times (time.monotonic(), seconds) and outcome:

- "ok":   the server answered success (the effect happened);
- "fail": the server answered an error that proves the operation had no effect (BadVersion,
          NodeExists, NoNode): a CAS rejected by BadVersion still says the version differed;
- "info": unknown outcome (timeout, connection loss, session expired, any other error): the
          operation may or may not take effect, at any time after its invocation.

Rules: a History is appended to by many threads (one lock), never edited; an op's fields are
what the client knew, nothing inferred."""

import threading
import time
from dataclasses import dataclass, field

OK, FAIL, INFO = "ok", "fail", "info"


@dataclass
class Op:
    client: str  # the worker (its sessions may change; `session` says which)
    f: str  # "cas", "read", "create", "seq", "set", "get", ...
    key: str  # the node the op is about (a path, or a register name)
    value: object = None  # what was written / expected (per f)
    t_invoke: float = 0.0
    t_complete: float = float("inf")  # inf while pending / for info
    type: str = INFO
    result: object = None  # what was read / returned (per f)
    session: int = 0
    member: int = 0  # the member the client was connected to
    extra: dict = field(default_factory=dict)


class History:
    def __init__(self):
        self.ops = []
        self.lock = threading.Lock()

    def invoke(self, client, f, key, value=None, session=0, member=0):
        op = Op(client=client, f=f, key=key, value=value, t_invoke=time.monotonic(), session=session, member=member)
        with self.lock:
            self.ops.append(op)
        return op

    @staticmethod
    def complete(op, type_, result=None):
        op.result = result
        op.type = type_
        op.t_complete = time.monotonic() if type_ != INFO else float("inf")
        return op

    def select(self, *fs):
        with self.lock:
            return [o for o in self.ops if o.f in fs]

    def count(self, *fs):
        ops = self.select(*fs)
        return len(ops), sum(1 for o in ops if o.type == OK)

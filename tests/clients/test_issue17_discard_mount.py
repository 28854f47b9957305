"""Issue 17: on a file system mounted with online `discard`, removing a file (autopurge, or any
other program) holds up the syncs of the txn log until the disk has discarded its blocks
(docs/benchmarks.md, "Disk stalls from file removals"). An operator must hear that from the
server at start-up, and only when it is so: the warning names the data directory and its mount
point when the mount table says `discard`, and is absent otherwise. Whichever the machine
running this test has, the test checks the server agrees with the mount table (the unit test of
`startup::discarding_mounts` covers the cases a machine does not have)."""

import os
import re
from pathlib import PurePath

import pytest

from helpers import RK_BIN, selected_kinds, wait_until

pytestmark = [
    pytest.mark.skipif(not os.access(RK_BIN, os.X_OK), reason="ringkeeper binary not built"),
    pytest.mark.skipif("ringkeeper" not in selected_kinds(), reason="a ringkeeper start-up check"),
]

WARNING = "mounted with `discard`"


def unescape(field):
    """/proc/self/mounts writes a space, tab, newline and backslash in a path as \\ooo."""
    return re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8) & 0xFF]), field.encode()).decode(errors="replace")


def mount_of(path):
    """(mount point, fstype, options) of the mount holding `path`, found as the server does:
    the mount point with the most components that is `path` or its ancestor, the last of equal
    ones."""
    parts = PurePath(os.path.realpath(path)).parts
    best = None
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.rstrip("\n").split(" ")
            if len(fields) < 4:
                continue
            point = PurePath(unescape(fields[1]))
            if parts[: len(point.parts)] == point.parts and (best is None or len(point.parts) >= len(best[0].parts)):
                best = (point, fields[2], fields[3].split(","))
    return best


def test_a_data_directory_on_a_discarding_mount_is_warned_about_at_start(server_factory, monkeypatch):
    # The warning is a warn-level line: a RUST_LOG in the environment must not hide it.
    monkeypatch.setenv("RUST_LOG", "warn")
    s = server_factory("ringkeeper")
    point, fstype, options = mount_of(s.data_dir)
    print(f"{s.data_dir} is on {point} ({fstype}, {','.join(options)})")
    if "discard" in options and fstype != "f2fs":
        wait_until(lambda: WARNING in s.log_text(), timeout=10, what="the discard warning")
        line = next(l for l in s.log_text().splitlines() if WARNING in l)
        assert f" is on {point} ({fstype}), " in line, line
        assert "fstrim" in line, line
        assert s.log_text().count(WARNING) == 1, "one mount is named once, for both directories"
    else:
        assert WARNING not in s.log_text(), s.log_tail()

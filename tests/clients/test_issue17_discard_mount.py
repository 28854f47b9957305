"""Issue 17: on a file system mounted with online `discard`, removing a file (autopurge, or any
other program) holds up every sync of the txn log until the disk has discarded its blocks:
43-51 ms for 64 MiB and 0.16-0.34 s for 600 MiB on the test VM (docs/benchmarks.md). An
operator must hear that from the server at start-up, and only when it is so: the warning names
the data directory and its mount point when the mount table says `discard`, and is absent
otherwise. Whichever the machine running this test has, the test checks the server agrees with
the mount table."""

import os

import pytest

from helpers import RK_BIN, selected_kinds, wait_until

pytestmark = [
    pytest.mark.skipif(not os.access(RK_BIN, os.X_OK), reason="ringkeeper binary not built"),
    pytest.mark.skipif("ringkeeper" not in selected_kinds(), reason="a ringkeeper start-up check"),
]

WARNING = "mounted with `discard`"


def mount_options_of(path):
    """The mount point and options of the mount holding `path`, read as the server does: the
    longest mount point that is `path` or its ancestor, the last of equal ones."""
    real = os.path.realpath(path)
    best = None
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split(" ")
            if len(fields) < 4:
                continue
            point = fields[1].encode().decode("unicode_escape")
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and (best is None or len(point) >= len(best[0])):
                best = (point, fields[3].split(","))
    return best


def test_a_data_directory_on_a_discarding_mount_is_warned_about_at_start(server_factory):
    s = server_factory("ringkeeper")
    point, options = mount_options_of(s.data_dir)
    if "discard" in options:
        wait_until(lambda: WARNING in s.log_text(), timeout=10, what="the discard warning")
        line = next(l for l in s.log_text().splitlines() if WARNING in l)
        assert f" is on {point}, " in line, line
        assert "fstrim" in line, line
        assert s.log_text().count(WARNING) == 1, "one mount is named once, for both directories"
    else:
        assert WARNING not in s.log_text(), s.log_tail()

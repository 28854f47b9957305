"""A FUSE pass-through file system that fails chosen writes (issue 18's `ioerror` nemesis):
mounts BACKING at MOUNTPOINT with direct_io (the txn log is opened with O_DIRECT, so the page
cache must not stand between the server and this layer) and answers EIO to every write,
fallocate and fsync/fdatasync while the control file CONTROL says "eio". While it says
"stall", every durable operation waits until it says something else: fsync/fdatasync, and a
write to a file opened O_DSYNC or O_SYNC (a disk whose flushes hang; issue 17's overlap test).
Anything else: pass through. Runs in the foreground until unmounted (fusermount -u / umount).

    /usr/bin/python3 tests/chaos/faultfs.py BACKING MOUNTPOINT CONTROL

Needs Debian's python3-fusepy and libfuse2 (the system python: the venv lacks fusepy).
Rules: never alters what it passes through; the control file is re-read at most every
CONTROL_REFRESH_S seconds."""

import errno
import fcntl
import os
import sys
import time

from fusepy import FUSE, FuseOSError, Operations

CONTROL_REFRESH_S = 0.2
STALL_POLL_S = 0.05


class FaultFS(Operations):
    def __init__(self, root, control):
        self.root, self.control = root, control
        self.checked, self.failing, self.stalling = 0.0, False, False
        self.failed = 0

    def _p(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def _refresh(self, now):
        try:
            with open(self.control) as f:
                said = f.read().strip()
        except OSError:
            said = ""
        self.failing, self.stalling = said == "eio", said == "stall"
        self.checked = now

    def _fail(self):
        now = time.monotonic()
        if now - self.checked > CONTROL_REFRESH_S:
            self._refresh(now)
        if self.failing:
            self.failed += 1
            raise FuseOSError(errno.EIO)

    def _stall(self):
        """Waits while the control file says "stall" (read afresh each poll)."""
        self._refresh(time.monotonic())
        while self.stalling:
            time.sleep(STALL_POLL_S)
            self._refresh(time.monotonic())

    # metadata

    def getattr(self, path, fh=None):
        st = os.lstat(self._p(path))
        return {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink",
                                             "st_size", "st_uid", "st_blocks")}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._p(path))

    def statfs(self, path):
        st = os.statvfs(self._p(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                             "f_files", "f_flag", "f_frsize", "f_namemax")}

    def chmod(self, path, mode):
        return os.chmod(self._p(path), mode)

    def chown(self, path, uid, gid):
        return os.chown(self._p(path), uid, gid)

    def utimens(self, path, times=None):
        return os.utime(self._p(path), times)

    def mkdir(self, path, mode):
        return os.mkdir(self._p(path), mode)

    def rmdir(self, path):
        return os.rmdir(self._p(path))

    def unlink(self, path):
        return os.unlink(self._p(path))

    def rename(self, old, new):
        return os.rename(self._p(old), self._p(new))

    def link(self, target, name):
        return os.link(self._p(name), self._p(target))

    def symlink(self, name, target):
        return os.symlink(target, self._p(name))

    def readlink(self, path):
        return os.readlink(self._p(path))

    # files (the backing file is opened without O_DIRECT: alignment is this layer's business)
    def open(self, path, flags):
        return os.open(self._p(path), flags & ~os.O_DIRECT)

    def create(self, path, mode, fi=None):
        return os.open(self._p(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        self._fail()
        if fcntl.fcntl(fh, fcntl.F_GETFL) & (os.O_DSYNC | os.O_SYNC):
            self._stall()
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        self._fail()
        with open(self._p(path), "r+b") as f:
            f.truncate(length)

    def fallocate(self, path, mode, offset, length, fh):
        self._fail()
        return os.posix_fallocate(fh, offset, length)

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        return os.close(fh)

    def fsync(self, path, datasync, fh):
        self._fail()
        self._stall()
        return os.fdatasync(fh) if datasync else os.fsync(fh)

    def fsyncdir(self, path, datasync, fh):
        return 0


if __name__ == "__main__":
    backing, mountpoint, control = sys.argv[1:4]
    FUSE(FaultFS(os.path.abspath(backing), os.path.abspath(control)), mountpoint, foreground=True, nothreads=True,
         direct_io=True, allow_other=True)

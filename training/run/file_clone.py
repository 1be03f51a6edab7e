"""A private copy of a cached file, as cheap as the filesystem allows (pasted into training/launcher.py's
source when it is sent, orchestrator/run/inline_source.py: standard library only, Python 3.7+).

A host's `code/` must be its own: hosts sharing a workdir (NFS) would otherwise share one inode per synced
file, and a task that rewrites one in place (`open(..., "r+")`) would change what another host's tasks
read. A hard link cannot give that, so every file is copied, the cheapest way first:

1. a reflink (the FICLONE ioctl: btrfs, XFS, bcachefs, OCFS2, NFS 4.2 servers that clone): the copy shares
   the blocks until one side writes (copy on write), no data is read or written;
2. `os.copy_file_range` (Python 3.8+, Linux): the kernel copies, server side on NFS 4.2, reflinked by
   some filesystems, never through this process's memory;
3. read and write, a chunk at a time (bounded memory).

`reflink` is the one seam that asks the filesystem for a clone: where it says no (ext4, overlayfs, tmpfs)
the next way is taken. The copy keeps the source's mode and times (the cache's fixed mtime).
"""

from __future__ import annotations

import errno
import os

FICLONE = 0x40049409  # _IOW(0x94, 9, int), linux/fs.h
CHUNK = 1 << 20
# What "this filesystem or kernel cannot do it" looks like: try the next way (anything else is an error).
UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EBADF,
               errno.EPERM, errno.ETXTBSY}


def reflink(src_fd: int, dst_fd: int) -> bool:
    """Make dst share src's blocks (copy on write); False when this filesystem cannot."""
    try:
        import fcntl

        fcntl.ioctl(dst_fd, FICLONE, src_fd)
    except (OSError, ImportError) as exc:
        if isinstance(exc, OSError) and exc.errno not in UNSUPPORTED:
            raise
        return False
    return True


def kernel_copy(src_fd: int, dst_fd: int, size: int) -> bool:
    """copy_file_range from both files' current offsets until `size` bytes are copied; False (the offsets
    where it stopped) when the kernel or the filesystem cannot, so a plain copy goes on from there."""
    copy_range = getattr(os, "copy_file_range", None)
    if copy_range is None:
        return False
    left = size
    try:
        while left > 0:
            done = copy_range(src_fd, dst_fd, min(left, 1 << 30))
            if done == 0:  # the source shrank: what is there is copied
                break
            left -= done
    except OSError as exc:
        if exc.errno not in UNSUPPORTED:
            raise
        return False
    return True


def plain_copy(src_fd: int, dst_fd: int) -> None:
    while True:
        chunk = os.read(src_fd, CHUNK)
        if not chunk:
            return
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst_fd, view):]


def clone_file(src: str, dst: str) -> str:
    """A new file `dst` with src's bytes, mode and times; returns how: "reflink", "kernel" or "copy"."""
    st = os.stat(src)
    with open(src, "rb") as source:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, st.st_mode & 0o700)
        try:
            if reflink(source.fileno(), fd):
                how = "reflink"
            elif kernel_copy(source.fileno(), fd, st.st_size):
                how = "kernel"
            else:
                plain_copy(source.fileno(), fd)
                how = "copy"
        finally:
            os.close(fd)
    os.chmod(dst, st.st_mode & 0o777)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
    return how

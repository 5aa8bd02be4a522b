"""Write files so that no reader ever sees half of one (a temporary name, then an atomic rename), and keep room on
a disk for the files that must be written last (a reserve, given back when they are due)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

__all__ = ["atomic_json", "release_reserve", "reserve_space", "write_atomic"]


def write_atomic(path: str, data: str | bytes) -> None:
    """Write `data` to `path` through `path.tmp` and os.replace; a failed write (a full disk) leaves no `.tmp`."""
    tmp = path + ".tmp"
    try:
        with open(
            tmp,
            "wb" if isinstance(data, bytes) else "w",
            encoding=None if isinstance(data, bytes) else "utf-8",
        ) as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        try:  # an empty or half file under the temporary name says nothing a reader can use
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_json(path: str, obj: Any, indent: int = 2, default: Callable[[Any], Any] = str) -> None:
    """Write `obj` as JSON atomically (objects JSON cannot encode go through `default`)."""
    write_atomic(path, json.dumps(obj, indent=indent, default=default))


def reserve_space(path: str, most: int, share: float = 0.25) -> int:
    """Hold `most` bytes (at most `share` of the disk's free space) in the file `path`, so that a disk the run
    fills still has room for what is written after it; the bytes held (0: none could be)."""
    try:
        st = os.statvfs(os.path.dirname(path) or ".")
        size = int(min(most, st.f_bavail * st.f_frsize * share))
        if size <= 0:
            return 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except (AttributeError, OSError):  # a file system without fallocate: the bytes, written
                os.ftruncate(fd, 0)
                done = 0
                while done < size:
                    done += os.write(fd, b"\0" * min(size - done, 1 << 16))
        finally:
            os.close(fd)
        return size
    except OSError:
        release_reserve(path)
        return 0


def release_reserve(path: str) -> None:
    """Give the reserve of `path` back to the disk (none: nothing to do)."""
    try:
        os.unlink(path)
    except OSError:
        pass

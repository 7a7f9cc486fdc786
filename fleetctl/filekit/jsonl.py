"""JSON lines appended by several processes: one record per line, one write() per record under an
exclusive flock, fsynced. A writer that crashed mid-line leaves a partial last line; the next writer
ends it with a newline first, so the partial line is skipped by readers and never swallows a good
record. Readers skip (and count) lines that are too long or not JSON; they never see a cut record
from a live writer, since each record is one write() of a whole line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from fleetctl.errors import DataError
from fleetctl.filekit.locks import lock_fd
from fleetctl.filekit.read import open_regular


def append_line(path: str | os.PathLike, line: bytes, *, what: str = "log", mode: int = 0o640,
                error: type = DataError) -> None:
    """Append one record (`line` without its newline) to `path`, creating it with `mode`."""
    if b"\n" in line:
        raise error(f"{path}: a {what} record may not hold a newline")
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, mode, what=what, error=error)
    except OSError as exc:
        raise error(f"cannot open the {what} {path}: {exc.strerror or exc}") from None
    try:
        lock_fd(fd, wait_s=None)
        write_whole(fd, line + b"\n")
    except OSError as exc:
        raise error(f"cannot write the {what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def write_whole(fd: int, data: bytes) -> int:
    """Append `data` (whole lines) to the file open at `fd` (O_APPEND) in full, fsynced, after
    ending a crashed writer's partial last line with a newline (so it never swallows ours). The
    caller holds whatever lock keeps writers apart. Returns the file's size before."""
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        data = b"\n" + data
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)
    return size


def read_lines(path: str | os.PathLike, *, max_line: int, what: str = "log",
               error: type = DataError) -> Iterator[bytes | None]:
    """Every line of `path` under a shared flock, newline stripped; None for a line longer than
    `max_line` (the caller counts it). Nothing when the file does not exist."""
    try:
        fd = open_regular(path, os.O_RDONLY, what=what, error=error)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise error(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        lock_fd(fh.fileno(), shared=True, wait_s=None)
        while True:
            line = fh.readline(max_line + 1)
            if not line:
                return
            if len(line) > max_line and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # skip the rest of the long line
                    line = fh.readline(1 << 20)
                yield None
                continue
            yield line.rstrip(b"\n")


def read_lines_from(path: str | os.PathLike, start: int, *, max_line: int, what: str = "log",
                    error: type = DataError) -> tuple[list[bytes | None], int, tuple[int, int]]:
    """The lines of `path` from byte `start` on, as read_lines gives them, with the offset reached and
    the file's (device, inode): a reader that keeps these reads only what was appended since.
    ([], 0, (0, 0)) when the file does not exist."""
    try:
        fd = open_regular(path, os.O_RDONLY, what=what, error=error)
    except FileNotFoundError:
        return [], 0, (0, 0)
    except OSError as exc:
        raise error(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    lines: list[bytes | None] = []
    with os.fdopen(fd, "rb") as fh:
        lock_fd(fh.fileno(), shared=True, wait_s=None)
        st = os.fstat(fh.fileno())
        if start > st.st_size:
            start = 0  # the file was replaced by a shorter one: read it whole
        fh.seek(start)
        while True:
            line = fh.readline(max_line + 1)
            if not line:
                break
            if len(line) > max_line and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):
                    line = fh.readline(1 << 20)
                lines.append(None)
                continue
            lines.append(line.rstrip(b"\n"))
        return lines, fh.tell(), (st.st_dev, st.st_ino)

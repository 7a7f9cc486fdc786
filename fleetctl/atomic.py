"""The one way fleetctl writes a file another program (or a later fleetctl) reads: all or nothing.

    write_atomic(path, "text")                     # str or bytes
    write_atomic(path, lambda fh: fh.write(...))   # or a callback given the open binary file
    with AtomicFile(path) as fh: ...               # the same, for writers that need the file object

A private temporary file is created beside the target with O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600
(tempfile.mkstemp): a link or file planted under a predictable name (`X.h5.tmp`) is never opened,
so root running fleetctl never writes through somebody else's symlink. The data is flushed and
fsync'ed, the file renamed over the target (rename replaces a link at the target, never follows
it), then the directory is fsync'ed. On any failure (a full disk, a read-only filesystem, an
exception in the callback) the temporary file is removed and a DataError names the target.

`check_writable(path)` proves early, before any slow work or side effect, that the target's
directory takes a new file (`audit --drain --out ...` must not drain first and fail on the output).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from fleetctl.errors import DataError, UsageError

DEFAULT_MODE = 0o644  # what the readers (node_exporter, operators) need; the temporary file is 0600


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc) or type(exc).__name__


def _refuse_non_regular(path: Path) -> None:
    """A directory, FIFO or device at the target is not replaced (a link is: rename never follows)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DataError(f"cannot write {path}: {_reason(exc)}") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise DataError(f"cannot write {path}: it is {kind}")


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicFile:
    """A private temporary file beside `path`; commit() renames it over `path`, discard() removes it.

    As a context manager: commit on success, discard on any exception (which propagates)."""

    def __init__(self, path: str | os.PathLike, *, mode: int = DEFAULT_MODE, mkdir: bool = False,
                 buffered: bool = True):
        self.path = Path(path)
        self.mode = mode
        self.tmp: Path | None = None
        self.file: BinaryIO | None = None
        _refuse_non_regular(self.path)
        try:
            if mkdir:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp",
                                       dir=self.path.parent)
        except OSError as exc:
            raise DataError(f"cannot write {self.path}: {_reason(exc)}") from None
        self.tmp = Path(tmp)
        self.file = os.fdopen(fd, "w+b", buffering=-1 if buffered else 0)

    def __enter__(self) -> BinaryIO:
        return self.file

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()

    def commit(self) -> Path:
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            os.fchmod(self.file.fileno(), self.mode)
            self.file.close()
            _refuse_non_regular(self.path)
            os.replace(self.tmp, self.path)
        except BaseException as exc:
            self.discard()
            if isinstance(exc, OSError):
                raise DataError(f"cannot write {self.path}: {_reason(exc)}") from None
            raise
        self.tmp = None
        try:
            fsync_dir(self.path.parent)
        except OSError:
            pass  # the rename happened; some filesystems refuse fsync on a directory
        return self.path

    def discard(self) -> None:
        """Close and remove the temporary file; never raises (it runs while another error unwinds)."""
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass  # ENOSPC again while flushing what was buffered: the file goes anyway
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None


def write_atomic(path: str | os.PathLike, data: str | bytes | Callable[[BinaryIO], object], *,
                 mode: int = DEFAULT_MODE, mkdir: bool = True) -> Path:
    """Write `data` (text is UTF-8) or whatever `data(fh)` writes to `path`, all or nothing."""
    target = AtomicFile(path, mode=mode, mkdir=mkdir)
    try:
        if callable(data):
            data(target.file)
        else:
            target.file.write(data.encode() if isinstance(data, str) else data)
    except BaseException as exc:
        target.discard()
        if isinstance(exc, OSError):
            raise DataError(f"cannot write {target.path}: {_reason(exc)}") from None
        raise
    return target.commit()


def check_writable(path: str | os.PathLike, option: str, *, directory: bool = False) -> Path:
    """Fail now, with the option's name, if `path` cannot be written later (before side effects).

    Creates and removes a private temporary file where the real one will go. With `directory`,
    `path` is a directory (created if missing, as the writer would)."""
    p = Path(path).expanduser()
    folder = p if directory else p.parent
    try:
        if directory:
            if p.exists() and not p.is_dir():
                raise UsageError(f"{option} {path}: not a directory")
            p.mkdir(parents=True, exist_ok=True)
        elif p.is_dir():
            raise UsageError(f"{option} {path}: is a directory; give a file name")
        elif not folder.is_dir():
            raise UsageError(f"{option} {path}: directory {folder} does not exist")
        elif p.exists() and not (p.is_file() or p.is_symlink()):
            raise UsageError(f"{option} {path}: not a regular file")
        fd, tmp = tempfile.mkstemp(prefix=".fleetctl-check.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write there: {_reason(exc)}") from None
    os.close(fd)
    os.unlink(tmp)
    return p

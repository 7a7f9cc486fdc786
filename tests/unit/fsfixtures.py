"""Small real filesystems for write-failure tests: a full one and a read-only one (tmpfs, root only).

Import the fixtures into a test module: `from fsfixtures import full_fs, readonly_fs  # noqa: F401`.
Without root (or without mount), the tests that use them skip, saying why; CI runs as root.
"""

from __future__ import annotations

import os
import subprocess

import pytest


def _mount(path, options: str) -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("filesystem tests need root (mount -t tmpfs); CI must run them as root")
        pytest.skip("needs root to mount a small tmpfs")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


@pytest.fixture
def full_fs(tmp_path):
    """A 64 KiB tmpfs: any run file or large report fills it."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    _mount(mnt, "size=64k")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def readonly_fs(tmp_path):
    """A read-only tmpfs (root cannot write there either)."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    _mount(mnt, "ro,size=64k")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)

"""lens/heaptrim.py: malloc_trim where glibc has it."""

import platform
from pathlib import Path

from fleetctl.lens import heaptrim


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_freed_heap_pages_go_back_on_glibc():
    if platform.libc_ver()[0] != "glibc":  # musl, macOS: no malloc_trim, nothing done
        assert heaptrim.release_free_heap() is None
        return
    # 128 MB in 64 KiB blocks (under glibc's mmap threshold: from the heap), all freed but the
    # last: the heap cannot shrink from its top, so the freed pages stay resident until trimmed
    blocks = [bytearray(64 << 10) for _ in range(2048)]
    last = blocks[-1]
    del blocks
    before = _rss_mb()
    took = heaptrim.release_free_heap()
    after = _rss_mb()
    assert took is not None and 0 <= took < 5
    assert after < before - 64, (before, after)
    assert len(last) == 64 << 10


def test_no_malloc_trim_is_not_an_error(monkeypatch):
    monkeypatch.setattr(heaptrim, "_trim", False)
    assert heaptrim.release_free_heap() is None

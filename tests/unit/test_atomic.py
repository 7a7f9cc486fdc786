"""All-or-nothing writes: fleetctl.atomic and the HDF5 run writer on full, read-only and hostile
directories (a planted symlink, a full disk, a failing writer)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from fleetctl.atomic import AtomicFile, check_writable, write_atomic
from fleetctl.errors import DataError, UsageError
from fleetctl.store.runfile import RunWriter

from fsfixtures import full_fs, readonly_fs  # noqa: F401


def test_write_replaces_whole_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.prom"
    target.write_text("old\n")
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert os.listdir(tmp_path) == ["out.prom"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)


def test_failing_callback_keeps_the_old_file(tmp_path):
    target = tmp_path / "state.json"
    target.write_text("old")

    def half(fh):
        fh.write(b"half")
        raise RuntimeError("writer died")

    with pytest.raises(RuntimeError):
        write_atomic(target, half)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["state.json"]


def test_planted_symlinks_are_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "run"
    out.mkdir()
    # the old writer opened `<target>.tmp` without O_EXCL: a link there redirected root's write
    (out / "run.h5.tmp").symlink_to(victim)
    (out / "report.prom").symlink_to(victim)  # a link at the target itself is replaced, not followed
    write_atomic(out / "report.prom", "metrics\n")
    with RunWriter(out / "run.h5", run_id="r", cluster="lab"):
        pass
    assert victim.read_text() == "precious"
    assert (out / "run.h5.tmp").is_symlink()
    assert not (out / "report.prom").is_symlink() and (out / "report.prom").read_text() == "metrics\n"
    assert sorted(os.listdir(out)) == ["report.prom", "run.h5", "run.h5.tmp"]


def test_directory_at_target_is_refused(tmp_path):
    (tmp_path / "x.h5").mkdir()
    with pytest.raises(DataError, match="x.h5: it is a directory"):
        write_atomic(tmp_path / "x.h5", "data")
    assert os.listdir(tmp_path) == ["x.h5"]


def test_full_disk_report_is_a_clear_error_without_leftovers(full_fs):
    with pytest.raises(DataError, match=r"cannot write .*/history.json: No space left on device"):
        write_atomic(full_fs / "history.json", "x" * 200_000)
    assert os.listdir(full_fs) == []


_WRITE_RUN = textwrap.dedent("""
    import sys
    from tests.support.synthetic import Fault
    from tests.support.synthetic_run import synthetic_run
    from fleetctl.errors import DataError
    from tests.support.fabrics import leaf_spine
    from fleetctl.store.runfile import RunWriter
    topo = leaf_spine(2, 2, 2, 2)
    pairs = [(a, b) for a in topo.nics for b in topo.nics if a.split(":")[0] != b.split(":")[0]]
    run = synthetic_run(topo, pairs, [Fault("leaf1->spine2", "loss", 0.05)], sports=4,
                        duration=4.0, seed=3)
    try:
        with RunWriter(sys.argv[1], run_id="r", cluster="lab") as wr:
            wr.write_topology(topo)
            wr.write_paths(run.paths)
            wr.write_flows(run.flows)
            wr.append_probes(run.probes)
    except DataError as exc:
        print("DataError:", exc.message)
        sys.exit(3)
""")


def test_full_disk_while_writing_a_run_file(full_fs):
    # Before: h5py crashed the interpreter at exit (exit 139) and left `run.h5.tmp` behind.
    proc = subprocess.run([sys.executable, "-c", _WRITE_RUN, str(full_fs / "run.h5")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert f"DataError: {full_fs / 'run.h5'}: cannot write run file: No space left on device" \
        in proc.stdout
    assert "Traceback" not in proc.stderr
    assert os.listdir(full_fs) == []


def test_check_writable_before_any_work(tmp_path, readonly_fs):
    assert check_writable(tmp_path / "run.h5", "--out") == tmp_path / "run.h5"
    assert os.listdir(tmp_path) == [os.path.basename(readonly_fs)]  # the probe file is gone
    with pytest.raises(UsageError, match="--out .*/run.h5: cannot write there: Read-only file system"):
        check_writable(readonly_fs / "run.h5", "--out")
    with pytest.raises(UsageError, match="--history .*: cannot write there: Read-only file system"):
        check_writable(readonly_fs / "hist", "--history", directory=True)
    with pytest.raises(UsageError, match="does not exist"):
        check_writable(tmp_path / "nope" / "run.h5", "--out")
    with pytest.raises(UsageError, match="is a directory"):
        check_writable(tmp_path, "--prom")


def test_atomic_file_context_discards_on_error(tmp_path):
    with pytest.raises(ValueError):
        with AtomicFile(tmp_path / "a.bin") as fh:
            fh.write(b"partial")
            raise ValueError("boom")
    assert os.listdir(tmp_path) == []

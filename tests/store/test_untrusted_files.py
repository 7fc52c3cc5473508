"""Every file of a run directory is opened as untrusted.

A FIFO, a device link (``/dev/zero``, ``/dev/urandom``), a link out of the run
directory or a directory in place of a run's file: each command that meets one
exits 2 at once with one line naming the file and what it is; none hangs (each CLI
call runs under a timeout of seconds) and none reads a device until memory runs out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kernelcli
from helpers_cli import images, run_cli, write_config

# the bounded reader every run file goes through, fed hostile files directly
from kernelcli._untrusted import UntrustedFileError, read_untrusted

HANG = 60  # seconds: far above a refusal (~2 s), far below a hang


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run of two row blocks that keeps its tiles."""
    d = tmp_path_factory.mktemp("untrusted")
    np.save(d / "x.npy", images(12, seed=4))
    cfg = write_config(d, compute={"block": 8}, keep_tiles=True)
    assert kernelcli.compute(cfg).result is not None
    return d / "run"


def hostile(kind: str, path: Path, outside: Path) -> str:
    """Put a ``kind`` thing at ``path``; what the one-line refusal says it is."""
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
        return "is a FIFO, not a regular file"
    if kind in ("zero", "urandom"):
        path.symlink_to(f"/dev/{kind}")
        return "is a link to /dev/"
    if kind == "outside":
        outside.write_bytes(b"{}")
        path.symlink_to(outside)
        return f"is a link to {outside}"
    path.mkdir()
    return "is a directory, not a regular file"


def first_tile(run: Path) -> Path:
    return sorted((run / "tiles").iterdir())[0]


# (what is replaced, by what, the commands that meet it)
CASES = [
    ("manifest.json", "fifo", ("status", "verify", "assemble", "resume", "clean")),
    ("manifest.json", "zero", ("status",)),
    ("manifest.json", "urandom", ("verify",)),
    ("manifest.json", "outside", ("status",)),
    ("kernels.h5", "fifo", ("status", "verify")),
    ("kernels.h5", "zero", ("verify",)),
    ("tile", "fifo", ("verify",)),
    ("tile", "urandom", ("verify",)),
    ("tile", "outside", ("verify",)),
    ("tile", "dir", ("verify",)),
    ("tiles_removed.json", "fifo", ("status", "verify")),
]


@pytest.mark.parametrize("name,kind,commands", CASES,
                         ids=[f"{n}-{k}" for n, k, _ in CASES])
def test_a_hostile_file_is_refused_at_once_naming_it(finished, tmp_path, name, kind,
                                                     commands):
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    if name == "tile":
        path = first_tile(run)
    else:
        path = run / name
        path.parent.mkdir(exist_ok=True)
    said = hostile(kind, path, tmp_path / "outside.json")
    for command in commands:
        try:
            out = run_cli(command, run, timeout=HANG)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kernelcli {command} hung on a {kind} as {name}")
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert out.returncode == 2, (command, out.stderr)
        assert "Traceback" not in out.stderr
        assert len(lines) == 1, (command, out.stderr)
        assert str(path) in lines[0] and said in lines[0], (command, lines[0])


def test_reads_are_bounded_and_links_inside_the_run_are_followed(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 100)
    with pytest.raises(UntrustedFileError, match=r"big is 100 bytes, more than a "
                                                 r"kernelcli file of its kind can be \(99"):
        read_untrusted(tmp_path / "big", tmp_path, 99)
    (tmp_path / "link").symlink_to(tmp_path / "big")
    assert read_untrusted(tmp_path / "link", tmp_path, 100) == b"x" * 100
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "up").symlink_to(tmp_path / "big")
    with pytest.raises(UntrustedFileError, match="is a link to .*big, outside .*sub"):
        read_untrusted(tmp_path / "sub" / "up")
    assert read_untrusted(tmp_path / "sub" / "up", tmp_path) == b"x" * 100
    with pytest.raises(FileNotFoundError):
        read_untrusted(tmp_path / "none", tmp_path)


def test_open_run_never_hands_out_a_flipped_value(finished, tmp_path):
    import h5py

    from kernelcli.errors import RunDirError

    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    good = np.array(kernelcli.open_run(run)["ntk"])
    with h5py.File(run / "kernels.h5", "r+") as f:  # one bit of one value, checksum kept
        value = f["ntk"][2, 3].copy()
        f["ntk"][2, 3] = value.view(np.uint32 if value.itemsize == 4 else np.uint64) \
            .__xor__(1).view(value.dtype)
    with pytest.raises(RunDirError, match=r"kernels.h5: dataset 'ntk' does not match its "
                                          r"checksum \(damaged\); run `kernelcli verify"):
        kernelcli.open_run(run)["ntk"]
    unchecked = kernelcli.open_run(run, verify=False)["ntk"]  # the caller's choice, said
    assert unchecked[2, 3] != good[2, 3]


def test_a_finished_run_missing_kept_tiles_is_not_reported_finished(finished, tmp_path):
    """What an `extend` stopped between removing tiles and its switch leaves (or tiles
    deleted by hand): kernels.h5 whole, tiles gone. status and verify say so."""
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    tile = first_tile(run)
    tile.unlink()
    said = (f"1 of 3 tiles are missing from {run / 'tiles'} ({tile.stem}) though kernels.h5 "
            f"is there: an interrupted `kernelcli extend` (run the same extend command again "
            f"to finish it) or tiles deleted by hand (`kernelcli clean {run}` keeps "
            f"kernels.h5 alone)")
    report = kernelcli.open_run(run).status()
    assert not report.finished and report.result_problem == said
    checked = kernelcli.open_run(run).verify()
    assert not checked.ok and checked.problems == [said]
    out = run_cli("verify", run, timeout=HANG)
    assert out.returncode == 1 and said in out.stderr + out.stdout
    assert "then run: the same `kernelcli extend` command again" in out.stderr
    shown = run_cli("status", run, timeout=HANG)
    assert shown.returncode == 0 and "not finished" in shown.stdout, shown


def test_an_extend_stopped_before_its_switch_is_not_finished_and_reruns(finished, tmp_path,
                                                                         monkeypatch):
    """The tiles the grown run does not keep are removed, then the process stops before
    the manifest switch (the extend kill tests do this with real signals)."""
    from kernelcli.store import RunStore

    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    np.save(tmp_path / "more.npy", images(4, seed=9))

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(RunStore, "grow", stop)
    with pytest.raises(KeyboardInterrupt):
        kernelcli.extend(run, append=tmp_path / "more.npy")
    monkeypatch.undo()
    report = kernelcli.run.status(run)
    assert not report.finished and "tiles are missing from" in report.result_problem
    checked = kernelcli.run.verify(run)
    assert not checked.ok and "an interrupted `kernelcli extend`" in checked.problems[0]
    assert kernelcli.extend(run, append=tmp_path / "more.npy").result is not None
    assert kernelcli.run.verify(run).ok and kernelcli.run.status(run).finished


def test_every_reader_refuses_a_fifo_in_process(tmp_path):
    """The readers the CLI cases do not reach (test_diag.h5 and other sealed side files,
    kernels.h5 by path): refused at once, never opened for reading."""
    from kernelcli.store import ResultFile
    from kernelcli.store._run_files import read_npz

    # the readers of sealed files and of .npz run files, each given a hostile one
    from kernelcli.store._sealed import read_sealed

    fifo = tmp_path / "test_diag.h5"
    os.mkfifo(fifo)
    with pytest.raises(UntrustedFileError, match=r"test_diag.h5 is a FIFO, not a regular"):
        read_sealed(fifo)
    with pytest.raises(UntrustedFileError, match="is a FIFO, not a regular file"):
        read_npz(fifo)
    with pytest.raises(UntrustedFileError, match="is a FIFO, not a regular file"):
        ResultFile(fifo).digests()
    assert ResultFile(fifo).problem("run") == "it is a FIFO, not a regular file"


def test_a_hostile_shard_record_is_skipped_and_said(finished, tmp_path):
    """A job array's process record is a diagnostics file: a FIFO in its place never
    fails ``status`` (nor makes it wait); it is skipped, and said."""
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    path = run / "shards" / "0of2.json"
    path.parent.mkdir(exist_ok=True)
    said = hostile("fifo", path, tmp_path / "outside.json")
    out = run_cli("status", run, timeout=HANG)
    assert out.returncode == 0, out.stderr
    assert f"skipped: {path} ({path} {said}" in out.stdout

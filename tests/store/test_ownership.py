"""A run directory owns only what kernelcli wrote: a new run
only in an empty folder, ``--overwrite`` deletes only this run's own files, a run's
input is never where kernelcli writes, a run's folders are never shared (a link, or
tiles of another run), one writer at a time (the run directory's lock), a killed
``clean`` leaves a run the next command accepts, and the run directory's own path
is checked. Every case: exit 2, one line, no traceback, and every user file hashed
before and after."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers_cli import cli_env, error_line, images, invoke, run_cli, snapshot, write_config

pytestmark = pytest.mark.usefixtures("keep_process_state")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Data, a configuration and a finished run of it (``run/``), computed once."""
    d = tmp_path_factory.mktemp("own")
    np.save(d / "x.npy", images(4, seed=3))
    np.save(d / "t.npy", images(2, seed=4))
    cfg = write_config(d, "a", compute={"block": 2}, run_dir="run", kinds=["nngp"],
                       keep_tiles=True)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 0, result.stderr
    return d, cfg


@pytest.fixture
def run(project, tmp_path):
    """A private copy of the finished run."""
    d, cfg = project
    shutil.copytree(d / "run", tmp_path / "run")
    return tmp_path / "run"


def hashes(folder: Path) -> dict:
    """sha256 of every file under ``folder`` (a user's files, to prove none changed)."""
    return {k: hashlib.sha256(v).hexdigest() for k, v in snapshot(folder).items()}


def user_files(folder: Path, names) -> dict:
    """Write a file of the user's (random bytes) under each of ``names``; their hashes."""
    for i, name in enumerate(names):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(64) + name.encode())
    return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}


def unchanged(folder: Path, files: dict) -> bool:
    return all(hashlib.sha256((folder / n).read_bytes()).hexdigest() == h
               for n, h in files.items())


def test_a_folder_of_the_users_is_refused_as_a_new_run(project, tmp_path):
    d, cfg = project
    folder = tmp_path / "mine"
    mine = user_files(folder, ["labels.npz"])  # the case: a user's labels.npz
    for extra in ((), ("--overwrite",)):
        result = invoke("compute", cfg, "--run-dir", folder, *extra)
        assert result.exit_code == 2
        assert error_line(result) == (
            f"Error: {folder} holds files that are not kernelcli's (e.g. labels.npz) and is "
            f"not a kernelcli run; kernelcli only creates a run in an empty folder (or one "
            f"that already holds a run): choose another --run-dir")
        assert sorted(os.listdir(folder)) == ["labels.npz"]
        assert unchanged(folder, mine)


def test_an_input_where_kernelcli_writes_is_refused_naming_both(project, tmp_path):
    d, _ = project
    for key, rel in (("labels", "labels.npz"), ("x1", "tiles/x.npy")):
        run = tmp_path / f"run-{key}"
        (run / "tiles").mkdir(parents=True)
        np.save(run / "tiles" / "x.npy", images(4, seed=3))
        np.savez(run / "labels.npz", y=np.arange(4))
        doc = {"name": "c", "data": {"x1": str(run / "tiles" / "x.npy")},
               "architecture": {"layers": [{"dense": {}}]}, "output": {"run_dir": str(run)}}
        if key == "labels":
            doc["data"] = {"x1": str(d / "x.npy"), "labels": str(run / rel), "labels_key": "y"}
        cfg = tmp_path / f"{key}.yaml"
        cfg.write_text(yaml.safe_dump(doc))
        before = hashes(run)
        result = invoke("compute", cfg, "--overwrite")
        assert result.exit_code == 2
        ours = run / ("labels.npz" if key == "labels" else "tiles")
        assert error_line(result) == (
            f"Error: data.{key}: {run / rel} is {ours} in the run directory, where kernelcli "
            f"writes its own files; move the input out of {run}, or choose another --run-dir")
        assert hashes(run) == before


def test_overwrite_deletes_only_this_runs_own_files(run, project):
    d, cfg = project
    mine = user_files(run, ["tiles/user.txt", "shards/notes.txt", "quarantine/mine.bin",
                            "notes.txt"])
    theirs = user_files(run, ["labels.npz", "predictions.h5", "test_diag.h5"])
    why = {"labels.npz": "is not a file this run wrote (its manifest does not name it)",
           "predictions.h5": "is not a predictions file kernelcli wrote",
           "test_diag.h5": "is not this run's test diagonal"}
    for name in sorted(theirs):  # each refused in turn, deleting nothing
        before = hashes(run)
        result = invoke("compute", cfg, "--run-dir", run, "--overwrite")
        assert result.exit_code == 2
        assert error_line(result) == (
            f"Error: {run / name} {why[name]}; kernelcli deletes only its own files, so "
            f"nothing was deleted: move it away, or choose another run directory")
        assert hashes(run) == before
        (run / name).unlink()  # the user moves it away
    result = invoke("compute", cfg, "--run-dir", run, "--overwrite", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert unchanged(run, mine) and (run / "kernels.h5").is_file()
    assert sorted(os.listdir(run / "tiles"))[-1] == "user.txt"


def test_a_tiles_folder_shared_by_a_link_is_refused_before_anything_moves(run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(run, other)
    (other / "kernels.h5").unlink()
    shutil.rmtree(other / "tiles")
    os.symlink(run / "tiles", other / "tiles")
    before = hashes(run)
    for command in ("resume", "clean", "verify", "assemble"):
        result = invoke(command, other)
        assert result.exit_code == 2, (command, result.stderr)
        assert error_line(result) == (
            f"Error: {other / 'tiles'} is a symbolic link (to {run / 'tiles'}): a run "
            f"directory's tiles/ is its own, never shared with another run; replace the link "
            f"by the folder it points to, or start the run afresh in an empty folder")
        assert hashes(run) == before


def test_a_killed_clean_leaves_a_run_the_next_command_accepts(run, project):
    d, _ = project
    # what `clean` has written when killed before its first delete: the record only
    tiles = len(os.listdir(run / "tiles"))
    (run / "tiles_removed.json").write_text(json.dumps(
        {"removed": "2026-01-01T00:00:00+0000", "tiles": tiles, "result_sha256": {}}))
    (run / "kernels.h5").unlink()
    result = invoke("assemble", run, "--quiet")
    assert result.exit_code == 0, result.stderr
    result = invoke("extend", run, "--test", d / "t.npy", "--dry-run")
    assert result.exit_code == 0, result.stderr
    # killed half-way through deleting: the record stands, the result is whole
    (run / "tiles_removed.json").write_text(json.dumps(
        {"removed": "2026-01-01T00:00:00+0000", "tiles": tiles, "result_sha256": {}}))
    os.unlink(run / "tiles" / sorted(os.listdir(run / "tiles"))[0])
    assert invoke("assemble", run, "--quiet").exit_code == 0  # kernels.h5 verifies
    assert invoke("verify", run).exit_code == 0
    assert invoke("clean", run, "--quiet").exit_code == 0  # finishes the job
    assert not (run / "tiles").exists()


_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()  # until the test closes the pipe (or kills this process)
"""


def hold_lock(run: Path) -> subprocess.Popen:
    """Another process holding ``run``'s lock, deterministically (it says when)."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(run / ".kernelcli.lock")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_one_writer_per_run_directory(run, project):
    d, cfg = project
    for attempt in range(20):  # a lock test is trusted only once it always holds
        holder = hold_lock(run)
        before = hashes(run)
        for args in (("clean", run), ("assemble", run), ("resume", run),
                     ("compute", cfg, "--run-dir", run),
                     ("extend", run, "--test", d / "t.npy")):
            result = invoke(*args)
            assert result.exit_code == 2, (args, result.stderr)
            assert error_line(result) == (
                f"Error: {run} is in use by another kernelcli process (it holds "
                f"{run / '.kernelcli.lock'}); wait for it to end, then run this again")
        assert hashes(run) == before
        if attempt % 2:
            holder.stdin.close()
            holder.wait()
        else:  # a crashed holder never blocks: the OS lets go of its lock
            holder.kill()
            holder.wait()
            holder.stdin.close()
        assert invoke("assemble", run, "--quiet").exit_code == 0
    # readers take no lock
    holder = hold_lock(run)
    try:
        assert invoke("verify", run).exit_code == 0
        assert invoke("status", run).exit_code == 0
    finally:
        holder.kill()
        holder.wait()


_STORE_HOLDER = """
import sys
from kernelcli.store import RunStore
with RunStore(sys.argv[1]).lock():
    print("held", flush=True)
    sys.stdin.read()  # until the test closes the pipe (or kills this process)
"""


def test_a_deleted_lock_file_still_keeps_a_second_writer_out(run, project):
    """flock holds the file the name stood for; the run directory's own lock still
    refuses a second writer once that file is deleted (or replaced) under the holder."""
    d, cfg = project
    holder = subprocess.Popen([sys.executable, "-c", _STORE_HOLDER, str(run)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=cli_env())
    try:
        assert holder.stdout.readline() == "held\n"  # it holds the lock: now delete it
        lock = run / ".kernelcli.lock"
        for replace in (False, True):
            lock.unlink()
            if replace:
                lock.write_bytes(b"")
            before = {k: v for k, v in hashes(run).items() if k != lock.name}
            for args in (("assemble", run), ("extend", run, "--test", d / "t.npy")):
                result = run_cli(*args, timeout=120)
                assert result.returncode == 2, (args, result.stderr)
                assert result.stderr.strip().splitlines()[-1] == (
                    f"Error: {run} is in use by another kernelcli process (it holds "
                    f"{lock}); wait for it to end, then run this again")
            assert {k: v for k, v in hashes(run).items() if k != lock.name} == before
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
        holder.stdin.close()
    assert run_cli("assemble", run, "--quiet").returncode == 0  # the holder is gone


@pytest.mark.parametrize("name, shown", [("../../x", "'../../x'"), ("/abs", "/abs"),
                                         ("..", "'..'")])
def test_a_run_name_that_is_a_path_is_refused(tmp_path, name, shown):
    np.save(tmp_path / "x.npy", images(2))
    cfg = write_config(tmp_path, "c", run_dir=None, run_name=name)
    result = invoke("compute", cfg)
    assert result.exit_code == 2
    line = error_line(result)
    assert line.startswith("Error: ") and "name: " in line
    assert "is not a plain name (it holds a path separator or is '.' or '..'); expected one " \
           "file name, e.g. cifar-relu, and output.run_dir to put the run elsewhere" in line
    assert sorted(os.listdir(tmp_path)) == ["c.yaml", "x.npy"]


def test_the_root_or_a_too_long_run_directory_is_refused(project, tmp_path):
    d, cfg = project
    result = invoke("compute", cfg, "--run-dir", "/")
    assert result.exit_code == 2
    assert error_line(result) == (
        "Error: --run-dir: '/' is the root of the file system; expected a folder of its own "
        "for the run (e.g. runs/NAME)")
    long = tmp_path / ("r" * 300)
    for args in (("compute", cfg, "--run-dir", long), ("status", long), ("resume", long)):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.stderr)
        line = error_line(result)
        assert "is too long (300 bytes in one name" in line and "expected names of at most " \
               "255 bytes" in line
    assert sorted(os.listdir(tmp_path)) == []


def test_extend_deletes_only_the_runs_own_side_files(run, project):
    d, _ = project
    mine = user_files(run, ["predictions.h5", "labels.npz", "tiles/notes.txt"])
    result = invoke("extend", run, "--test", d / "t.npy", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert unchanged(run, mine)


def test_the_processes_of_a_job_array_share_the_lock_and_exclude_any_other(run):
    from kernelcli.errors import RunDirError
    from kernelcli.store import RunStore

    holder = subprocess.Popen([sys.executable, "-c", _HOLDER.replace("LOCK_EX", "LOCK_SH"),
                               str(run / ".kernelcli.lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with RunStore(run).lock(shared=True):  # another shard: fine
            pass
        with pytest.raises(RunDirError, match="is in use by another kernelcli process"):
            with RunStore(run).lock():
                pass
    finally:
        holder.kill()
        holder.wait()
    with RunStore(run).lock():
        with RunStore(run).lock():  # a command called within one (extend -> resume)
            pass


def test_clean_refuses_a_tile_of_another_run_deleting_nothing(run):
    from kernelcli.plan import Block
    from kernelcli.store._tiles import write_tile  # a tile written by hand

    tile = run / "tiles" / "r00000c00000.h5"
    tile.unlink()
    write_tile(run / "tiles", Block(0, 0, 0, 2, 0, 2, diagonal=True),
               {"nngp": np.ones(3)}, run="f" * 64)
    before = hashes(run)
    for command in ("clean", "verify"):
        result = invoke(command, run)
        assert result.exit_code == 2, result.stderr
        assert error_line(result) == (
            f"Error: {tile} is a tile of another run (run identity ffffffffffff...), not of "
            f"this one: run directories cannot share folders, so nothing was moved or "
            f"deleted; move that tile (or the whole tiles/ folder) back to its own run "
            f"directory")
        assert hashes(run) == before

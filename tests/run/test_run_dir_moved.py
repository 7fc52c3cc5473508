"""A command writes only into the directory it locked. The run directory renamed away
and a copy put back at its path while ``compute`` runs: the lock is on the moved
directory, so a second writer could lock the copy; the first must not write its tiles
into the copy by path. It stops at its next tile with one line saying where its run
went, and the copy receives nothing from it. A real ``compute`` held after its first
tile (no timing), a real rename."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import numpy as np

from helpers_cli import cli_env, images, write_config

# The CLI held once it has published its first tile, until a file ``release`` appears
# beside the config (the test renames the run directory meanwhile).
HOLD = """
import os, re, sys, time
replace, published = os.replace, [0]
def replace_then_hold(src, dst, *args, **kwargs):
    replace(src, dst, *args, **kwargs)
    if re.fullmatch(r"r[0-9]+c[0-9]+[.]h5", os.path.basename(os.fsdecode(dst))):
        published[0] += 1
        if published[0] == 1:
            os.write(2, b"held\\n")
            while not os.path.exists("release"):
                time.sleep(0.05)
os.replace = replace_then_hold
sys.argv = ["kernelcli", *sys.argv[1:]]
from kernelcli._entry import main
sys.exit(main())
"""


def _files(folder) -> set:
    return {p.relative_to(folder) for p in folder.rglob("*") if p.is_file()}


def test_a_run_directory_moved_away_while_computing_receives_nothing_more(tmp_path):
    np.save(tmp_path / "x.npy", images(40))
    cfg = write_config(tmp_path, "moved", compute={"block": 8, "devices": 1,
                                                   "engine": "cpu"},
                       keep_tiles=True)
    err = open(tmp_path / "err", "w")
    proc = subprocess.Popen([sys.executable, "-c", HOLD, "compute", str(cfg), "--quiet"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
                            env=cli_env())
    try:
        deadline = time.monotonic() + 300
        while "held" not in (tmp_path / "err").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, (
                (tmp_path / "err").read_text())
            time.sleep(0.05)
        run, moved = tmp_path / "run", tmp_path / "run_moved"
        run.rename(moved)
        shutil.copytree(moved, run)  # another directory at the path the command wrote by
        before = _files(run)
        (tmp_path / "release").touch()
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()
    lines = (tmp_path / "err").read_text().strip().splitlines()
    assert rc == 2, lines
    assert lines[-1] == (f"Error: {run} is no longer the run directory this command "
                         f"locked (it was moved, renamed or replaced while the command "
                         f"ran); nothing more is written there: find where the run went, "
                         f"and continue it there with `kernelcli resume`")
    assert _files(run) == before  # the copy received nothing

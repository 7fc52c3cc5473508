"""What a Ray run says about its cluster, no Ray needed: the words of its
:class:`ClusterState` on the progress line, the record it leaves in
``shards/ray.json`` and how ``status`` shows it, ``KERNELCLI_RAY_WAIT_SECONDS``, and
the record's place among a run directory's own files. The runs on real clusters are in
test_ray.py and test_ray_faults.py.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from test_ray import write_case

from helpers_cli import run_cli
from kernelcli import _env
from kernelcli.errors import ConfigError
from kernelcli.pipeline import Progress
from kernelcli.pipeline._ray_pool import ClusterState


@pytest.mark.parametrize("state, note", [
    (ClusterState("CPU", 2, 2), ""),
    (ClusterState("CPU", 2, 1, waiting=1, free=0.0),
     "waiting for 1 actor (cluster has 0 CPUs free)"),
    (ClusterState("GPU", 8, 5, waiting=3, free=1.0),
     "waiting for 3 actors (cluster has 1 GPU free)"),
    (ClusterState("CPU", 2, 1, given_up=1), "on 1 of 2 actors"),
    (ClusterState("CPU", 2, 1, waiting=1, free=0.0, actors_lost=1, requeued=2),
     "waiting for 1 actor (cluster has 0 CPUs free); 1 actor lost, 2 blocks requeued"),
    (ClusterState("CPU", 3, 2, nodes_lost=("127.0.0.1 (node 3f2a12c4)",), actors_lost=1,
                  requeued=1), "1 node lost, 1 block requeued"),
])
def test_the_progress_line_says_what_the_run_waits_for_and_what_it_lost(state, note):
    assert state.note == note
    assert state.to_dict()["note"] == note


def _printer():
    from kernelcli.cli._progress import ProgressPrinter

    out = io.StringIO()
    return ProgressPrinter("f", stream=out), out


def test_a_note_ends_the_progress_line_and_a_change_prints_a_line():
    printer, out = _printer()
    printer(Progress(0, 0, 0, 0, 1.0, 0, note="waiting for 1 actor (cluster has 0 CPUs free)"))
    printer(Progress(0, 0, 0, 0, 2.0, 0, note="waiting for 1 actor (cluster has 0 CPUs free)"))
    printer(Progress(0, 100, 0, 10, 3.0, 0))
    printer(Progress(1, 100, 1, 10, 3.1, 1))  # below the 5% step: no line
    printer(Progress(2, 100, 2, 10, 3.2, 2, note="1 node lost, 2 blocks requeued"))
    printer(Progress(3, 100, 3, 10, 3.3, 3, note="1 node lost, 2 blocks requeued"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "f: waiting for 1 actor (cluster has 0 CPUs free)"  # once, before the plan
    assert lines[1].startswith("f [") and "blocks 0/10" in lines[1]
    assert len(lines) == 3 and "blocks 2/10" in lines[2]
    assert lines[2].endswith("  1 node lost, 2 blocks requeued")


@pytest.mark.parametrize("value, want", [(None, 120.0), ("", 120.0), ("30", 30.0),
                                         (" 2.5 ", 2.5)])
def test_the_wait_bound_is_seconds(value, want):
    env = {} if value is None else {_env.RAY_WAIT_SECONDS: value}
    assert _env.ray_wait_seconds(env) == want


@pytest.mark.parametrize("value", ["0", "-1", "soon", "1e9"])
def test_a_bad_wait_bound_is_refused_naming_the_variable(value):
    with pytest.raises(ConfigError, match=rf"^KERNELCLI_RAY_WAIT_SECONDS: {value!r} is not "
                                          r"accepted; expected a number of seconds"):
        _env.ray_wait_seconds({_env.RAY_WAIT_SECONDS: value})


@pytest.fixture
def finished_run(tmp_path):
    cfg = write_case(tmp_path, n=16)
    proc = run_cli("compute", cfg, "--run-dir", tmp_path / "run", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "run"


def _record(run_dir, pid: int) -> None:
    """The record a driver with process ``pid`` on this host writes (``mark_ray``)."""
    import socket

    state = ClusterState("CPU", 2, 0, waiting=2, free=0.0,
                         nodes_lost=("127.0.0.1 (node 3f2a12c4)",), actors_lost=1, requeued=2)
    (run_dir / "shards").mkdir(exist_ok=True)
    (run_dir / "shards" / "ray.json").write_text(json.dumps(dict(
        state.to_dict(), running=True, host=socket.gethostname(), pid=pid,
        updated="2026-03-02T10:14:07+0000")))


def test_status_shows_what_the_last_ray_driver_saw(finished_run):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _record(finished_run, pid=child.pid)  # a driver alive on this host
        out = run_cli("status", finished_run)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("ray: ")]
        assert line and line[0].startswith(
            "ray: 1 node lost (127.0.0.1 (node 3f2a12c4)), 1 actor lost, 2 blocks requeued; "
            f"0 of 2 actors placed, waiting for 2 (driver pid {child.pid} on "), out.stdout
        assert ", running; recorded " in line[0]
        doc = json.loads(run_cli("status", finished_run, "--json").stdout)["ray"]
        assert doc["nodes_lost"] == ["127.0.0.1 (node 3f2a12c4)"] and doc["running"] is True
        assert (doc["requeued"], doc["planned"], doc["placed"]) == (2, 2, 0)
    finally:
        child.kill()
        child.wait()
    # its process gone (SIGKILLed with the driver): not running any more
    doc = json.loads(run_cli("status", finished_run, "--json").stdout)["ray"]
    assert doc["running"] is False


def test_a_run_without_a_ray_record_and_a_damaged_one_show_none(finished_run):
    assert "ray" not in json.loads(run_cli("status", finished_run, "--json").stdout)
    (finished_run / "shards").mkdir(exist_ok=True)
    (finished_run / "shards" / "ray.json").write_text('{"planned": "many"')
    out = run_cli("status", finished_run, "--json")
    assert out.returncode == 0 and "ray" not in json.loads(out.stdout)


def test_the_ray_record_is_the_runs_own_file(finished_run):
    """``--overwrite`` deletes it with the run (and leaves a file of another name in
    ``shards/``); ``extend`` forgets it with the job array's records."""
    from kernelcli.store import RunStore, owned_files

    RunStore.open(finished_run).mark_ray(dict(ClusterState("CPU", 2, 1, given_up=1).to_dict(),
                                              running=False))
    owned = owned_files(finished_run)
    assert finished_run / "shards" / "ray.json" in owned
    assert finished_run / "shards" in owned  # nothing else there: the folder goes too
    (finished_run / "shards" / "notes.txt").write_text("mine")
    owned = owned_files(finished_run)
    assert finished_run / "shards" / "ray.json" in owned
    assert finished_run / "shards" not in owned
    RunStore.open(finished_run).growth.remove_shard_markers()  # what extend does
    assert sorted(os.listdir(finished_run / "shards")) == ["notes.txt"]


@pytest.mark.parametrize("make", ["large", "link", "fifo", "garbage"])
def test_a_ray_record_that_cannot_be_read_is_skipped_and_said(finished_run, tmp_path, make):
    """A diagnostics file never fails a command: status exits 0, says it skipped it and
    why, whatever sits there (never waiting on a FIFO)."""
    path = finished_run / "shards" / "ray.json"
    path.parent.mkdir(exist_ok=True)
    if make == "large":
        path.write_bytes(b" " * (18 << 20))
    elif make == "link":
        (tmp_path / "elsewhere.json").write_text("{}")
        path.symlink_to(tmp_path / "elsewhere.json")
    elif make == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("[1, 2]")
    out = run_cli("status", finished_run, timeout=120)
    assert out.returncode == 0, out.stderr
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("skipped: ")]
    assert line.startswith(f"skipped: {path} (")
    doc = json.loads(run_cli("status", finished_run, "--json", timeout=120).stdout)
    assert "ray" not in doc and doc["skipped"] == [line[len("skipped: "):]]


def test_what_status_prints_from_a_run_file_cannot_forge_a_line(finished_run):
    """A newline (or an escape sequence) in a field of ``shards/ray.json`` is shown
    escaped, on the line it belongs to: never a line of its own such as a forged error."""
    (finished_run / "shards").mkdir(exist_ok=True)
    state = ClusterState("CPU", 2, 2)
    (finished_run / "shards" / "ray.json").write_text(json.dumps(dict(
        state.to_dict(), running=False, host="node7\nError: the run is damaged\x1b[2J",
        pid=0, updated="2026-03-02T10:14:07+0000")))
    out = run_cli("status", finished_run)
    assert out.returncode == 0, out.stderr
    assert not [ln for ln in out.stdout.splitlines() if ln.startswith("Error")]
    assert "node7\\x0aError: the run is damaged\\x1b[2J" in out.stdout

"""Job arrays: `--shard I/N` processes sharing one run directory, with real processes.

Several `kernelcli compute --shard I/N` subprocesses write one run directory at once
(one of them SIGKILLed mid-run and run again), the same shard runs twice at once,
the last shard assembles, `status` counts per shard, `assemble` refuses an
incomplete run; every assembled matrix is bit-identical to a single-process run.
Tiny inputs (6x6x2 images, conv + relu + global_avg_pool + dense, block 8) keep
each process at a few seconds, most of it importing JAX and compiling.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from kernelcli.cli import main
from kernelcli.pipeline import parse_shard, shard_blocks, worker_loads
from kernelcli.plan import assign, make_plan
from kernelcli.store import Manifest, RunStore

# whose temporary files are stale: the store's own rule, with no public entry alone
from kernelcli.store._atomic import host_tag, remove_stale_tmp

KERNELCLI = shutil.which("kernelcli", path=os.path.dirname(sys.executable)) or os.path.join(
    os.path.dirname(sys.executable), "kernelcli")
N = 48          # 6 x 6 grid of 8-row blocks: 21 tiles in the lower triangle
SQRT2 = 1.4142135623730951


def write_case(folder: Path, name: str = "c", n: int = N, keep_tiles: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    x = np.random.default_rng(0).standard_normal((n, 6, 6, 2)).astype(np.float32)
    np.save(folder / "x.npy", x)
    doc = {
        "name": name,
        "data": {"x1": "x.npy"},
        "architecture": {"layers": [
            {"conv": {"filter": [3, 3], "padding": "SAME", "W_std": SQRT2, "b_std": 0.1}},
            "relu", "global_avg_pool", {"dense": {"W_std": 1.0, "b_std": 0.0}}]},
        "compute": {"block": 8},
        "output": {"run_dir": "run", "keep_tiles": keep_tiles},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def start(*args, **kw) -> subprocess.Popen:
    return subprocess.Popen([KERNELCLI, *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def run(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([KERNELCLI, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def run_here(*args):
    """``kernelcli ARGS`` in-process, for the commands that compute nothing (status, a
    refusal): the CLI's own code from its parser down, without a process start."""
    from types import SimpleNamespace

    from helpers_cli import invoke

    r = invoke(*args)
    return SimpleNamespace(returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def read_result(path: Path) -> tuple[dict, dict]:
    with h5py.File(path, "r") as f:
        return {k: f[k][...] for k in f.keys()}, {k: f.attrs[k] for k in f.attrs.keys()}


def tmp_leftovers(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.rglob(".*.tmp"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One single-process run of the case: the kernels every sharded run must equal."""
    folder = tmp_path_factory.mktemp("reference")
    cfg = write_case(folder)
    done = run("compute", cfg, "--quiet")
    assert done.returncode == 0, done.stderr
    arrays, attrs = read_result(folder / "run" / "kernels.h5")
    manifest = json.loads((folder / "run" / "manifest.json").read_text())
    return arrays, attrs, manifest


def assert_same_result(run_dir: Path, reference, keys=("config", "data_fingerprint",
                                                        "kernelcli_version")) -> None:
    want, want_attrs, want_manifest = reference
    got, attrs = read_result(run_dir / "kernels.h5")
    assert sorted(got) == sorted(want) == ["nngp", "ntk"]
    for kind in want:
        assert got[kind].dtype == want[kind].dtype
        assert np.array_equal(got[kind], want[kind]), kind
    # (config_fingerprint differs: it holds the absolute data path of each tmp folder)
    for key in keys:
        assert attrs[key] == want_attrs[key]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["plan"] == want_manifest["plan"]


def shard_keys(run_dir: Path, index: int, count: int) -> set[str]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    plan = Manifest.check(manifest, run_dir).geometry
    return {b.key for b in shard_blocks(plan.blocks, (index, count))}


def tiles(run_dir: Path) -> set[str]:
    folder = run_dir / "tiles"
    return {p.stem for p in folder.glob("r*c*.h5")} if folder.is_dir() else set()


# -- concurrent shards, one killed and re-run ---------------------------------------

@pytest.mark.slow
def test_concurrent_shards_one_killed_and_rerun_match_a_single_process_run(tmp_path,
                                                                           reference):
    from helpers_cli import finish as finish_logged
    from helpers_cli import start_held, wait_held

    cfg = write_case(tmp_path, keep_tiles=True)
    run_dir = tmp_path / "run"
    # Three processes start at once on a run directory that does not exist yet; shard 1
    # holds right after its first tile (of 7, each a few milliseconds) and is killed there.
    procs = [start_held("compute", cfg, "--shard", "1/3", "--quiet", after=1,
                        log_dir=tmp_path / "logs") if i == 1 else
             start("compute", cfg, "--shard", f"{i}/3", "--quiet") for i in range(3)]
    victim = procs[1]
    wait_held(victim, timeout=90)
    victim.send_signal(signal.SIGKILL)
    code, _, err = finish_logged(victim, timeout=120)
    assert code == -signal.SIGKILL, f"shard 1 ended before it was killed: {err}"
    mine = shard_keys(run_dir, 1, 3)
    assert tiles(run_dir) & mine and mine - tiles(run_dir), \
        "the kill should land after shard 1's first tile and before its last"
    for i in (0, 2):
        code, out, err = finish(procs[i])
        assert code == 0, err
        assert out == ""
    assert not (run_dir / "kernels.h5").exists()  # shard 1's tiles are missing

    status = json.loads(run("status", run_dir, "--json").stdout)
    assert status["shard_count"] == 3 and not status["finished"]
    rows = {r["index"]: r for r in status["shards"]}
    assert rows[0]["finished"] and rows[2]["finished"] and not rows[1]["finished"]
    assert rows[1]["started"]
    assert rows[1]["blocks_done"] == len(tiles(run_dir) & mine) < rows[1]["blocks_total"]

    again = run("resume", run_dir, "--shard", "1/3")  # the re-run of the killed shard
    assert again.returncode == 0, again.stderr
    assert "wrote" in again.stderr  # the last shard to finish assembled the result
    assert_same_result(run_dir, reference, keys=("data_fingerprint", "kernelcli_version"))  # config: keep_tiles differs
    assert tmp_leftovers(run_dir) == []
    assert len(tiles(run_dir)) == 21

    # A run whose tiles are all there but whose result is gone (say the assembling
    # shard was killed) is assembled by `kernelcli assemble`, without JAX or the data.
    (run_dir / "kernels.h5").unlink()
    (tmp_path / "x.npy").unlink()
    done = run("assemble", run_dir)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == f"wrote {run_dir / 'kernels.h5'}"
    assert_same_result(run_dir, reference, keys=("data_fingerprint", "kernelcli_version"))  # config: keep_tiles differs




@pytest.mark.slow
def test_the_same_shard_twice_at_once_then_the_other_shard_assembles(tmp_path, reference,
                                                                  keep_process_state):
    cfg = write_case(tmp_path)
    run_dir = tmp_path / "run"
    twins = [start("compute", cfg, "--shard", "0/2") for _ in range(2)]
    for proc in twins:
        code, out, err = finish(proc)
        assert code == 0, err
        assert "shard 0/2: its" in err and "still missing" in err
        assert f"kernelcli assemble {run_dir}" in err
    want = shard_keys(run_dir, 0, 2)
    assert tiles(run_dir) == want
    assert not (run_dir / "kernels.h5").exists()
    assert tmp_leftovers(run_dir) == []

    # assemble refuses, saying how many tiles (and of which shard) are missing
    missing = 21 - len(want)
    refused = run_here("assemble", run_dir)
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        f"Error: cannot assemble {run_dir / 'kernels.h5'}: {missing} of 21 tiles are "
        f"missing (shard 1/2 lacks {missing})")
    assert "Traceback" not in refused.stderr

    # status: from the markers, per shard; text and JSON
    text = run_here("status", run_dir)
    assert text.returncode == 0
    assert "shard 0/2: 100.0% of pairs" in text.stdout and ", done" in text.stdout
    assert "shard 1/2:   0.0% of pairs" in text.stdout and "not started" in text.stdout
    status = json.loads(run_here("status", run_dir, "--json").stdout)
    assert [(r["index"], r["count"], r["started"], r["finished"]) for r in status["shards"]] \
        == [(0, 2, True, True), (1, 2, False, False)]
    assert sum(r["pairs_total"] for r in status["shards"]) == status["pairs_total"]
    assert status["shards"][0]["pairs_done"] == status["pairs_done"]
    # --shards N counts for another split of the same plan, deterministically
    other = json.loads(run_here("status", run_dir, "--json", "--shards", "3").stdout)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    parts = assign(Manifest.check(manifest, run_dir).geometry.blocks, 3)
    assert [r["blocks_total"] for r in other["shards"]] == [len(p) for p in parts]
    assert [r["blocks_done"] for r in other["shards"]] == [
        len({b.key for b in p} & want) for p in parts]

    # a process of the array given another configuration is refused, touching nothing
    other = tmp_path / "other.yaml"
    other.write_text(cfg.read_text().replace("b_std: 0.1", "b_std: 0.2"))
    before = sorted(p.name for p in run_dir.rglob("*"))
    refused = run_here("compute", other, "--run-dir", run_dir, "--shard", "1/2")
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"Error: {run_dir} holds a run of a different "
                                     f"configuration ('c')")
    assert sorted(p.name for p in run_dir.rglob("*")) == before

    last = run("compute", cfg, "--shard", "1/2", "--quiet")
    assert last.returncode == 0, last.stderr
    assert_same_result(run_dir, reference)
    done = run_here("assemble", run_dir)
    assert done.returncode == 0 and "already complete" in done.stderr
    final = json.loads(run_here("status", run_dir, "--json").stdout)
    assert final["finished"] and all(r["finished"] for r in final["shards"])


# -- validation of --shard and the combinations that cannot work ---------------------

@pytest.mark.parametrize("value, why", [
    ("3/3", "has I = 3, which is not below N = 3 (I counts from 0)"),
    ("4/2", "has I = 4, which is not below N = 2 (I counts from 0)"),
    ("-1/3", "is not of the form I/N"),
    ("1/0", "has N = 0 processes"),
    ("1", "is not of the form I/N"),
    ("a/b", "is not of the form I/N"),
    ("", "is not of the form I/N"),
    ("1.0/2", "is not of the form I/N"),
])
@pytest.mark.parametrize("command", ["compute", "resume"])
def test_bad_shard_values_are_usage_errors_naming_option_value_and_rule(tmp_path, value, why,
                                                                        command):
    target = write_case(tmp_path) if command == "compute" else tmp_path / "run"
    result = CliRunner().invoke(main, [command, str(target), "--shard", value])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert f"Invalid value for '--shard': {value!r} {why}; expected I/N with integers " \
           f"0 <= I < N (I is this process's 0-based index, N the number of processes), " \
           f"e.g. 0/4" in result.output
    assert not (tmp_path / "run").exists()


def test_shard_help_says_it_counts_from_zero():
    result = CliRunner().invoke(main, ["compute", "--help"])
    assert result.exit_code == 0
    assert "--shard I/N" in result.output and "0-based" in result.output
    assert "--shards N" in CliRunner().invoke(main, ["status", "--help"]).output
    assert "--workers W" in CliRunner().invoke(main, ["estimate", "--help"]).output


@pytest.mark.parametrize("extra, message", [
    (["--overwrite"], "--overwrite cannot be combined with --shard 0/2"),
    (["--executor", "ray"], "--shard 0/2 cannot be combined with the ray executor"),
])
def test_shard_with_overwrite_or_ray_is_refused_before_anything_is_written(tmp_path, extra,
                                                                           message):
    cfg = write_case(tmp_path)
    result = CliRunner().invoke(main, ["compute", str(cfg), "--shard", "0/2", *extra])
    assert result.exit_code == 2
    assert f"Error: {message}" in result.output
    assert not (tmp_path / "run").exists()


def test_parse_shard():
    assert parse_shard("0/1") == (0, 1)
    assert parse_shard(" 3 / 4 ") == (3, 4)


# -- the split: deterministic, balanced by pair evaluations ---------------------------

def test_shards_partition_the_blocks_and_balance_pairs():
    from kernelcli.plan import make_plan

    plan = make_plan(1000, 1000, symmetric=True, bytes_per_pair=1, fixed_bytes=0,
                     budget_bytes=10**6, kinds=("nngp",), itemsize=4, block=64)
    for count in (1, 2, 3, 7, 16, 200):
        parts = [shard_blocks(plan.blocks, (i, count)) for i in range(count)]
        keys = [b.key for part in parts for b in part]
        assert sorted(keys) == sorted(b.key for b in plan.blocks)  # each block exactly once
        assert parts == [shard_blocks(plan.blocks, (i, count)) for i in range(count)]
        loads = worker_loads(plan.blocks, count)
        assert sum(loads) == plan.pairs_total
        biggest = max(b.n_pairs for b in plan.blocks)
        assert max(loads) - min(loads) <= biggest  # greedy longest-first bound


def test_estimate_reports_the_busiest_workers_share(tmp_path):
    cfg = write_case(tmp_path)
    result = run("estimate", cfg, "--memory", "--workers", "4", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    plan = make_plan(N, N, symmetric=True, bytes_per_pair=1, fixed_bytes=0,
                     budget_bytes=out["pair_batch"], kinds=("nngp", "ntk"), itemsize=4,
                     block=out["block"], pair_batch=out["pair_batch"])
    loads = worker_loads(plan.blocks, 4)
    assert out["workers"] == 4
    assert out["worker_pairs_max"] == max(loads) and out["worker_pairs_min"] == min(loads)
    assert out["worker_balance"] == pytest.approx(max(loads) * 4 / out["pairs_total"])
    assert out["worker_balance"] >= 1.0
    bad = CliRunner().invoke(main, ["estimate", str(cfg), "--memory", "--workers", "0"])
    assert bad.exit_code == 2 and "--workers" in bad.output


# -- the store under concurrency ------------------------------------------------------

# Each process says it is ready, then waits for "go" on stdin: all go at one moment,
# however long their interpreters took to start.
_JOIN = """
import json, sys
from kernelcli.store import RunStore
run_dir, manifest = sys.argv[1], json.loads(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
store, created = RunStore(run_dir).create_or_join(manifest)
print(json.dumps([created, store.manifest == manifest]))
"""


def test_exactly_one_of_many_concurrent_processes_creates_the_manifest(tmp_path):
    n = 8
    manifest = {"name": "t", "plan": {"block": 8}}
    procs = [subprocess.Popen([sys.executable, "-c", _JOIN, str(tmp_path / "run"),
                               json.dumps(manifest)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    for p in procs:  # a process that fails to start ends its stdout: "" here, not a hang
        assert p.stdout.readline() == "ready\n", p.communicate(timeout=60)[1]
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    got = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        got.append(json.loads(out))
    assert sorted(c for c, _ in got) == [False] * (n - 1) + [True]
    assert all(same for _, same in got)
    on_disk = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert on_disk.pop("checksum") and on_disk == manifest
    assert tmp_leftovers(tmp_path / "run") == []


def test_joining_returns_the_manifest_on_disk_not_ones_own(tmp_path):
    first, created = RunStore(tmp_path / "run").create_or_join({"name": "a", "x": 1})
    assert created
    second, created = RunStore(tmp_path / "run").create_or_join({"name": "a", "x": 2})
    assert not created and second.manifest == {"name": "a", "x": 1}


def test_other_machines_temporary_files_are_left_until_a_day_old(tmp_path):
    ours_dead = tmp_path / f".r00000c00000.h5.{2**22 + 12345}@{host_tag()}.tmp"
    theirs = tmp_path / ".r00001c00000.h5.1@some-other-node.tmp"
    theirs_old = tmp_path / ".r00002c00000.h5.1@some-other-node.tmp"
    for p in (ours_dead, theirs, theirs_old):
        p.write_bytes(b"half a tile")
    old = time.time() - 2 * 24 * 3600
    os.utime(theirs_old, (old, old))
    removed = remove_stale_tmp(tmp_path)
    assert sorted(p.name for p in removed) == sorted([ours_dead.name, theirs_old.name])
    assert theirs.exists()


def test_status_of_an_unsharded_run_says_the_split_is_only_a_split(tmp_path):
    from helpers_cli import GAP_NET, images, invoke, write_config

    np.save(tmp_path / "x.npy", images(5, seed=3))
    cfg = write_config(tmp_path, "c", layers=GAP_NET, compute={"block": 2})
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    out = invoke("status", tmp_path / "run", "--shards", "2").stdout.splitlines()
    assert out[1] == ("  no process of a 2-process job array (--shard I/2) has run here; how "
                      "the run's tiles divide over 2:")

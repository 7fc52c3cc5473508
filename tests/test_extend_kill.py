"""Kill a real ``kernelcli extend`` with SIGKILL at random moments (before the switch to
the grown run, right after it, mid-way through the new tiles, while assembling);
continuing with ``kernelcli resume`` or the same extend command must give, bit for
bit, the fresh run of the grown data set, and an old ``kernels.h5`` must never pass
for the grown result in between.
"""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers_cli import (GAP2_NET, assert_bit_identical, cli_env, finish, images,
                         read_kernels, run_cli, start_cli, tile_names, wait_until)

N_OLD, N_NEW, N_TEST, BLOCK = 36, 20, 6, 8
MAX_ATTEMPTS = 10


def config(folder: Path, name: str, x1: str) -> Path:
    doc = {"name": name, "data": {"x1": x1, "key": "x", "labels_key": "y",
                                  "test": "test.npz", "test_labels_key": "y"},
           "architecture": {"layers": GAP2_NET},
           "kernel": {"test_diagonal": True}, "compute": {"block": BLOCK},
           "output": {"run_dir": f"run_{name}"}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    cache = tmp_path_factory.mktemp("jax_cache")
    return cli_env(JAX_COMPILATION_CACHE_DIR=cache,
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0,
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0)


@pytest.fixture(scope="module")
def data(tmp_path_factory, env):
    """The files, a finished old run to copy, and the fresh run of the grown data set."""
    d = tmp_path_factory.mktemp("extend_kill")
    rng = np.random.default_rng(0)
    x, y = images(N_OLD + N_NEW, 8, 8, 2, seed=5), rng.integers(0, 4, N_OLD + N_NEW)
    np.savez(d / "old.npz", x=x[:N_OLD], y=y[:N_OLD])
    np.savez(d / "new.npz", x=x[N_OLD:], y=y[N_OLD:])
    np.savez(d / "all.npz", x=x, y=y)
    np.savez(d / "test.npz", x=images(N_TEST, 8, 8, 2, seed=6), y=rng.integers(0, 4, N_TEST))
    for name, x1 in (("old", "old.npz"), ("all", "all.npz")):
        r = run_cli("compute", config(d, name, x1), "--quiet", env=env)
        assert r.returncode == 0, r.stderr
    return d, read_kernels(d / "run_all" / "kernels.h5")[0]


def _switched(run: Path) -> bool:
    try:
        return "lineage" in json.loads((run / "manifest.json").read_text())
    except (OSError, ValueError):
        return False


def _trigger(kind, arg, run: Path):
    if kind == "delay":
        deadline = time.monotonic() + arg
        return lambda: time.monotonic() >= deadline
    if kind == "switched":  # right after the manifest of the grown run is in place
        return lambda: _switched(run)
    if kind == "tiles":  # once `arg` tiles of the grown run exist beyond the kept ones
        start = {}

        def more():
            if not _switched(run):
                return False
            n = len(tile_names(run))
            start.setdefault("n", n)
            return n >= start["n"] + arg
        return more
    if kind == "assembling":
        return lambda: _switched(run) and not (run / "kernels.h5").exists() and len(
            tile_names(run)) >= 28 + 7  # every training and test tile of the grown plan
    raise ValueError(kind)


PLANS = {
    # during start-up (before the switch), right after the switch, after new tiles
    1: lambda rng: [("delay", rng.uniform(0.3, 1.5)), ("switched", None), ("tiles", 2)],
    2: lambda rng: [("switched", None), ("tiles", rng.randint(1, 4)), ("assembling", None)],
    # a random moment of a continued run (it may land after the end: then it is done)
    3: lambda rng: [("tiles", 1), ("delay", rng.uniform(0.5, 4.0)), ("tiles", 1)],
}


@pytest.mark.slow
@pytest.mark.parametrize("seed", sorted(PLANS))
def test_sigkill_during_extend_then_continue_is_bit_identical(tmp_path, data, env, seed):
    import shutil

    folder, want = data
    rng = random.Random(seed)
    shutil.copytree(folder, tmp_path / "d", ignore=shutil.ignore_patterns("run_all"))
    run = tmp_path / "d" / "run_old"
    extend = ("extend", run, "--append", tmp_path / "d" / "new.npz",
              "--append-labels-key", "y", "--quiet")
    killed = 0
    for attempt, kill in enumerate(PLANS[seed](rng) + [None]):
        assert attempt < MAX_ATTEMPTS
        args = ("resume", run, "--quiet") if _switched(run) and rng.random() < 0.5 else extend
        proc = start_cli(*args, log_dir=tmp_path / "logs", env=env)
        if kill is not None:
            wait_until(_trigger(*kill, run), proc)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                killed += 1
        rc, _out, err = finish(proc)
        assert "Traceback" not in err
        assert rc == 0 if kill is None else rc in (0, -signal.SIGKILL), (rc, err)
        if rc == 0:
            break
        if kill is not None and rc != 0:
            # an old kernels.h5 never passes for the grown result
            r = run_cli("status", run, "--json", env=env)
            assert r.returncode == 0, r.stderr
            report = json.loads(r.stdout)
            if report["finished"]:
                assert report["pairs_total"] == (N_OLD + N_NEW) * (N_OLD + N_NEW + 1) // 2 \
                    + N_TEST * (N_OLD + N_NEW) or not _switched(run)
            print(f"killed at {kill}: switched {_switched(run)}, "
                  f"{len(tile_names(run))} tiles, finished {report['finished']}")
    assert killed >= 1
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], want)
    r = run_cli("verify", run, env=env)
    assert r.returncode == 0, r.stderr
    leftovers = [p.name for p in list(run.iterdir()) + list((run / "tiles").iterdir())
                 if p.name.endswith(".tmp")]
    assert not leftovers


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_extend_saying_how_to_go_on(tmp_path, data, env, sig):
    """Before the switch the old run is unchanged (the same extend starts again); after
    it the grown run is continued by resume. Either way the end is the fresh run."""
    import shutil

    folder, want = data
    shutil.copytree(folder, tmp_path / "d", ignore=shutil.ignore_patterns("run_all"))
    run = tmp_path / "d" / "run_old"
    extend = ("extend", run, "--append", tmp_path / "d" / "new.npz",
              "--append-labels-key", "y", "--quiet")
    proc = start_cli(*extend, log_dir=tmp_path / "logs", env=env)
    # SIGINT during start-up (before the switch), SIGTERM right after the switch
    wait_until(_trigger("delay", 0.8, run) if sig == signal.SIGINT
               else _trigger("switched", None, run), proc)
    proc.send_signal(sig)
    rc, _out, err = finish(proc)
    if rc == 0:
        pytest.skip("the extend finished before the signal")
    assert rc == 128 + sig
    name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
    assert err.strip().splitlines()[-1] in (
        f"Error: interrupted ({name}) before {run} was extended; it is unchanged: run the "
        f"same extend again",
        f"Error: interrupted ({name}); completed tiles are kept: continue with "
        f"`kernelcli resume {run}`")
    r = run_cli(*(extend if "unchanged" in err else ("resume", run, "--quiet")), env=env)
    assert r.returncode == 0, r.stderr
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], want)

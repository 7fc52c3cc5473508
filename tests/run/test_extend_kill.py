"""Kill a real ``kernelcli extend`` with SIGKILL at random moments (before the switch to
the grown run, right after it, mid-way through the new tiles, while assembling);
continuing with ``kernelcli resume`` or the same extend command must give, bit for
bit, the fresh run of the grown data set, and an old ``kernels.h5`` must never pass
for the grown result in between.

A kill or signal that came too late (the extend had already finished: a fast machine)
tests nothing: the test starts over with more rows (``SIZES``), and fails, never
skips, when even the largest gives none mid-run.
"""

from __future__ import annotations

import json
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers_cli import (
    GAP2_NET,
    assert_bit_identical,
    cli_env,
    finish,
    images,
    read_kernels,
    run_cli,
    start_cli,
    tile_names,
    wait_until,
)

N_TEST, BLOCK = 6, 8
MAX_ATTEMPTS = 10


@dataclass(frozen=True)
class Size:
    """The rows of the old run and the rows the extend appends."""

    n_old: int
    n_new: int

    @property
    def grown_tiles(self) -> int:
        """Every training and test tile of the grown plan."""
        rows = -(-(self.n_old + self.n_new) // BLOCK)
        return rows * (rows + 1) // 2 + -(-N_TEST // BLOCK) * rows


# 28 + 7 tiles in the grown run; where every kill came too late, twice the rows (4x
# the pairs), then four times
SIZES = (Size(36, 20), Size(72, 40), Size(144, 80))


def config(folder: Path, name: str, x1: str, keep_tiles: bool = True) -> Path:
    doc = {"name": name, "data": {"x1": x1, "key": "x", "labels_key": "y",
                                  "test": "test.npz", "test_labels_key": "y"},
           "architecture": {"layers": GAP2_NET},
           "kernel": {"test_diagonal": True}, "compute": {"block": BLOCK},
           "output": {"run_dir": f"run_{name}", "keep_tiles": keep_tiles}}
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
    """``data(size)``: the files, a finished old run to copy, and the fresh run of the
    grown data set (made once per size)."""
    made: dict = {}

    def get(size: Size):
        if size not in made:
            made[size] = _make_data(tmp_path_factory.mktemp("extend_kill"), size, env)
        return made[size]
    return get


def _make_data(d: Path, size: Size, env):
    n_old, n_all = size.n_old, size.n_old + size.n_new
    rng = np.random.default_rng(0)
    x, y = images(n_all, 8, 8, 2, seed=5), rng.integers(0, 4, n_all)
    np.savez(d / "old.npz", x=x[:n_old], y=y[:n_old])
    np.savez(d / "new.npz", x=x[n_old:], y=y[n_old:])
    np.savez(d / "all.npz", x=x, y=y)
    np.savez(d / "test.npz", x=images(N_TEST, 8, 8, 2, seed=6), y=rng.integers(0, 4, N_TEST))
    for name, x1, keep in (("old", "old.npz", True), ("all", "all.npz", True),
                           ("old_clean", "old.npz", False)):
        r = run_cli("compute", config(d, name, x1, keep), "--quiet", env=env)
        assert r.returncode == 0, r.stderr
    return d, read_kernels(d / "run_all" / "kernels.h5")[0]


def _switched(run: Path) -> bool:
    try:
        return "lineage" in json.loads((run / "manifest.json").read_text())
    except (OSError, ValueError):
        return False


def _trigger(kind, arg, run: Path, size: Size = SIZES[0]):
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
    if kind == "restoring":  # a run without tiles: some written back, before the switch
        return lambda: not _switched(run) and len(tile_names(run)) >= 1
    if kind == "assembling":
        return lambda: _switched(run) and not (run / "kernels.h5").exists() and len(
            tile_names(run)) >= size.grown_tiles
    raise ValueError(kind)


PLANS = {
    # during start-up (before the switch), right after the switch, after new tiles
    1: lambda rng: [("delay", rng.uniform(0.3, 1.5)), ("switched", None), ("tiles", 2)],
    2: lambda rng: [("switched", None), ("tiles", rng.randint(1, 4)), ("assembling", None)],
    # a random moment of a continued run (it may land after the end: then it is done)
    3: lambda rng: [("tiles", 1), ("delay", rng.uniform(0.5, 4.0)), ("tiles", 1)],
    # a run whose tiles were removed (output.keep_tiles: false): start-up includes
    # writing the kept tiles back from kernels.h5, before the switch
    4: lambda rng: [("restoring", None), ("delay", rng.uniform(0.3, 1.5)), ("switched", None),
                    ("tiles", 2)],
}
CLEANED = 4  # the plan run on the old run without tiles


@pytest.mark.slow
@pytest.mark.parametrize("seed", sorted(PLANS))
def test_sigkill_during_extend_then_continue_is_bit_identical(tmp_path, data, env, seed):
    for size in SIZES:
        folder, want = data(size)
        work = tmp_path / f"d{size.n_old}"
        run, killed = _kill_and_continue(folder, work, size, env, seed)
        if killed:
            break
        print(f"no kill landed growing {size}: again with more rows")
    assert killed >= 1
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], want)
    r = run_cli("verify", run, env=env)
    assert r.returncode == 0, r.stderr
    if seed == CLEANED:  # the grown run removes its tiles as the old one did
        assert r.stdout.startswith(f"{run}: verified: manifest and kernels.h5, every byte "), \
            r.stdout
        assert not tile_names(run)
    else:
        assert r.stdout == (f"{run}: verified: manifest, {size.grown_tiles:,} of "
                            f"{size.grown_tiles:,} tiles and kernels.h5\n"), r.stdout
    tiles = list((run / "tiles").iterdir()) if (run / "tiles").is_dir() else []
    leftovers = [p.name for p in list(run.iterdir()) + tiles if p.name.endswith(".tmp")]
    assert not leftovers


def _kill_and_continue(folder: Path, work: Path, size: Size, env, seed: int):
    """Extend a copy of ``folder``'s old run, killed at the moments of ``PLANS[seed]``
    and continued, to the end. ``(run, number of kills that landed)``."""
    import shutil

    rng = random.Random(seed)
    shutil.copytree(folder, work, ignore=shutil.ignore_patterns("run_all"))
    run = work / ("run_old_clean" if seed == CLEANED else "run_old")
    n_all = size.n_old + size.n_new
    extend = ("extend", run, "--append", work / "new.npz",
              "--append-labels-key", "y", "--quiet")
    killed = 0
    for attempt, kill in enumerate(PLANS[seed](rng) + [None]):
        assert attempt < MAX_ATTEMPTS
        args = ("resume", run, "--quiet") if _switched(run) and rng.random() < 0.5 else extend
        proc = start_cli(*args, log_dir=work.parent / f"logs{size.n_old}", env=env)
        if kill is not None:
            wait_until(_trigger(*kill, run, size), proc)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        rc, _out, err = finish(proc)
        assert "Traceback" not in err
        assert rc == 0 if kill is None else rc in (0, -signal.SIGKILL), (rc, err)
        killed += rc == -signal.SIGKILL  # not one that came as the process finished
        if rc == 0:
            break
        if kill is not None and rc != 0:
            # an old kernels.h5 never passes for the grown result
            r = run_cli("status", run, "--json", env=env)
            assert r.returncode == 0, r.stderr
            report = json.loads(r.stdout)
            if report["finished"]:
                assert report["pairs_total"] == n_all * (n_all + 1) // 2 \
                    + N_TEST * n_all or not _switched(run)
            print(f"killed at {kill}: switched {_switched(run)}, "
                  f"{len(tile_names(run))} tiles, finished {report['finished']}")
    return run, killed


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_extend_saying_how_to_go_on(tmp_path, data, env, sig):
    """Before the switch the old run is unchanged (the same extend starts again); after
    it the grown run is continued by resume. Either way the end is the fresh run.
    Where the extend finished before the signal, again with more rows; never a skip."""
    import shutil

    for size in SIZES:
        folder, want = data(size)
        work = tmp_path / f"d{size.n_old}"
        shutil.copytree(folder, work, ignore=shutil.ignore_patterns("run_all"))
        run = work / "run_old"
        extend = ("extend", run, "--append", work / "new.npz",
                  "--append-labels-key", "y", "--quiet")
        proc = start_cli(*extend, log_dir=tmp_path / f"logs{size.n_old}", env=env)
        # SIGINT during start-up (before the switch), SIGTERM right after the switch
        wait_until(_trigger("delay", 0.8, run) if sig == signal.SIGINT
                   else _trigger("switched", None, run), proc)
        proc.send_signal(sig)
        rc, _out, err = finish(proc)
        if rc != 0:
            break
        print(f"growing {size} finished before the signal: again with more rows")
    else:
        pytest.fail(f"every extend finished before {sig!r}, even growing {SIZES[-1]}")
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

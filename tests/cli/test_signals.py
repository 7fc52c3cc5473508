"""SIGINT and SIGTERM at any moment stop a run cleanly, and are never lost or fatal.

Real ``kernelcli compute`` subprocesses get real signals at seeded random moments: while
starting (imports, configuration, data), while JAX compiles and the per-input pass
runs, between and during tiles, and at the very end. Each must end with exit status
130 (SIGINT) or 143 (SIGTERM), one ``Error:`` line on stderr and no traceback, no
"Exception ignored", no abort; or exit 0 only when the process had already finished
(or was already exiting) when the signal was sent. Completed tiles stay untouched,
and ``kernelcli resume`` then gives exactly the uninterrupted run's kernels.h5.

The console script records signals from its first line (``kernelcli._entry``), and the
CLI's handlers take the recorded one over once the CLI is imported (a second or more on
a loaded machine); a signal in the interpreter's own start-up, before any of
kernelcli's code, gets Python's defaults, so the random moments start once the
handlers are in place (``wait_for_handlers``), and the import window has its own test
(in test_signals_interrupt.py, with Ctrl-C in library use and a signal during the
input check).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers_cli import (
    CONFIGS_DIR,
    assert_bit_identical,
    cli_env,
    finish,
    read_kernels,
    run_cli,
    start_cli,
    stderr_says,
    tile_names,
    wait_until,
)

N = 128         # digits, 8x8x1; block 16: 8 block rows, 36 tiles: a tile phase long enough that
#                 the moments land in it even with every program in the compilation cache
#                 (on the cpu engine: the native engine, auto's choice here, takes half as long)
BLOCK = 16
TILES = (N // BLOCK) * (N // BLOCK + 1) // 2
DIGITS = CONFIGS_DIR / "data" / "digits.npz"
CODE = {signal.SIGINT: 130, signal.SIGTERM: 143}

CONFIG = f"""\
name: signals
data:
  x1: {DIGITS}
  key: x
  limit: {N}
architecture:
  layers:
    - conv: {{filter: [3, 3], padding: SAME, W_std: 1.4142135623730951, b_std: 0.05}}
    - relu
    - conv: {{filter: [3, 3], padding: SAME, W_std: 1.4142135623730951, b_std: 0.05}}
    - relu
    - global_avg_pool
    - dense: {{W_std: 1.0, b_std: 0.0}}
kernel:
  kinds: [nngp, ntk]
  dtype: float32
compute:
  block: {BLOCK}
  engine: cpu
output:
  run_dir: run
  keep_tiles: true
"""


def make_run(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "signals.yaml"
    cfg.write_text(CONFIG)
    return cfg


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run's kernels."""
    cfg = make_run(tmp_path_factory.mktemp("reference"))
    r = run_cli("compute", cfg, "--quiet")
    assert r.returncode == 0, r.stderr
    return read_kernels(cfg.parent / "run" / "kernels.h5")[0]


def _proc_stat(pid: int):
    """``(state, flags)`` of a process from /proc, or ``None`` when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[6])


def handlers_installed(pid: int) -> bool:
    """Whether SIGTERM is caught: by the console script's recorder (its first line) or the
    CLI's handlers; either records a signal, which the CLI then honours."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        return False
    return False


def exiting(proc) -> bool:
    """The process has exited, or is already on its way out (its main thread is a
    zombie while the other threads end, or the kernel tears it down: PF_EXITING)."""
    if proc.poll() is not None:
        return True
    st = _proc_stat(proc.pid)
    return st is None or st[0] in "ZX" or bool(st[1] & 0x4)


def wait_for_handlers(proc, timeout: float = 60) -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux's /proc/PID/status (SigCgt) to see when the CLI's "
                    "signal handlers are in place; a signal before then is Python's")
    end = time.monotonic() + timeout
    while not handlers_installed(proc.pid):
        assert proc.poll() is None, "the CLI ended before installing its handlers"
        assert time.monotonic() < end, "the CLI never installed its SIGINT/SIGTERM handlers"
        time.sleep(0.001)


def moment(kind: str, arg: float, run: Path, t0: float):
    """A predicate that becomes true at the moment to send the signal."""
    if kind == "delay":  # seconds after the start (start-up, compilation, per-input pass)
        return lambda: time.monotonic() >= t0 + arg
    state: dict = {}

    def after(cond):  # `arg` seconds after `cond` first holds
        def pred():
            now = time.monotonic()
            if "at" not in state and cond():
                state["at"] = now + arg
            return now >= state.get("at", float("inf"))
        return pred

    if kind == "manifest":  # the run directory exists: compilation, per-input pass
        return after(lambda: (run / "manifest.json").exists())
    if kind == "tiles":     # mid-tiles
        return after(lambda: len(tile_names(run)) >= 1)
    if kind == "late":      # the last tiles, assembly
        return after(lambda: len(tile_names(run)) >= TILES - 1)
    if kind == "end":       # the result is there: the process is finishing
        return after(lambda: (run / "kernels.h5").exists())
    raise ValueError(kind)


def tile_inodes(run: Path) -> dict:
    return {n: (run / "tiles" / n).stat().st_ino for n in tile_names(run)}


def expected_lines(sig, run: Path) -> list:
    name = sig.name
    return [re.escape(f"Error: interrupted ({name}) before anything was written"),
            re.escape(f"Error: interrupted ({name}); completed tiles are kept: continue "
                      f"with `kernelcli resume {run}`"),
            re.escape(f"Error: interrupted ({name}) after the run finished: ")
            + r".*kernels\.h5 is complete",
            re.escape(f"Error: interrupted ({name}) while exiting, after the command had "
                      f"finished")]


def check_stopped(rc: int, err: str, sig, run: Path, sent: bool, writes: bool = True) -> str:
    """The outcome of one signalled run: 'finished' or the Error line's kind (``writes``:
    the command writes the run; ``estimate`` writes nothing, whatever the kind)."""
    for bad in ("Traceback", "Exception ignored", "terminate called", "Fatal Python"):
        assert bad not in err, f"{bad!r} on stderr after {sig.name}:\n{err}"
    errors = [ln for ln in err.splitlines() if ln.startswith("Error:")]
    if not sent or sent == "at exit":
        assert rc == 0, err
        if sent == "at exit":
            assert not errors and f"wrote {run / 'kernels.h5'}" in err, err
        return "finished"
    assert rc == CODE[sig], f"exit status {rc} after {sig.name}; stderr:\n{err}"
    assert len(errors) == 1, err
    line = errors[0]
    kinds = ["before", "resume", "finished", "exiting"]
    for kind, pattern in zip(kinds, expected_lines(sig, run)):
        if re.fullmatch(pattern, line):
            break
    else:
        raise AssertionError(f"unexpected message after {sig.name}: {line!r}")
    if kind == "before" or not writes:
        assert not (run / "manifest.json").exists(), line
    if not writes:
        assert kind in ("before", "exiting"), line
        return kind
    if kind == "resume":
        assert (run / "manifest.json").exists(), line
        assert not (run / "kernels.h5").exists(), line
    if kind in ("finished", "exiting"):
        assert (run / "kernels.h5").exists(), line
    return kind


def signal_once(cfg: Path, run: Path, sig, when, logs: Path, quiet: bool):
    """Start ``compute`` (or ``resume``), send ``sig`` at ``when``; ``(rc, err, sent)``."""
    args = ("resume", run) if (run / "manifest.json").exists() else ("compute", cfg)
    if quiet:
        args = args + ("--quiet",)
    t0 = time.monotonic()
    proc = start_cli(*args, log_dir=logs, env=cli_env())
    wait_for_handlers(proc)
    pred = moment(*when, run, t0)
    wait_until(pred, proc, timeout=120, poll=0.001)
    sent = not exiting(proc)
    if sent:
        proc.send_signal(sig)
        t = time.monotonic()
        wait_until(lambda: proc.poll() is not None, timeout=0.05, poll=0.0005)
        if proc.poll() == 0 and time.monotonic() - t < 0.05:
            # the signal met the process in its own exit (os._exit after its last line):
            # the kernel drops it there, and the command had finished; check_stopped
            # still asks for that finished run's last line and no Error line
            sent = "at exit"
    rc, _out, err = finish(proc, timeout=120)
    return rc, err, sent


PLANS = {
    # start-up (imports, config, data) or jax's import and compilation; right after the
    # run directory appears (the per-input pass, compiling the pair kernel); mid-tiles;
    # the last tiles and assembly, or the process's end
    signal.SIGINT: lambda rng: [("delay", rng.uniform(0.1, 1.0)),
                                ("manifest", rng.uniform(0.0, 1.0)),
                                ("tiles", rng.uniform(0.0, 0.5)),
                                ("late", rng.uniform(0.0, 0.1))],
    signal.SIGTERM: lambda rng: [("delay", rng.uniform(1.0, 3.0)),
                                 ("manifest", rng.uniform(0.0, 0.3)),
                                 ("tiles", rng.uniform(0.0, 0.8)),
                                 ("end", rng.uniform(0.0, 0.03))],
}


@pytest.fixture(scope="module")
def cache_env(tmp_path_factory):
    """For the resumes (not the signalled runs): a persistent compilation cache keeps
    them quick; results do not depend on it."""
    cache = tmp_path_factory.mktemp("jax_cache")
    return cli_env(JAX_COMPILATION_CACHE_DIR=cache,
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0,
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_signal_at_random_moments_stops_cleanly_and_resume_is_bit_identical(
        tmp_path, reference, cache_env, sig):
    rng = random.Random(f"{sig.name}-{os.environ.get('KERNELCLI_SIGNAL_SEED', '0')}")
    outcomes = []
    for k, when in enumerate(PLANS[sig](rng)):
        cfg = make_run(tmp_path / f"job{k}")
        run = cfg.parent / "run"
        rc, err, sent = signal_once(cfg, run, sig, when, tmp_path / "logs", quiet=k % 2 == 0)
        kind = check_stopped(rc, err, sig, run, sent)
        outcomes.append((when[0], kind))
        if kind == "before":  # nothing to continue: nothing may have been written
            assert not run.exists() or not any(run.iterdir()), sorted(run.rglob("*"))
            continue
        kept = tile_inodes(run)
        if kind == "resume":
            r = run_cli("resume", run, "--quiet", env=cache_env)
            assert r.returncode == 0, r.stderr
        now = tile_inodes(run)
        assert {n: now.get(n) for n in kept} == kept, "a completed tile was rewritten"
        assert len(now) == TILES
        assert_bit_identical(read_kernels(run / "kernels.h5")[0], reference)
        leftovers = [p.name for p in run.rglob("*") if p.name.endswith(".tmp")]
        assert not leftovers, leftovers
    print(outcomes)
    # the moments do reach the run: most signals land while it works
    assert sum(kind in ("before", "resume") for _, kind in outcomes) >= 2, outcomes


# The CLI started by a script that holds the stopping thread at its first safe point
# after the stop was requested, as a long XLA compilation holds it (the main thread
# cannot stop there before the compilation returns), and says so on stderr: the second
# signal then surely comes while the run is stopping, whatever the machine's speed.
_HELD_WHILE_STOPPING = """
import os, sys, time
from kernelcli import _stop
check = _stop.Stop.check
def held(self, *args, **kwargs):
    if self.requested() is not None:
        os.write(2, b"held: stopping\\n")
        time.sleep(600)
    return check(self, *args, **kwargs)
_stop.Stop.check = held
sys.argv = ["kernelcli", *sys.argv[1:]]
from kernelcli._entry import main  # the console script's entry point
sys.exit(main())
"""


@pytest.mark.slow
def test_second_signal_while_stopping_exits_at_once(tmp_path, reference, cache_env):
    """SIGINT while the run computes, then, while it is stopping (held where the stop is
    honoured, as a compilation holds it), SIGTERM: the process ends at once with 143,
    one Error line; tiles are whole, resume works."""
    cfg = make_run(tmp_path / "job")
    run = cfg.parent / "run"
    proc = start_cli("compute", cfg, log_dir=tmp_path / "logs", env=cli_env(),
                     program=[sys.executable, "-c", _HELD_WHILE_STOPPING])
    wait_for_handlers(proc)
    assert wait_until(lambda: (run / "manifest.json").exists(), proc, timeout=120, poll=0.001)
    assert not exiting(proc), "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    assert wait_until(lambda: stderr_says(proc, "held: stopping"), proc, timeout=120), \
        "the run never reached a safe point after SIGINT"
    proc.send_signal(signal.SIGTERM)
    try:  # held for 600 s: only the second signal ends it within a minute
        rc, _out, err = finish(proc, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("SIGTERM while the run was stopping did not end it")
    for bad in ("Traceback", "Exception ignored", "terminate called"):
        assert bad not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("Error:")]
    assert rc == 143, (rc, err)
    assert errors == [f"Error: interrupted (SIGTERM); completed tiles are kept: "
                      f"continue with `kernelcli resume {run}`"], err
    r = run_cli("resume", run, "--quiet", env=cache_env)
    assert r.returncode == 0, r.stderr
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], reference)


@pytest.mark.slow
def test_estimate_time_stops_on_a_signal(tmp_path):
    """``estimate --time`` compiles and times a batch: a signal stops it with 143, before
    it prints anything. The signal goes 0.3 s after the handlers are in place: the
    estimate then still imports jax, compiles and times (seconds on any machine)."""
    cfg = make_run(tmp_path / "job")
    proc = start_cli("estimate", cfg, "--time", log_dir=tmp_path / "logs", env=cli_env())
    wait_for_handlers(proc)
    t0 = time.monotonic()
    wait_until(lambda: time.monotonic() >= t0 + 0.3, proc, timeout=60)
    assert not exiting(proc), "estimate --time ended within 0.3 s of its handlers"
    proc.send_signal(signal.SIGTERM)
    rc, out, err = finish(proc, timeout=120)
    assert check_stopped(rc, err, signal.SIGTERM, cfg.parent / "run", True,
                         writes=False) == "before"
    assert out == ""

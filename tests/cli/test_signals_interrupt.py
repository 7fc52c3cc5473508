"""Interrupts outside a run's signalled tile phase: Ctrl-C in library use (no handler
installed, Interrupted with exit code 130), how ``kernelcli._interrupt`` records a
signal and raises it, a signal while the console script imports the CLI, and a
signal while input values are checked (the command ends at once, not after the check).

The signals at random moments of a run, and the run they share, are in test_signals.py
(whose ``make_run`` and ``wait_for_handlers`` these tests use).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_signals import BLOCK, CONFIG, N, make_run, wait_for_handlers

from helpers_cli import cli_env, finish, start_cli, tile_names, wait_until


def test_keyboard_interrupt_in_library_use_is_an_interrupt_and_no_handler_is_installed(
        tmp_path, keep_process_state):
    """A notebook without the CLI's handlers: Ctrl-C's KeyboardInterrupt (here raised by
    the progress callback) stops ``compute`` with Interrupted, exit code 130, saying how
    to resume; the library leaves the process's signal handlers alone."""
    from kernelcli import _interrupt  # the process's signal state: the CLI's own
    from kernelcli.errors import Interrupted
    from kernelcli.run import compute

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    cfg = make_run(tmp_path / "job")
    (cfg.parent / "signals.yaml").write_text(CONFIG.replace(f"limit: {N}", "limit: 24")
                                             .replace(f"block: {BLOCK}", "block: 8"))

    def progress(p):
        if p.blocks_done >= 1:
            raise KeyboardInterrupt

    _interrupt.reset()
    with pytest.raises(Interrupted) as info:
        compute(cfg, progress=progress)
    run = cfg.parent / "run"
    assert info.value.exit_code == 130
    assert str(info.value) == (f"interrupted (SIGINT); completed tiles are kept: continue "
                               f"with `kernelcli resume {run}`")
    assert 1 <= len(tile_names(run))
    assert {s: signal.getsignal(s) for s in before} == before
    out = compute(cfg)  # continues
    assert out.result is not None


def test_check_raises_interrupted_with_the_signal_exit_code():
    from kernelcli import _interrupt  # how a recorded signal is raised
    from kernelcli.errors import ComputeError, Interrupted

    _interrupt.reset()
    try:
        _interrupt.check()  # nothing recorded: nothing happens
        _interrupt.request(signal.SIGTERM)
        _interrupt.request(signal.SIGINT)  # the first signal counts
        assert _interrupt.requested() == signal.SIGTERM
        with pytest.raises(Interrupted) as info:
            _interrupt.check()
        assert isinstance(info.value, ComputeError)
        assert info.value.exit_code == 143 and info.value.signum == signal.SIGTERM
        assert str(info.value) == "interrupted (SIGTERM) before anything was written"
        with _interrupt.where(Path("/r"), (1, 4)), pytest.raises(Interrupted) as info:
            _interrupt.check()
        assert str(info.value) == ("interrupted (SIGTERM); completed tiles are kept: "
                                   "continue with `kernelcli resume /r --shard 1/4`")
        import pickle

        again = pickle.loads(pickle.dumps(info.value))
        assert (str(again), again.exit_code) == (str(info.value), 143)
    finally:
        _interrupt.reset()
    assert _interrupt.requested() is None
    assert Interrupted("x").exit_code == 130


# A signal while the console script imports the CLI (sent from an import hook, so it
# lands there on any machine): the CLI's handlers take it over.
_SIGNAL_DURING_IMPORT = """
import importlib.abc, os, signal, sys
class SignalOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "kernelcli.cli":
            os.kill(os.getpid(), signal.{sig})
        return None
sys.meta_path.insert(0, SignalOnImport())
sys.argv = ["kernelcli", "--help"]
from kernelcli._entry import main  # the console script's entry point
sys.exit(main())
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_cli_is_imported_ends_it_with_one_line(sig):
    r = subprocess.run([sys.executable, "-c", _SIGNAL_DURING_IMPORT.format(sig=sig.name)],
                       capture_output=True, text=True, timeout=60, env=cli_env())
    assert r.returncode == 128 + sig, r.stderr
    assert r.stderr.splitlines()[-1] == f"Error: interrupted ({sig.name}) before anything was written"
    assert "Traceback" not in r.stderr


def mapped_bytes(pid: int, path: Path) -> int:
    """Bytes of ``path`` resident in process ``pid``'s memory maps (a memory-mapped
    .npy: the rows read so far, less what the kernel has already evicted)."""
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return 0
    total, inside = 0, False
    for line in text.splitlines():
        if "-" in line.split(" ", 1)[0]:  # a mapping's header: "start-end perms ... path"
            inside = line.endswith(" " + str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total


@pytest.mark.slow
@pytest.mark.parametrize("command", ["compute", "estimate"])
def test_a_signal_while_input_values_are_checked_ends_the_command_at_once(tmp_path, command):
    """Every input value is checked before a run plans (finite, within the input bound):
    on 4e8 rows (a 100 GB sparse .npy of zeros, no disk used) that takes minutes, and a
    signal then must end the command within seconds, not after the check."""
    x = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32,
                                  shape=(400_000_000, 8, 8, 1))
    del x
    cfg = tmp_path / "big.yaml"
    cfg.write_text(f"name: big\ndata: {{x1: {tmp_path / 'x.npy'}}}\narchitecture:\n"
                   f"  layers: [flatten, dense, relu, dense]\noutput: {{run_dir: {tmp_path / 'run'}}}\n")
    proc = start_cli(command, cfg, log_dir=tmp_path / "logs", env=cli_env())
    wait_for_handlers(proc)
    # the signal goes once the command has read 128 MiB of the rows: checking them
    assert wait_until(lambda: mapped_bytes(proc.pid, tmp_path / "x.npy") >= 128 * 2**20,
                      proc, timeout=300), "the command never read the input's rows"
    assert proc.poll() is None, "the check ended already: the data is too small"
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    rc, _out, err = finish(proc, timeout=120)
    assert rc == 143, err
    # reading all 100 GB takes minutes (13 s for 2.5 GB on a 2-core CI box): a minute
    # only catches a signal that waited for the check, not a loaded machine
    assert time.monotonic() - sent < 60, "the signal waited for the check to end"
    assert err.strip().splitlines()[-1].startswith("Error: interrupted (SIGTERM)")
    assert "Traceback" not in err

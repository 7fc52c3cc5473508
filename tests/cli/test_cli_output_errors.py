"""A result that cannot be written to stdout is a clean failure, never a traceback and
never exit 0: the real console script with stdout on a full device (/dev/full), with
descriptor 1 closed, and into a pipe whose reader closed it; for every command that
prints results. Each call asserts the exit status, one ``Error:`` line on stderr, no
traceback, and is bounded in time (a hang fails the test)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

import pytest
from test_train_test import write_cfg, write_data

from helpers_cli import FLATTEN_NET, KERNELCLI, cli_env, invoke

pytestmark = pytest.mark.usefixtures("keep_process_state")

# Seconds per call: each takes one to three (JAX's import included) on a loaded machine;
# this bounds a hang, with room for a busy two-core host.
TIMEOUT = 30
PREFIX = "Error: could not write the output to stdout: "
REASONS = {"full": os.strerror(errno.ENOSPC), "closed": "it is closed",
           "pipe": "Broken pipe (its reader closed it)"}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A folder with data (a training and a test set with labels), its configuration
    ``tt.yaml`` and the finished run ``run_tt`` of it (16 + 5 examples, 5 tiles)."""
    folder = tmp_path_factory.mktemp("output_errors")
    write_data(folder, n_train=16, n_test=5, seed=3)
    cfg = write_cfg(folder, layers=FLATTEN_NET, block=8)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 0, result.stderr
    return folder


def command(name, project, tmp_path):
    """The arguments of ``name``, on a run of its own where the command writes one."""
    run = project / "run_tt"
    if name == "predict":  # writes predictions.h5 into the run
        shutil.copytree(run, tmp_path / "run")
        return ["predict", tmp_path / "run", "--ridge", "1e-2", "--json"]
    return {"verify": ["verify", run],
            "status": ["status", run, "--json"],
            "estimate": ["estimate", project / "tt.yaml"],
            "compute": ["compute", project / "tt.yaml", "--run-dir", tmp_path / "new",
                        "--quiet", "--json"]}[name]


def run_with_stdout(args, kind, cwd) -> tuple[int, str, str]:
    """``kernelcli ARGS`` with stdout on /dev/full (``full``), closed (``closed``) or a
    pipe whose reading end is closed before the command writes (``pipe``):
    ``(exit status, stdout, stderr)``."""
    argv = [KERNELCLI, *map(str, args)]
    env = cli_env()
    if kind == "full":
        with open("/dev/full", "w") as full:
            p = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True,
                               cwd=cwd, env=env, timeout=TIMEOUT)
        return p.returncode, "", p.stderr
    if kind == "closed":  # descriptor 1 closed in the child, as `kernelcli ... >&-`
        p = subprocess.run(["bash", "-c", 'exec "$@" >&-', "bash", *argv],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           cwd=cwd, env=env, timeout=TIMEOUT)
        return p.returncode, "", p.stderr
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env=env)
    proc.stdout.close()  # the reader is gone long before Python has started
    try:
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "", err


def assert_one_error_line(rc, err, kind):
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == [PREFIX + REASONS[kind]], err
    assert rc == 1, err


@pytest.mark.parametrize("kind", ["full", "closed", "pipe"])
@pytest.mark.parametrize("name", ["verify", "status", "predict", "estimate", "compute"])
def test_a_result_that_cannot_be_written_is_exit_1_and_one_line(project, tmp_path, name,
                                                                kind):
    rc, _, err = run_with_stdout(command(name, project, tmp_path), kind, tmp_path)
    assert_one_error_line(rc, err, kind)


def test_the_files_of_a_compute_whose_json_was_lost_are_kept(project, tmp_path):
    """The JSON is lost (exit 1), the run it describes is finished and verifies."""
    rc, _, err = run_with_stdout(command("compute", project, tmp_path), "full", tmp_path)
    assert_one_error_line(rc, err, "full")
    assert invoke("verify", tmp_path / "new").exit_code == 0


def test_a_command_that_prints_nothing_on_stdout_succeeds_with_it_closed(project, tmp_path):
    """compute without --json writes nothing to stdout: descriptor 1 closed is no error,
    and no file of the run takes its number (the run verifies)."""
    args = ["compute", project / "tt.yaml", "--run-dir", tmp_path / "new", "--quiet"]
    rc, _, err = run_with_stdout(args, "closed", tmp_path)
    assert (rc, err) == (0, "")
    assert invoke("verify", tmp_path / "new").exit_code == 0


@pytest.mark.parametrize("kind", ["full", "closed", "pipe"])
def test_clicks_own_output_fails_the_same_way(tmp_path, kind):
    rc, _, err = run_with_stdout(["--version"], kind, tmp_path)
    assert_one_error_line(rc, err, kind)


@pytest.mark.parametrize("args", [["status", "run_tt", "--json"], ["verify", "run_tt",
                                                                   "--json"]])
def test_a_reader_that_takes_the_first_bytes_of_json_is_no_error(project, args):
    """`kernelcli ... --json | head -c 10`: the object reached the pipe in one piece,
    so kernelcli exits 0 and says nothing (pipefail gives kernelcli's status)."""
    p = subprocess.run(["bash", "-c", 'set -o pipefail; "$@" | head -c 10', "bash",
                        KERNELCLI, *args], capture_output=True, text=True, cwd=project,
                       env=cli_env(), timeout=TIMEOUT)
    assert (p.returncode, p.stderr) == (0, ""), p.stderr
    assert len(p.stdout) == 10 and p.stdout.startswith("{")

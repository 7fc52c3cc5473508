"""The CLI's conventions (docs/cli.md, "Conventions"): ``--json`` on compute, resume and
assemble prints the typed result's ``to_dict()`` as one JSON object on stdout while the
progress stays on stderr; the first progress line names the platform and device count;
``-v`` (on the group or the command) prints the plan before the first tile; JAX's own
warnings appear only at ``-vv``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from helpers_cli import cli_env, images, invoke, run_cli, write_config

pytestmark = pytest.mark.usefixtures("keep_process_state")
N, BLOCK = 9, 4  # 6 tiles


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    d = tmp_path_factory.mktemp("conventions")
    np.save(d / "x.npy", images(N, seed=5))
    cfg = write_config(d, "conv", compute={"block": BLOCK, "memory": "1GiB"}, run_dir="ref",
                       keep_tiles=True)
    result = invoke("compute", cfg, "--json")
    assert result.exit_code == 0, result.stderr
    return d, cfg, result


def devices_text() -> str:
    import jax

    devices = jax.local_devices()
    n = len(devices)
    return f"on {n} {devices[0].platform} device{'' if n == 1 else 's'}"


def test_compute_json_is_one_object_on_stdout_and_progress_stays_on_stderr(project):
    d, _cfg, result = project
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0]) == {
        "result": str(d / "ref" / "kernels.h5"), "already_finished": False,
        "assembled": True, "blocks_missing": 0, "blocks_total": 6, "repaired": [],
        "tiles_removed": 0, "resumed": False}
    assert "100.0%" in result.stderr
    assert f"wrote {d / 'ref' / 'kernels.h5'}" in result.stderr


def test_the_first_progress_line_names_the_platform_and_device_count(project):
    progress = [ln for ln in project[2].stderr.splitlines() if "pairs " in ln]
    assert progress[0].startswith("conv [")
    assert progress[0].endswith(f"  {devices_text()}")
    assert all(devices_text() not in ln for ln in progress[1:])


def test_resume_and_assemble_json(project, tmp_path):
    d, _cfg, _ = project
    run = tmp_path / "run"
    shutil.copytree(d / "ref", run)
    result = invoke("resume", run, "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"result": str(run / "kernels.h5"),
                                         "already_finished": True}
    (run / "kernels.h5").unlink()
    (run / "tiles" / "r00001c00000.h5").unlink()
    result = invoke("resume", run, "--json", "--quiet")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    out = json.loads(result.stdout)
    assert out["resumed"] is True and out["assembled"] is True
    assert out["result"] == str(run / "kernels.h5")
    (run / "kernels.h5").unlink()
    result = invoke("assemble", run, "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"result": str(run / "kernels.h5"),
                                         "already_finished": False}
    assert result.stderr.strip() == f"wrote {run / 'kernels.h5'}"


def test_a_failing_command_prints_no_json(project, tmp_path):
    d, _cfg, _ = project
    run = tmp_path / "run"
    shutil.copytree(d / "ref", run)
    (run / "kernels.h5").unlink()
    (run / "tiles" / "r00000c00000.h5").unlink()
    result = invoke("assemble", run, "--json")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"Error: cannot assemble {run / 'kernels.h5'}: 1 of 6 "
                                    f"tiles are missing")


@pytest.mark.parametrize("where", ["group", "command"])
def test_verbose_prints_the_devices_the_plan_and_the_engine_before_the_first_tile(
        project, tmp_path, where):
    _d, cfg, _ = project
    args = ["compute", cfg, "--run-dir", tmp_path / "run"]
    result = invoke(*(["-v", *args] if where == "group" else [*args, "-v"]))
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    from kernelcli.kernels import native_unavailable

    engine = "cpu" if native_unavailable() else "native"  # auto's choice for conv + relu here
    assert lines[0] == f"conv: computing {devices_text()} ({engine} engine)"
    assert lines[1] == (f"  plan: {N} x {N}, {N * (N + 1) // 2} pair evaluations in 6 "
                        f"blocks of edge {BLOCK}, " + lines[1].split(f"edge {BLOCK}, ")[1])
    assert lines[1].endswith(" pairs per call")
    assert lines[2].startswith("  memory: peak ")
    assert lines[2].endswith("per device of a budget of 1 GiB from compute.memory of the "
                             "configuration")
    from kernelcli.kernels import describe_native

    why = (f"auto: it has custom calls for this network; {describe_native()}"
           if engine == "native"
           else f"auto: the native engine cannot run here: {native_unavailable()}")
    assert lines[3] == f"  engine: {engine} ({why})"
    assert lines[4].startswith("conv [")


def test_without_verbose_or_with_quiet_no_plan_is_printed(project, tmp_path):
    _d, cfg, _ = project
    plain = invoke("compute", cfg, "--run-dir", tmp_path / "a")
    assert "computing on" not in plain.stderr and "  plan:" not in plain.stderr
    quiet = invoke("-v", "compute", cfg, "--run-dir", tmp_path / "b", "--quiet")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_jax_warnings_are_hidden_unless_vv(project, tmp_path):
    """A real warning of JAX's own (a malformed PJRT plugin list in the environment, read
    when JAX looks for its backends), in a real process."""
    _d, cfg, _ = project
    env = cli_env(PJRT_NAMES_AND_LIBRARY_PATHS="bogus")
    warning = "invalid value bogus in env var PJRT_NAMES_AND_LIBRARY_PATHS"
    # the group's -v and the command's add up
    for group, command, shown in (([], [], False), ([], ["-v"], False),
                                  (["-v"], ["-v"], True)):
        out = run_cli(*group, "estimate", cfg, "--memory", "--json", *command, env=env)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["n1"] == N
        assert (warning in out.stderr) is shown, (group, command, out.stderr)
        if not shown:
            assert out.stderr == ""


def test_the_library_leaves_logging_and_warnings_alone(project, tmp_path):
    """The CLI's silencing is the CLI's: after an in-process call (as a notebook would
    make through CliRunner) the process's settings are as before."""
    import logging
    import os
    import warnings

    _d, cfg, _ = project
    before = (logging.getLogger("jax").level, list(warnings.filters),
              os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
    assert invoke("estimate", cfg, "--memory", "--json").exit_code == 0
    assert (logging.getLogger("jax").level, list(warnings.filters),
            os.environ.get("TF_CPP_MIN_LOG_LEVEL")) == before


def test_the_solver_choice_is_the_libraries_list():
    """``--solver`` spells ``kernelcli.solvers.SOLVERS`` (importing it would load numpy
    before ``--help``): the two stay one list."""
    from kernelcli.cli._commands_analysis import predict  # the command's own option
    from kernelcli.solvers import SOLVERS

    (solver,) = [p for p in predict.params if p.name == "solver"]
    assert tuple(solver.type.choices) == SOLVERS

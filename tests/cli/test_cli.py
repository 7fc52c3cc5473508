"""The command-line contract (docs/cli.md), through click's CliRunner in this process:
help and version, and user mistakes.

Every user mistake exits 2 (1 for failures that are not the user's) with one
``Error: ...`` line on stderr and no traceback, and leaves any existing run
directory exactly as it was. What compute, status and estimate print and write for
a good run is in test_cli_results.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

import kernelcli
from helpers_cli import ROOT, error_line, images, invoke, run_cli, snapshot, write_config
from kernelcli.cli import main
from kernelcli.config import LAYER_NAMES  # pinned by test_config's unknown-layer test

COMMANDS = ("compute", "resume", "estimate", "status")  # docs/cli.md; more may be added
ALL_COMMANDS = tuple(sorted(main.commands))


pytestmark = pytest.mark.usefixtures("keep_process_state")


# --------------------------------------------------------------------------- help, version

@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_command(flag):
    result = invoke(flag)
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.stdout


def test_version_prints_the_package_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"kernelcli, version {kernelcli.__version__}"


@pytest.mark.parametrize("name", ALL_COMMANDS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help_text(name, flag):
    command = main.commands[name]
    assert command.help and len(command.help.split()) >= 5
    result = invoke(name, flag)
    assert result.exit_code == 0
    assert command.help.split("\n")[0].split()[0] in result.stdout
    for param in command.params:
        if param.param_type_name == "option":
            assert param.help, f"{name} {param.opts} has no help text"


def test_the_documented_commands_exist():
    assert set(COMMANDS) <= set(main.commands)


@pytest.mark.parametrize("name", ALL_COMMANDS)
def test_every_command_is_mentioned_in_the_readme(name):
    readme = ROOT / "README.md"
    assert f"kernelcli {name}" in " ".join(readme.read_text().split())


def test_unknown_option_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["compute", str(tmp_path / "c.yaml"), "--bogus"])
    assert result.exit_code == 2
    assert "No such option '--bogus'" in result.stderr
    assert "Traceback" not in result.output


def test_estimate_shows_the_plan_with_or_without_the_memory_flag(tmp_path):
    np.save(tmp_path / "x.npy", images(5, seed=1))
    cfg = write_config(tmp_path, "c")
    plain = CliRunner().invoke(main, ["estimate", str(cfg), "--json"])
    flagged = CliRunner().invoke(main, ["estimate", str(cfg), "--memory", "--json"])
    assert plain.exit_code == flagged.exit_code == 0, plain.stderr
    a, b = json.loads(plain.stdout), json.loads(flagged.stdout)
    assert a["blocks_total"] == b["blocks_total"] and "peak_bytes_per_device" in a


# --------------------------------------------------------------------------- user errors

LAYERS_TEXT = """architecture:
  layers:
    - conv: {filter: [3, 3]}
    - relu
    - flatten
    - dense
"""


def _setup_data(d: Path):
    x = images(10, seed=7)
    np.save(d / "x.npy", x)
    np.savez(d / "x.npz", x=x)
    with h5py.File(d / "x.h5", "w") as f:
        f.create_dataset("images", data=x)
    bad = x.copy()
    bad[3, 1, 2, 0] = np.nan
    np.save(d / "nan.npy", bad)
    inf = x.copy()
    inf[6, 0, 0, 1] = np.inf
    np.save(d / "inf.npy", inf)
    np.save(d / "rank6.npy", x.reshape(10, 2, 3, 2, 3, 2)[..., :1])  # 4 spatial axes
    np.save(d / "small.npy", images(4, 5, 5, 2, seed=8))


def _write(d: Path, name: str, text: str) -> Path:
    p = d / f"{name}.yaml"
    p.write_text(text)
    return p


# Each case: (name, config text or None for "no file", expected exit, expected message;
# {d} is the folder, {cfg} the config file's path.)
CONFIG_ERRORS = [
    ("missing_config_file", None, 2, "Error: {cfg}: no such configuration file"),
    ("bad_yaml", "data: {x1: x.npy\narchitecture: [\n", 2,
     "Error: bad_yaml.yaml: not valid YAML (line 2, column 13): expected ',' or '}', "
     "but got ':'"),
    ("unknown_layer", "data: {x1: x.npy}\narchitecture:\n  layers: [conv, relu, flaten, dense]\n",
     2, "Error: unknown_layer.yaml: architecture.layers[2]: unknown layer 'flaten'; expected one "
        f"of {', '.join(LAYER_NAMES)}; did you mean 'flatten'?"),
    ("missing_data_file", "data: {x1: nope.npy}\n" + LAYERS_TEXT, 2,
     "Error: data.x1: {d}/nope.npy does not exist; give the path to a .npy, .npz, .h5, .hdf5 "
     "file"),
    ("wrong_npz_key", "data: {x1: x.npz, key: y}\n" + LAYERS_TEXT, 2,
     "Error: data.key: 'y' not found in {d}/x.npz; keys present: x"),
    ("wrong_h5_key", "data: {x1: x.h5, key: x}\n" + LAYERS_TEXT, 2,
     "Error: data.key: 'x' not found in {d}/x.h5; keys present: images"),
    ("wrong_rank", "data: {x1: rank6.npy}\n" + LAYERS_TEXT, 2,
     "Error: data.x1: {d}/rank6.npy holds an array of shape (10, 2, 3, 2, 3, 1) (rank 6); "
     "accepted: rank 2 rows (N, D), rank 3 sequences (N, L, C), rank 4 images (N, H, W, C) "
     "or rank 5 volumes (N, D, H, W, C)"),
    ("nan_in_data", "data: {x1: nan.npy}\n" + LAYERS_TEXT, 2,
     "Error: data.x1: row 3 of {d}/nan.npy contains NaN; every value must be finite"),
    ("inf_in_data", "data: {x1: inf.npy}\n" + LAYERS_TEXT, 2,
     "Error: data.x1: row 6 of {d}/inf.npy contains Inf; every value must be finite"),
    ("x1_x2_mismatch", "data: {x1: x.npy, x2: small.npy}\n" + LAYERS_TEXT, 2,
     "Error: data.x2: examples of {d}/small.npy have shape (5, 5, 2), but those of data.x1 "
     "({d}/x.npy) have shape (6, 6, 2); both sets must have the same example shape"),
]


@pytest.fixture
def data_dir(tmp_path):
    _setup_data(tmp_path)
    return tmp_path


@pytest.mark.parametrize("command", ["compute", "estimate"])
@pytest.mark.parametrize("name,text,code,message", CONFIG_ERRORS,
                         ids=[c[0] for c in CONFIG_ERRORS])
def test_user_mistake_gives_one_error_line_and_writes_nothing(data_dir, command, name, text,
                                                              code, message):
    d = data_dir
    cfg = d / f"{name}.yaml"
    if text is not None:
        cfg.write_text(text)
    before = snapshot(d)
    args = ["compute", cfg, "--quiet"] if command == "compute" else ["estimate", cfg,
                                                                     "--memory", "--json"]
    result = invoke(*args)
    assert result.exit_code == code
    assert error_line(result) == message.replace("{d}", str(d)).replace("{cfg}", str(cfg))
    assert snapshot(d) == before, "a failed command must not write anything"


def test_budget_too_small_says_the_smallest_budget(data_dir):
    d = data_dir
    cfg = _write(d, "tiny", "data: {x1: x.npy}\n" + LAYERS_TEXT
                 + "compute: {memory: 1KiB}\noutput: {run_dir: run}\n")
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2
    line = error_line(result)
    assert line.startswith("Error: the memory budget (`compute.memory`) of 1 KiB cannot hold "
                           "one pair evaluation, which needs ")
    assert "; the smallest budget that works is " in line
    assert line.endswith(" bytes)")
    assert not (d / "run").exists()


def test_run_dir_under_a_regular_file_is_refused(data_dir):
    """Where no directory can be made (a file is in the way; fails for root too)."""
    d = data_dir
    cfg = _write(d, "blocked", "data: {x1: x.npy}\n" + LAYERS_TEXT
                 + "output: {run_dir: x.npy/run}\n")
    before = snapshot(d)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2
    line = error_line(result)
    assert line.startswith("Error: ")
    assert f"{d}/x.npy/run" in line
    assert snapshot(d) == before


def test_run_dir_in_a_read_only_folder_is_refused(data_dir):
    if os.geteuid() == 0:
        pytest.skip("root ignores folder permissions; see the regular-file case")
    d = data_dir
    locked = d / "locked"
    locked.mkdir()
    cfg = _write(d, "ro", "data: {x1: x.npy}\n" + LAYERS_TEXT
                 + "output: {run_dir: locked/run}\n")
    locked.chmod(0o500)
    try:
        result = invoke("compute", cfg, "--quiet")
    finally:
        locked.chmod(0o700)
    assert result.exit_code == 2
    line = error_line(result)
    assert f"{locked}/run" in line and "permission denied" in line
    assert not (locked / "run").exists()


def test_run_package_leaves_jax_unimported_until_host_devices_are_configured():
    """``configure_host_devices`` sets XLA_FLAGS, which jax reads once, when imported:
    importing the run package (as the CLI does first) must not import jax."""
    code = ("import sys, kernelcli.run, kernelcli.cli; "
            "print(sorted({'jax'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_library_error_names_the_argument_and_the_cli_names_the_flag(tmp_path):
    from kernelcli.errors import UsageError
    from kernelcli.run import compute

    np.save(tmp_path / "x.npy", images(5))
    cfg = write_config(tmp_path, "a")
    with pytest.raises(UsageError) as info:
        compute(cfg, executor="spark")
    assert str(info.value) == "executor=: 'spark' is not an executor; expected one of local, ray"
    result = invoke("compute", cfg, "--executor", "spark")
    assert result.exit_code == 2
    assert error_line(result) == ("Error: --executor: 'spark' is not an executor; expected one "
                                  "of local, ray")
    assert not (tmp_path / "runs").exists()


def test_paths_inside_the_working_folder_are_printed_relative(tmp_path):
    """As the README shows them: `wrote runs/x/kernels.h5`, not the absolute path."""
    np.save(tmp_path / "x.npy", images(4, seed=2))
    write_config(tmp_path, "c", run_dir="runs/c", keep_tiles=True)
    r = run_cli("compute", "c.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "wrote runs/c/kernels.h5"
    # the wait after the last pair is said, not silent
    assert r.stderr.strip().splitlines()[-2].endswith(": verifying the 1 tile and writing "
                                                      "kernels.h5")
    r = run_cli("status", "runs/c", cwd=tmp_path)
    assert r.stdout.strip().splitlines()[-1] == "result: runs/c/kernels.h5"

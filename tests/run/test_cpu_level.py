"""The CPU level a run computes at (``engine.cpu_level``: XLA's instruction set and
OpenBLAS's kernels): chosen and pinned before jax and numpy load, recorded, kept by a
continued run, refused where another level would compute; and a run continued in a
process restricted as another CPU would be (its ``/proc/cpuinfo`` replaced in a mount
namespace of its own, so kernelcli's loader and levels see that CPU's features) gives
the uninterrupted run's bits, or a refusal naming both levels.

The network is the golden-bits test's ``valid`` one, whose last bits differ between
AVX-512's and AVX2's code (``bench/cpu_bits.py``): mixed tiles would show."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from helpers_cli import edit_manifest, error_line, invoke
from kernelcli.errors import ConfigError
from kernelcli.kernels import _cpu_level  # the levels and their pinning are what is tested

pytestmark = pytest.mark.usefixtures("keep_process_state")  # the CLI runs in-process too

KERNELCLI = shutil.which("kernelcli", path=os.path.dirname(sys.executable)) or os.path.join(
    os.path.dirname(sys.executable), "kernelcli")
RUNNABLE = _cpu_level.runnable()
AVX512_LACKS = r"avx512\w*"


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "OPENBLAS_CORETYPE", "KERNELCLI_CPU_LEVEL")}
    env.update(extra)
    return env


def test_a_level_this_cpu_does_not_run_is_refused_naming_what_it_runs():
    with pytest.raises(ConfigError) as exc:
        _cpu_level.chosen({"KERNELCLI_CPU_LEVEL": "x86-64-v9"})
    accepted = ", ".join(RUNNABLE) or "none on this"
    assert str(exc.value).startswith(f"KERNELCLI_CPU_LEVEL: 'x86-64-v9' is not a level this "
                                     f"CPU runs; accepted: {accepted}")


def test_the_cli_refuses_a_bad_level_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    cfg = _case(tmp_path)
    monkeypatch.setenv("KERNELCLI_CPU_LEVEL", "fast")
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2
    assert error_line(result).startswith("Error: KERNELCLI_CPU_LEVEL: 'fast' is not a level "
                                         "this CPU runs; accepted: ")
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not RUNNABLE, reason="no pinned levels off x86")
def test_a_fresh_process_is_pinned_before_jax_and_numpy_load_and_says_so():
    code = ("import os\nfrom kernelcli.kernels import _cpu_level as c\n"
            "c.pin('x86-64-v2')\nprint(os.environ['XLA_FLAGS'])\n"
            "print(os.environ['OPENBLAS_CORETYPE'])\nprint(c.in_force())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=_env(XLA_FLAGS="--xla_force_host_platform_device_"
                                                        "count=2")).stdout.split("\n")
    assert out[:3] == ["--xla_force_host_platform_device_count=2 --xla_cpu_max_isa=SSE4_2",
                       "Nehalem", "x86-64-v2"]


@pytest.mark.skipif(not RUNNABLE, reason="no pinned levels off x86")
def test_a_users_own_instruction_set_is_kept_and_recorded_as_it_is():
    code = ("from kernelcli.kernels import _cpu_level as c\nc.pin()\nprint(c.in_force())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=_env(XLA_FLAGS="--xla_cpu_max_isa=AVX")).stdout
    assert out.strip() == f"XLA AVX, OpenBLAS {_cpu_level.LEVELS[RUNNABLE[0]].blas_core}"


@pytest.mark.skipif("x86-64-v3" not in RUNNABLE, reason="the CPU does not run x86-64-v3")
def test_a_process_whose_own_settings_change_the_level_is_told_which_to_unset():
    code = ("from kernelcli.kernels import _cpu_level as c\n"
            "c.pin('x86-64-v3')\nprint(c.problem('x86-64-v3'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=_env(XLA_FLAGS="--xla_cpu_max_isa=AVX")).stdout
    core = _cpu_level.LEVELS["x86-64-v3"].blas_core
    assert out.strip() == (
        f"its tiles were computed at CPU level x86-64-v3 (as its manifest.json records) and "
        f"this process computes at XLA AVX, OpenBLAS {core}, whose last bits differ; this "
        f"CPU runs x86-64-v3: unset this process's own --xla_cpu_max_isa (XLA_FLAGS) and "
        f"OPENBLAS_CORETYPE, or run it in a process that has not started jax first")


def test_a_run_from_before_levels_were_recorded_is_refused_unless_the_user_says():
    have = _cpu_level.in_force()
    why = _cpu_level.problem(None)
    best = f"KERNELCLI_CPU_LEVEL={RUNNABLE[0]} set; else " if RUNNABLE else ""
    assert why == ("its tiles were computed before runs recorded the CPU level that decides "
                   f"their last bits (this process computes at {have}); if it was started "
                   f"on a CPU whose best level is this one's, continue it with {best}"
                   "continue it with the kernelcli that started it")
    assert _cpu_level.problem(have) is None


# --- continuing on another CPU, in real processes ------------------------------------

def _case(folder: Path) -> Path:
    """The golden-bits test's ``valid`` network on 13 images of 6 x 6 x 2, blocks of 5
    (odd sizes: XLA's AVX-512 and AVX2 loops then part ways in their remainders)."""
    folder.mkdir(parents=True, exist_ok=True)
    x = np.random.default_rng(7).standard_normal((13, 6, 6, 2)).astype(np.float32)
    np.save(folder / "x.npy", x)
    doc = {"name": "c", "data": {"x1": "x.npy"},
           "architecture": {"layers": [
               {"conv": {"filter": [3, 3], "padding": "VALID", "W_std": 1.7, "b_std": 0.1}},
               "relu", "global_avg_pool", {"dense": {"W_std": 1.2, "b_std": 0.3}}]},
           "kernel": {"dtype": "float64"}, "compute": {"block": 5},
           "output": {"run_dir": "run"}}
    path = folder / "c.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _cli(*args, env, restrict: bool = False) -> subprocess.CompletedProcess:
    """``kernelcli ARGS``; ``restrict``: in a process that sees this CPU without its
    AVX-512 features, as an AVX2 machine is (``unshare -m``, a bind-mounted
    ``/proc/cpuinfo``)."""
    cmd = [KERNELCLI, *map(str, args)]
    if restrict:
        text = Path("/proc/cpuinfo").read_text()
        fake = Path(env["FAKE_CPUINFO_DIR"]) / "cpuinfo"
        fake.write_text(re.sub(r"(?m)^(flags\s*:.*)$", lambda m: re.sub(
            rf"\s(?:{AVX512_LACKS})(?=\s|$)", "", m.group(1)), text))
        cmd = ["unshare", "-m", "sh", "-c",
               f'mount --bind {fake} /proc/cpuinfo && exec "$@"', "sh", *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def _kernels(run_dir: Path) -> dict:
    with h5py.File(run_dir / "kernels.h5", "r") as f:
        return {k: f[k][...] for k in ("nngp", "ntk")}


def _restriction_works(tmp_path) -> bool:
    probe = _cli("--version", env=_env(FAKE_CPUINFO_DIR=str(tmp_path)), restrict=True)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif("x86-64-v3" not in RUNNABLE, reason="the CPU does not run x86-64-v3")
def test_a_run_at_v3_continued_by_an_avx2_machine_gives_the_uninterrupted_bits(tmp_path):
    """Shard 0 here, shard 1 in a process that sees an AVX2-only CPU: the assembled
    kernels are bit for bit a single process's at x86-64-v3, and (on an AVX-512 CPU,
    where v4's code differs for this network) not v4's: mixed levels would show."""
    if not _restriction_works(tmp_path):
        pytest.skip("unshare -m with a bind mount is not permitted here (needs root)")
    env = _env(KERNELCLI_CPU_LEVEL="x86-64-v3", FAKE_CPUINFO_DIR=str(tmp_path))
    whole = _cli("compute", _case(tmp_path / "whole"), "--quiet", env=env)
    assert whole.returncode == 0, whole.stderr
    cfg = _case(tmp_path / "sharded")
    first = _cli("compute", cfg, "--shard", "0/2", "--quiet", env=env)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "sharded" / "run"
    level = json.loads((run_dir / "manifest.json").read_text())["engine"]["cpu_level"]
    assert level == "x86-64-v3"
    second = _cli("compute", cfg, "--shard", "1/2", "--quiet",
                  env=_env(FAKE_CPUINFO_DIR=str(tmp_path)), restrict=True)  # its own best
    assert second.returncode == 0, second.stderr
    want, got = _kernels(tmp_path / "whole" / "run"), _kernels(run_dir)
    for kind in want:
        assert np.array_equal(want[kind], got[kind]), kind
    if "x86-64-v4" in RUNNABLE:  # the test's power: v4's code gives other bits here
        v4 = _cli("compute", _case(tmp_path / "v4"), "--quiet",
                  env=_env(KERNELCLI_CPU_LEVEL="x86-64-v4"))
        assert v4.returncode == 0, v4.stderr
        other = _kernels(tmp_path / "v4" / "run")
        assert any(not np.array_equal(want[k], other[k]) for k in want)


@pytest.mark.slow
@pytest.mark.skipif("x86-64-v4" not in RUNNABLE, reason="needs an AVX-512 CPU")
def test_a_run_at_v4_is_refused_by_an_avx2_machine_naming_both_levels(tmp_path):
    if not _restriction_works(tmp_path):
        pytest.skip("unshare -m with a bind mount is not permitted here (needs root)")
    cfg = _case(tmp_path)
    first = _cli("compute", cfg, "--shard", "0/2", "--quiet", env=_env())  # this CPU's best
    assert first.returncode == 0, first.stderr
    second = _cli("compute", cfg, "--shard", "1/2", "--quiet",
                  env=_env(FAKE_CPUINFO_DIR=str(tmp_path)), restrict=True)
    assert second.returncode == 2
    run_dir = tmp_path / "run"
    assert second.stderr.strip().splitlines()[-1] == (
        f"Error: {run_dir}: its tiles were computed at CPU level x86-64-v4 (as its "
        f"manifest.json records) and this process computes at x86-64-v3, whose last bits "
        f"differ; continue it on a CPU that runs x86-64-v4 (this CPU runs x86-64-v3, "
        f"x86-64-v2)")
    assert not (run_dir / "kernels.h5").exists()


def test_a_damaged_level_in_the_manifest_is_refused_naming_the_key(tmp_path):
    cfg = _case(tmp_path)
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    run_dir = tmp_path / "run"
    edit_manifest(run_dir, lambda m: m["engine"].update(cpu_level=["x"]), rechecksum=True)
    result = invoke("status", run_dir)
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: {run_dir / 'manifest.json'}: engine.cpu_level is [\"x\"]; expected a CPU "
        f"level (such as x86-64-v3: up to 120 printable characters)")

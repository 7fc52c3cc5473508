"""The OpenBLAS core chosen before numpy loads (kernelcli._blas): Haswell on AVX-512
CPUs, unless the user chose one or numpy is loaded already (real cpuinfo files)."""

from __future__ import annotations

import subprocess
import sys

# the console script's choice of OpenBLAS core, made before numpy loads
from kernelcli._blas import SAFE_CORE, avx512, choose_blas_core


def cpuinfo(tmp_path, flags: str):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: x\nflags\t\t: fpu sse2 {flags}\n")
    return path


def test_avx512_reads_the_flags_line(tmp_path):
    assert avx512(cpuinfo(tmp_path, "avx2 avx512f avx512dq"))
    assert not avx512(cpuinfo(tmp_path, "avx2 avx512_vnni"))  # avx512f itself is needed
    assert not avx512(tmp_path / "absent")


def test_the_user_choice_and_an_imported_numpy_win(tmp_path):
    info = cpuinfo(tmp_path, "avx512f")
    env = {"OPENBLAS_CORETYPE": "SkylakeX"}
    assert choose_blas_core(env, info) is None and env["OPENBLAS_CORETYPE"] == "SkylakeX"
    env = {}
    assert "numpy" in sys.modules  # pytest's run has it: nothing is set any more
    assert choose_blas_core(env, info) is None and env == {}


def test_a_fresh_process_on_avx512_gets_haswell(tmp_path):
    info = cpuinfo(tmp_path, "avx512f")
    (tmp_path / "b").mkdir()
    code = ("import os\nfrom kernelcli._blas import choose_blas_core\nfrom pathlib import Path\n"
            f"env = {{}}\nprint(choose_blas_core(env, Path({str(info)!r})), env)\n"
            f"print(choose_blas_core({{}}, Path({str(cpuinfo(tmp_path / 'b', 'avx2'))!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[0] == f"{SAFE_CORE} {{'OPENBLAS_CORETYPE': '{SAFE_CORE}'}}" and out[1] == "None"

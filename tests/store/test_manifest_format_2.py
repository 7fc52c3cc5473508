"""Run directories of format 2, whose manifest records the engine in its plan
(``plan.engine``, ``plan.native``: the native engine's revision, ``plan.native_library``)
as kernelcli wrote them before the engine had a section of its own, keep working:
``status`` reports their engine, ``resume`` computes with it to the bits of a run of
today's format, ``verify`` and ``assemble`` accept the result, and ``extend`` grows the
run (into one of today's format, with the same engine) to the bits of a fresh run of
the grown data.

The old run is today's run with its manifest written the old way (checksum renewed).
That changes the run's identity, which its tiles and result carry, so the old run
directory holds its manifest alone: a run stopped before its first tile."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers_cli import (
    assert_bit_identical,
    edit_manifest,
    error_line,
    images,
    invoke,
    manifest_of_format_2,
    read_kernels,
    write_config,
)
from kernelcli.kernels import native_unavailable

pytestmark = pytest.mark.usefixtures("keep_process_state")
N, MORE, BLOCK = 16, 4, 8  # 3 tiles of a symmetric run; 6 once grown by 4 rows

ENGINES = ["cpu", pytest.param("native", marks=pytest.mark.skipif(
    native_unavailable() is not None, reason=f"no native engine here: {native_unavailable()}"))]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The data (``x.npy``, the rows an extend appends, ``more.npy``, and the two
    together, ``all.npy``) and, per engine, a run of today's format of ``x`` and a
    fresh run of ``all`` (both made once, when first asked for)."""
    d = tmp_path_factory.mktemp("format2")
    x, more = images(N, seed=5), images(MORE, seed=6)
    np.save(d / "x.npy", x)
    np.save(d / "more.npy", more)
    np.save(d / "all.npy", np.concatenate([x, more]))
    made: dict = {}

    def run(engine: str, data: str) -> tuple:
        if (engine, data) not in made:
            name = f"{data}_{engine}"
            cfg = write_config(d, name, x1=f"{data}.npy", run_dir=f"run_{name}",
                               compute={"block": BLOCK, "engine": engine}, keep_tiles=True)
            assert invoke("compute", cfg, "--quiet").exit_code == 0
            made[engine, data] = cfg, d / f"run_{name}"
        return made[engine, data]

    return d, run


def manifest(run) -> dict:
    return json.loads((run / "manifest.json").read_text())


@pytest.mark.parametrize("engine", ENGINES)
def test_a_run_directory_of_format_2_resumes_verifies_assembles_and_extends(project,
                                                                          tmp_path, engine,
                                                                          monkeypatch):
    d, made = project
    _, ref = made(engine, "x")
    recorded = manifest(ref)["engine"]
    assert recorded["name"] == engine
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_bytes((ref / "manifest.json").read_bytes())
    edit_manifest(run, manifest_of_format_2, rechecksum=True)
    old = manifest(run)
    assert old["format"] == 2 and "engine" not in old and old["plan"]["engine"] == engine
    assert ("native" in old["plan"]) == (engine == "native")  # revision 3: written

    status = invoke("status", run, "--json")
    assert status.exit_code == 0, status.stderr
    got = json.loads(status.stdout)
    assert (got["finished"], got["blocks_done"], got["blocks_total"]) == (False, 0, 3)
    want = json.loads(invoke("status", ref, "--json").stdout)
    engine_keys = ("engine", "native_revision", "native_library")
    assert {k: got[k] for k in engine_keys} == {k: want[k] for k in engine_keys}
    assert got["engine"] == engine
    text = invoke("status", run)
    assert f"engine: {engine} (recorded in its manifest.json" in text.stdout

    # recorded before runs recorded their CPU level: resumed on the user's word alone
    refused = invoke("resume", run, "--quiet")
    assert refused.exit_code == 2
    assert "before runs recorded the CPU level" in error_line(refused)
    monkeypatch.setenv("KERNELCLI_CPU_LEVEL", recorded["cpu_level"])
    assert invoke("resume", run, "--quiet").exit_code == 0
    reference = read_kernels(ref / "kernels.h5")[0]
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], reference)
    assert manifest(run) == old  # the run is the one it was: its manifest unchanged
    assert invoke("verify", run).exit_code == 0
    (run / "kernels.h5").unlink()
    assembled = invoke("assemble", run)
    assert assembled.exit_code == 0, assembled.stderr
    assert_bit_identical(read_kernels(run / "kernels.h5")[0], reference)

    grown = invoke("extend", run, "--append", d / "more.npy", "--quiet")
    assert grown.exit_code == 0, grown.stderr
    new = manifest(run)
    assert new["format"] == 3 and new["engine"] == recorded
    assert not {"engine", "native", "native_library"} & set(new["plan"])
    _, fresh = made(engine, "all")
    assert_bit_identical(read_kernels(run / "kernels.h5")[0],
                         read_kernels(fresh / "kernels.h5")[0])
    assert invoke("verify", run).exit_code == 0

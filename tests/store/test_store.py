"""The contract of RunStore, on real files: tiles, progress, crashes, assembly, overwrite."""

import hashlib
import json
import os
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

from helpers_cli import small_filesystem
from kernelcli.errors import ComputeError, RunDirError
from kernelcli.plan import Block, make_plan
from kernelcli.store import RunStore

ATTRS = {"config": "name: t\n", "kernelcli_version": "0.1.0", "data_fingerprint": "abc",
         "name": "t", "plan": {"block": 8}}


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path / "run").create({"name": "t", "n": 3})


def grid(n1, n2, block):
    return make_plan(n1, n2, symmetric=n1 == n2, bytes_per_pair=8, fixed_bytes=0,
                     budget_bytes=10**6, kinds=("nngp", "ntk"), itemsize=8, block=block)


def reference(n1, n2, seed=0):
    """A kernel pair computed directly over the whole data set."""
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=(n1, 5))
    x2 = x1 if n1 == n2 else rng.normal(size=(n2, 5))
    nngp = x1 @ x2.T
    return {"nngp": nngp, "ntk": nngp**2 + 1.0}


def write_plan_tiles(store, plan, ref):
    """Write each block's tile as the executor does: one value per local pair."""
    for b in plan.blocks:
        i, j = b.local_pairs()
        store.write_tile(b, {k: v[b.r0 + i, b.c0 + j] for k, v in ref.items()})


def tmp_files(store):
    return [p.name for d in (store.run_dir, store.tiles_dir) for p in d.iterdir()
            if p.name.endswith(".tmp")]


def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_tile_round_trip_keeps_values_shape_and_dtype(store):
    block = Block(1, 2, 8, 16, 16, 21)
    arrays = {"nngp": np.arange(40.0).reshape(8, 5), "ntk": np.ones((8, 5), np.float32)}
    store.write_tile(block, arrays)
    back = store.read_tile(block)
    assert set(back) == {"nngp", "ntk"}
    for kind, array in arrays.items():
        np.testing.assert_array_equal(back[kind], array)
        assert back[kind].dtype == array.dtype


def test_pair_values_are_placed_by_local_pairs(store):
    block = Block(0, 1, 0, 2, 3, 6)
    store.write_tile(block, {"nngp": np.arange(6.0)})
    np.testing.assert_array_equal(store.read_tile(block)["nngp"], [[0, 1, 2], [3, 4, 5]])


def test_diagonal_tile_is_exactly_symmetric_from_its_lower_triangle(store):
    block = Block(0, 0, 0, 4, 0, 4, diagonal=True)
    values = np.random.default_rng(1).normal(size=(4, 4))  # upper triangle is noise
    store.write_tile(block, {"nngp": values})
    tile = store.read_tile(block)["nngp"]
    assert np.array_equal(tile, tile.T)
    np.testing.assert_array_equal(np.tril(tile), np.tril(values))


def test_a_tile_under_its_final_name_is_the_progress_record(store):
    blocks = grid(20, 20, 8).blocks
    assert store.done_keys() == set() and not store.has(blocks[0].key)
    store.write_tile(blocks[0], {"nngp": np.zeros(blocks[0].n_pairs)})
    assert store.done_keys() == {blocks[0].key}
    assert store.has(blocks[0].key) and store.has(blocks[0]) and not store.has(blocks[1].key)
    assert RunStore.open(store.run_dir).done_keys() == {blocks[0].key}
    assert tmp_files(store) == []


def test_leftover_tmp_files_are_ignored_and_removed_on_open_unless_their_writer_lives(store):
    pid = dead_pid()
    (store.tiles_dir / f".r00000c00000.h5.{pid}.tmp").write_bytes(b"half a tile")
    (store.run_dir / f".kernels.h5.{pid}.tmp").write_bytes(b"half a result")
    live = store.tiles_dir / f".r00001c00000.h5.{os.getpid()}.tmp"
    live.write_bytes(b"being written right now")
    assert store.done_keys() == set() and not store.finished
    RunStore.open(store.run_dir)
    assert tmp_files(store) == [live.name]


def test_assembled_symmetric_result_equals_the_direct_matrix_and_is_exactly_symmetric(store):
    plan, ref = grid(37, 37, 8), reference(37, 37)
    write_plan_tiles(store, plan, ref)
    path = store.assemble(plan.blocks, 37, 37, ("nngp", "ntk"), "float64", True, ATTRS)
    assert path == store.result_path and store.finished
    with h5py.File(path, "r") as f:
        for kind in ("nngp", "ntk"):
            k = f[kind][...]
            assert k.shape == (37, 37) and k.dtype == np.float64
            assert np.array_equal(k, k.T)
            np.testing.assert_array_equal(np.tril(k), np.tril(ref[kind]))
            np.testing.assert_allclose(k, ref[kind], rtol=1e-12)
        assert {name: f.attrs[name] for name in ("config", "kernelcli_version", "name")} == {
            "config": "name: t\n", "kernelcli_version": "0.1.0", "name": "t"}
        assert f.attrs["data_fingerprint"] == "abc"
        assert json.loads(f.attrs["plan"]) == {"block": 8}
    assert tmp_files(store) == []


def test_assembled_rectangular_result_equals_the_direct_matrix_in_the_configured_dtype(store):
    plan, ref = grid(19, 30, 8), reference(19, 30)
    write_plan_tiles(store, plan, ref)
    store.assemble(plan.blocks, 19, 30, ("ntk",), "float32", False, ATTRS)
    with h5py.File(store.result_path, "r") as f:
        assert list(f) == ["ntk"]
        assert f["ntk"].dtype == np.float32
        np.testing.assert_array_equal(f["ntk"][...], ref["ntk"].astype(np.float32))


def test_assembly_with_a_missing_tile_says_to_resume_and_writes_nothing(store):
    plan, ref = grid(20, 20, 8), reference(20, 20)
    write_plan_tiles(store, plan, ref)
    (store.tiles_dir / f"{plan.blocks[-1].key}.h5").unlink()
    with pytest.raises(ComputeError, match=rf"1 of 6 blocks .*{plan.blocks[-1].key}.*resume"):
        store.assemble(plan.blocks, 20, 20, ("nngp",), "float64", True, ATTRS)
    assert not store.finished


def test_manifest_is_written_once_as_sorted_json(store):
    text = (store.run_dir / "manifest.json").read_text()
    body = json.dumps({"n": 3, "name": "t"}, sort_keys=True, indent=2) + "\n"
    checksum = hashlib.sha256(body.encode()).hexdigest()
    assert text == json.dumps({"checksum": checksum, "n": 3, "name": "t"}, sort_keys=True,
                              indent=2) + "\n"
    assert RunStore.open(store.run_dir).manifest == {"name": "t", "n": 3}


def test_creating_over_an_existing_run_is_refused_without_overwrite(store):
    with pytest.raises(RunDirError, match=r"already holds a kernelcli run \(manifest.json\)"):
        RunStore(store.run_dir).create({"name": "other"})
    assert RunStore.open(store.run_dir).manifest["name"] == "t"


def test_a_finished_result_is_never_overwritten_silently(tmp_path):
    (tmp_path / "kernels.h5").write_bytes(b"precious")
    with pytest.raises(RunDirError, match="kernels.h5"):
        RunStore(tmp_path).create({"name": "t"})
    assert (tmp_path / "kernels.h5").read_bytes() == b"precious"


def test_overwrite_removes_only_kernelclis_own_files(store, tmp_path):
    block = Block(0, 0, 0, 2, 0, 2, diagonal=True)
    store.write_tile(block, {"nngp": np.zeros(3)})
    (store.run_dir / "notes.txt").write_text("mine")
    (store.run_dir / "extra").mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.h5").write_bytes(b"keep")
    new = RunStore(store.run_dir).create({"name": "new"}, overwrite=True)
    assert new.manifest == {"name": "new"} and new.done_keys() == set() and not new.finished
    assert (store.run_dir / "notes.txt").read_text() == "mine" and (store.run_dir / "extra").is_dir()
    # a tiles link pointing out of the run directory is refused, never followed
    os.rmdir(new.tiles_dir)
    os.symlink(outside, new.tiles_dir)
    with pytest.raises(RunDirError, match="is a symbolic link"):
        RunStore(store.run_dir).create({"name": "newer"}, overwrite=True)
    assert (outside / "keep.h5").read_bytes() == b"keep" and new.tiles_dir.is_symlink()


def test_opening_a_folder_that_is_not_a_run_says_so(tmp_path):
    with pytest.raises(RunDirError) as info:
        RunStore.open(tmp_path)
    assert str(info.value) == f"{tmp_path} is not a kernelcli run directory (no manifest.json)"
    with pytest.raises(RunDirError, match="no such directory"):
        RunStore.open(tmp_path / "absent")


def test_a_file_in_the_way_is_a_run_dir_error_naming_the_path(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirError, match=str(tmp_path / "file")):
        RunStore(tmp_path / "file" / "run").create({"name": "t"})


def test_disk_full_is_a_compute_error_naming_the_tile_and_leaves_no_tile(tmp_path):
    with small_filesystem(tmp_path / "fs", "size=64k") as fs:
        store = RunStore(fs / "run").create({"name": "t"})
        block = Block(0, 1, 0, 200, 200, 400)
        with pytest.raises(ComputeError, match=rf"disk full while writing .*{block.key}\.h5"):
            store.write_tile(block, {"nngp": np.ones((200, 200))})
        assert store.done_keys() == set() and tmp_files(store) == []


def test_read_only_file_system_is_a_run_dir_error_naming_the_path(tmp_path):
    with small_filesystem(tmp_path / "fs", "ro,size=64k") as fs:
        with pytest.raises(RunDirError, match=rf"cannot write {fs / 'run'}.*read-only"):
            RunStore(fs / "run").create({"name": "t"})


CHILD = """
import sys
import numpy as np
from kernelcli.plan import make_plan
from kernelcli.store import RunStore
store = RunStore.open(sys.argv[1])
plan = make_plan(64 * 3000, 64, symmetric=False, bytes_per_pair=8, fixed_bytes=0,
                 budget_bytes=10**6, kinds=("nngp",), itemsize=8, block=64)
for b in plan.blocks:
    tile = b.r0 * 10000.0 + np.arange(64 * 64.0).reshape(64, 64)
    store.write_tile(b, {"nngp": tile, "ntk": -tile})
    print(b.key, flush=True)
"""


def test_a_writer_killed_mid_way_leaves_every_completed_tile_readable(store):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(store.run_dir)],
                            stdout=subprocess.PIPE, text=True)
    reported = [proc.stdout.readline().strip() for _ in range(25)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    reopened = RunStore.open(store.run_dir)
    done = reopened.done_keys()
    assert set(reported) <= done and len(done) < 3000
    for key in done:
        row = int(key[1:6])
        block = Block(row, 0, row * 64, row * 64 + 64, 0, 64)
        tiles = reopened.read_tile(block)
        expected = row * 64 * 10000.0 + np.arange(64 * 64.0).reshape(64, 64)
        np.testing.assert_array_equal(tiles["nngp"], expected)
        np.testing.assert_array_equal(tiles["ntk"], -expected)
    assert tmp_files(reopened) == []


def test_store_imports_neither_jax_nor_click():
    code = "import sys, kernelcli.store; print(sorted({'jax', 'click'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- the Manifest value object and the result-file reader ---------------------------

def _run_manifest(**plan):
    from kernelcli.config import Engine
    from kernelcli.plan import make_geometry
    from kernelcli.store import new_manifest

    g = make_geometry(4, 4, symmetric=True, block=2, pair_batch=3, kinds=("nngp",),
                      itemsize=4)
    m = new_manifest(name="n", config_text="t", config_dir="/c", config_dir_from_run="..",
                     config_fingerprint="f", data_fingerprints={"x1": "a"}, geometry=g,
                     test_diagonal=False, dtype="float32", engine=Engine("cpu"))
    m["plan"].update(plan)
    return m, g


def test_manifest_checks_itself_and_gives_its_geometry(tmp_path):
    from kernelcli.config import Engine
    from kernelcli.errors import DamagedFileError
    from kernelcli.store import MANIFEST_FORMAT, Manifest

    data, g = _run_manifest()
    assert sorted(data) == ["config_dir", "config_dir_from_run", "config_fingerprint",
                            "config_text", "data_fingerprints", "engine", "format",
                            "kernelcli_version", "name", "plan"]
    assert data["format"] == MANIFEST_FORMAT
    m = Manifest.check(data, tmp_path)
    assert m.geometry == g and m.kinds == ("nngp",) and m.dtype == "float32"
    assert m.result_shapes() == {"nngp": (4, 4)}
    assert m.labels_file == "labels.npz" and m.lineage == [] and m.engine == Engine("cpu")
    with pytest.raises(DamagedFileError, match="plan.dtype is"):
        Manifest.check(_run_manifest(dtype="float16")[0], tmp_path)
    with pytest.raises(DamagedFileError, match="plan.n1 is"):  # made directly: checked too
        Manifest(_run_manifest(n1=0)[0], tmp_path)
    with pytest.raises(DamagedFileError, match="plan.blocks_total is 7 but its plan has 3"):
        Manifest.check(_run_manifest(blocks_total=7)[0], tmp_path)


def test_result_file_reads_names_labels_memmaps_and_checks_values(tmp_path):
    import h5py

    from kernelcli.errors import DataError
    from kernelcli.store import ResultFile

    k = np.array([[2.0, 1.0], [1.0, 3.0]], np.float32)
    with h5py.File(tmp_path / "k.h5", "w") as f:
        f["nngp"] = k
        f["labels"] = np.array([0, 1])
    r = ResultFile(tmp_path / "k.h5")
    assert r.names() == ("labels", "nngp")
    assert list(r.labels()) == ["labels"]
    assert np.array_equal(r.memmap("nngp", KeyError), k)
    assert r.load_float64("nngp").dtype == np.float64
    assert r.values_problem({"nngp": (2, 2)}, "float32", ("nngp",)) is None
    assert r.values_problem({"nngp": (2, 2)}, "float64") == \
        "dataset 'nngp' is float32[2, 2], not float64[2, 2]"
    assert r.values_problem({"ntk": (2, 2)}, "float32") == "it has no dataset 'ntk'"
    with pytest.raises(DataError, match="holds no dataset 'ntk'"):
        r.load_float64("ntk")


def test_a_manifest_round_trip_gives_the_same_geometry(tmp_path):
    # moved from tests/plan/test_planner.py with the manifest's plan fields (store.Manifest)
    from kernelcli.config import Engine
    from kernelcli.errors import DamagedFileError
    from kernelcli.plan import make_plan
    from kernelcli.store import Manifest, new_manifest

    p = make_plan(300, 200, symmetric=False, bytes_per_pair=1000, fixed_bytes=0,
                  budget_bytes=10**9, kinds=("nngp", "ntk"), itemsize=4, block=64)

    def manifest(**plan):
        m = new_manifest(name="n", config_text="t", config_dir="/c", config_dir_from_run="..",
                         config_fingerprint="f", data_fingerprints={}, geometry=p.geometry,
                         test_diagonal=False, dtype="float32", engine=Engine("cpu"))
        m["plan"].update(plan)
        return m

    assert Manifest.check(manifest(), tmp_path).geometry == p.geometry
    with pytest.raises(DamagedFileError, match="plan.pairs_total is 5 but its plan has 60000"):
        Manifest.check(manifest(pairs_total=5), tmp_path)

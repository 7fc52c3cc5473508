"""The planner: coverage of the kernel matrix, memory arithmetic, block choice."""

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelcli._system import available_ram_bytes  # given a meminfo file made here
from kernelcli.config import format_size
from kernelcli.errors import BudgetError, ConfigError
from kernelcli.plan import (
    Block,
    EngineCosts,
    assign,
    auto_block,
    auto_budget,
    auto_pair_batch,
    make_plan,
    memory_line,
    plan_run,
)

MiB, GiB, TiB = 1024**2, 1024**3, 1024**4


def plan(n1, n2=None, *, symmetric=None, bpp=1000, fixed=0, budget=10**9, **kw):
    n2 = n1 if n2 is None else n2
    symmetric = (n1 == n2) if symmetric is None else symmetric
    kw.setdefault("block", 64)
    return make_plan(n1, n2, symmetric=symmetric, bytes_per_pair=bpp, fixed_bytes=fixed,
                     budget_bytes=budget, kinds=("nngp", "ntk"), itemsize=4, **kw)


def pair_counts(p):
    """How often the plan evaluates each (i, j) of the matrix."""
    counts = np.zeros((p.n1, p.n2), dtype=np.int64)
    for b in p.blocks:
        i, j = b.local_pairs()
        np.add.at(counts, (b.r0 + i, b.c0 + j), 1)
    return counts


def assert_covers_exactly_once(p):
    counts = pair_counts(p)
    expected = np.tril(np.ones_like(counts)) if p.symmetric else np.ones_like(counts)
    np.testing.assert_array_equal(counts, expected)
    assert p.pairs_total == expected.sum()


@pytest.mark.parametrize("n", [1, 7, 8, 63, 64, 65, 130, 200])
@pytest.mark.parametrize("block", [1000, 8, 64, 13])
def test_symmetric_plan_evaluates_each_lower_triangle_pair_exactly_once(n, block):
    p = plan(n, symmetric=True, block=block)
    assert_covers_exactly_once(p)
    assert all(b.row >= b.col for b in p.blocks)
    assert all(b.diagonal == (b.row == b.col) for b in p.blocks)


@pytest.mark.parametrize("n1, n2", [(1, 1), (5, 300), (300, 5), (65, 129), (130, 64)])
@pytest.mark.parametrize("block", [1000, 8, 64, 13])
def test_rectangular_plan_evaluates_each_pair_exactly_once(n1, n2, block):
    p = plan(n1, n2, symmetric=False, block=block)
    assert_covers_exactly_once(p)
    assert not any(b.diagonal for b in p.blocks)


@settings(max_examples=60, deadline=None)
@given(n1=st.integers(1, 200), n2=st.integers(1, 200), block=st.integers(1, 80),
       symmetric=st.booleans())
@pytest.mark.slow
def test_any_plan_covers_the_matrix_exactly_once_with_ragged_last_blocks(n1, n2, block, symmetric):
    if symmetric:
        n2 = n1
    p = plan(n1, n2, symmetric=symmetric, block=block)
    assert_covers_exactly_once(p)
    assert [(b.row, b.col) for b in p.blocks] == sorted((b.row, b.col) for b in p.blocks)
    assert len({b.key for b in p.blocks}) == p.blocks_total
    assert p.batches_total == sum(math.ceil(b.n_pairs / p.pair_batch) for b in p.blocks)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5000), bpp=st.integers(1, 10**6), fixed=st.integers(0, 10**6),
       budget=st.integers(1, 10**10), block=st.integers(8, 1024))
def test_the_pair_batch_is_the_most_the_budget_fits_within_a_block(n, bpp, fixed, budget, block):
    if fixed + bpp > budget:
        with pytest.raises(BudgetError):
            plan(n, bpp=bpp, fixed=fixed, budget=budget, block=block)
        return
    p = plan(n, bpp=bpp, fixed=fixed, budget=budget, block=block)
    assert p.peak_bytes_per_device <= budget
    largest = max(b.n_pairs for b in p.blocks)
    # the largest batch that fits, unless a block could not fill it
    assert p.pair_batch == min((budget - fixed) // bpp, largest)


def costs(*, chunk=64, flat_input=False, cov_elements=1024**2, layers=5, memory=None):
    """Engine costs of a made-up kernel whose call needs 1 MiB + 10 KiB per pair."""
    return EngineCosts(chunk=chunk, flat_input=flat_input, cov_elements=cov_elements,
                       layers=layers, kinds=("nngp", "ntk"), itemsize=4,
                       compiled_memory=memory or (lambda r, c, p: MiB + p * 10 * 1024))


@pytest.mark.parametrize("cov, layers, n, edge", [
    (1024**2, 5, 10000, 64),        # a heavy pair: the smallest block
    (16, 1, 10000, 1024),           # a light pair: the largest block
    (4096, 3, 10000, 736),          # sqrt(2e11 / (4096 * 3 * 30)), to a multiple of 8
    (16, 1, 30, 32),                # never beyond the data set, rounded up to 8
])
def test_auto_block_aims_at_a_fixed_amount_of_work_per_block(cov, layers, n, edge):
    assert auto_block(costs(cov_elements=cov, layers=layers), n) == edge


def test_auto_pair_batch_amortises_a_call_and_keeps_devices_busy():
    assert auto_pair_batch(costs(chunk=8), 64, 1, 1 << 62) == 64 * 64 // 8  # 8 batches a block
    assert auto_pair_batch(costs(chunk=1), 1024, 1, 1 << 62) == 64  # 64 chunks a call
    assert auto_pair_batch(costs(chunk=8), 64, 4, 1 << 62) == 64 * 64 // 32
    assert auto_pair_batch(costs(chunk=8), 64, 1, 100) == 100  # never beyond the budget
    assert auto_pair_batch(costs(flat_input=True), 64, 1, 1 << 62) == 64 * 64  # one Gram call
    assert auto_pair_batch(costs(), 64, 1, 0) is None
    # A data set smaller than a block: its pairs, spread over the devices too.
    assert auto_pair_batch(costs(chunk=1), 8, 2, 1 << 62, pairs=4) == 2  # one per device
    assert auto_pair_batch(costs(chunk=1), 64, 2, 1 << 62, pairs=400) == 50
    assert auto_pair_batch(costs(chunk=128), 64, 2, 1 << 62, pairs=10) == 4


def test_a_batch_is_whole_chunks_or_what_a_call_evaluates_anyway():
    """The engine pads a call to whole chunks, a small one to ``min_call`` pairs: a
    batch is whole chunks (but not two, whose memory line would compile a one-chunk
    program too: three); a small data set's block is one call of its real pairs, not
    several of padding."""
    def small(chunk, min_call):
        return dataclasses.replace(costs(chunk=chunk), min_call=min_call)

    assert auto_pair_batch(small(32, 32), 32, 2, 1 << 62, pairs=528) == 96  # not 66
    assert auto_pair_batch(small(32, 32), 64, 2, 1 << 62, pairs=1200) == 160  # 150 -> 5
    assert auto_pair_batch(small(32, 32), 8, 2, 1 << 62, pairs=28) == 28  # not 4 x 7
    assert auto_pair_batch(small(32, 32), 16, 2, 1 << 62, pairs=120) == 32
    assert auto_pair_batch(small(32, 32), 64, 2, 1 << 62, pairs=100) == 32  # 13 -> 32
    assert auto_pair_batch(small(1, 1), 64, 2, 1 << 62, pairs=400) == 50  # a pair a chunk
    # a pair a chunk: calls a multiple of the devices, cut evenly (1128 = 18 x 63 less 6,
    # not 17 x 64 + 40)
    assert auto_pair_batch(small(1, 1), 48, 2, 1 << 62, pairs=1128) == 63
    assert auto_pair_batch(small(32, 32), 64, 1, 40) == 40  # never beyond the budget


def test_a_small_data_sets_batches_cut_the_pairs_it_evaluates_evenly():
    """A diagonal block's own diagonal comes from the per-input pass: its batches cut
    the n (n - 1) / 2 pairs evaluated, not n (n + 1) / 2 (16 inputs: 8 batches of 15,
    not 7 of 17 and a last one of a single pair padded to 17)."""
    p = plan_run(16, 16, symmetric=True, costs=costs(chunk=1), budget_bytes=GiB, devices=2)
    (block,) = p.blocks
    assert (block.n_pairs, block.n_evaluated, p.pair_batch) == (136, 120, 15)
    i, j = block.evaluated_pairs()
    assert len(i) == block.n_evaluated and not np.any(i == j)


def test_plan_run_measures_the_memory_line_and_fits_the_budget():
    seen = []

    def memory(rows, cols, pairs):
        seen.append((rows, cols, pairs))
        return MiB + pairs * 10 * 1024

    p = plan_run(1000, 1000, symmetric=True, costs=costs(chunk=8, memory=memory),
                 budget_bytes=GiB)
    assert p.block == 64 and p.pair_batch == 512
    # at the batch the run calls, then at half of it (the engine may answer from the first)
    assert seen == [(64, 64, 512), (64, 64, 256)]
    assert (p.bytes_per_pair, p.fixed_bytes) == (10 * 1024, MiB)
    assert memory_line(costs(), 64, 512) == (10 * 1024, MiB)
    tight = plan_run(1000, 1000, symmetric=True, costs=costs(chunk=8), budget_bytes=2 * MiB)
    assert tight.pair_batch == MiB // (10 * 1024) == tight.memory.fit()
    # a stored block and batch are kept exactly (a resumed run)
    kept = plan_run(1000, 1000, symmetric=True, costs=costs(), budget_bytes=GiB, block=40,
                    pair_batch=7)
    assert (kept.block, kept.pair_batch) == (40, 7)
    with pytest.raises(BudgetError, match="cannot hold one pair"):
        plan_run(1000, 1000, symmetric=True, costs=costs(), budget_bytes=MiB)


def test_data_set_smaller_than_a_block_is_one_block():
    p = plan(10)
    assert p.blocks_total == 1
    assert p.blocks[0] == Block(0, 0, 0, 10, 0, 10, diagonal=True)
    assert p.pair_batch == 55  # no point batching more than the block's pairs


def test_explicit_block_is_used_as_given():
    p = plan(100, block=30)
    assert p.block == 30
    assert [b.r1 for b in p.blocks if b.col == 0] == [30, 60, 90, 100]


def test_explicit_pair_batch_that_fits_is_kept():
    assert plan(100, bpp=10, budget=10**6, pair_batch=17).pair_batch == 17


def test_explicit_pair_batch_that_does_not_fit_is_an_error_not_shrunk():
    with pytest.raises(BudgetError, match=r"`pair_batch` \(=200\).*at most 100 pairs fit"):
        plan(100, bpp=10, budget=1000, pair_batch=200)


def test_budget_error_names_the_smallest_budget_that_works():
    with pytest.raises(BudgetError) as info:
        plan(100, bpp=25 * MiB, fixed=GiB, budget=GiB)
    message = str(info.value)
    assert "1 GiB" in message and "25 MiB" in message
    assert f"the smallest budget that works is 1.02 GiB ({GiB + 25 * MiB} bytes)" in message
    # and that budget does work
    assert plan(100, bpp=25 * MiB, fixed=GiB, budget=GiB + 25 * MiB).pair_batch == 1


def test_seed_case_fits_16_gib_although_the_untiled_call_needs_hundreds_of_tib():
    bpp = 2 * (32 * 32) ** 2 * 4 * 3  # two kinds, 4-byte covariances, ~3 live arrays
    p = plan(10000, bpp=bpp, budget=16 * GiB)
    assert p.untiled_peak_bytes >= 100 * TiB
    assert p.peak_bytes_per_device <= 16 * GiB
    assert p.pairs_total == 10000 * 10001 // 2
    assert p.output_bytes == 10000**2 * 4 * 2
    assert_covers_exactly_once(plan(1000, bpp=bpp, budget=16 * GiB))


def test_to_dict_reports_the_contract_keys_as_json():
    d = json.loads(json.dumps(plan(300, budget=10**6).to_dict()))
    for key in ("n1", "n2", "pairs_total", "pair_batch", "blocks_total",
                "peak_bytes_per_device", "memory_budget_bytes", "untiled_peak_bytes",
                "output_bytes"):
        assert isinstance(d[key], int)
    assert d["pairs_total"] == 300 * 301 // 2
    assert d["untiled_peak_bytes"] == 300 * 300 * 1000
    assert d["memory_budget_bytes"] == 10**6


def test_symmetric_plan_of_a_rectangle_is_refused():
    with pytest.raises(ValueError, match="n1 == n2"):
        plan(10, 20, symmetric=True)


@pytest.mark.parametrize("kw, match", [({"block": 0}, "compute.block"),
                                       ({"devices": 0}, "compute.devices"),
                                       ({"pair_batch": 0}, "pair_batch"),
                                       ({"block": 1}, "blocks; at most")])
def test_bad_knobs_are_config_errors_that_echo_the_value(kw, match):
    with pytest.raises(ConfigError, match=match):
        plan(2000, **kw)


def test_block_key_is_a_pure_function_of_coordinates():
    assert Block(3, 1, 192, 256, 64, 128).key == "r00003c00001"
    assert Block(3, 1, 0, 5, 0, 7).key == Block(3, 1, 192, 256, 64, 128).key


def test_local_pairs_are_row_major_and_lower_triangle_on_the_diagonal():
    i, j = Block(0, 0, 0, 3, 0, 3, diagonal=True).local_pairs()
    assert list(zip(i.tolist(), j.tolist())) == [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
    assert i.dtype == np.int32 and j.dtype == np.int32
    i, j = Block(0, 1, 0, 2, 3, 6).local_pairs()
    assert list(zip(i.tolist(), j.tolist())) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert Block(0, 1, 0, 2, 3, 6).n_pairs == 6


@pytest.mark.parametrize("args", [(0, 0, 5, 5, 0, 3), (0, 0, -1, 3, 0, 3), (1, 0, 0, 3, 0, 3, True),
                                  (0, 0, 0, 3, 0, 4, True)])
def test_block_refuses_inconsistent_coordinates(args):
    with pytest.raises(ValueError):
        Block(*args)


def test_assign_balances_pairs_deterministically_and_keeps_every_block_once():
    blocks = plan(1000, block=64).blocks
    parts = assign(blocks, 3)
    assert parts == assign(blocks, 3)
    assert sorted((b for part in parts for b in part), key=lambda b: (b.row, b.col)) == list(blocks)
    loads = [sum(b.n_pairs for b in part) for part in parts]
    assert max(loads) - min(loads) <= max(b.n_pairs for b in blocks)
    assert all(part == sorted(part, key=lambda b: (b.row, b.col)) for part in parts)
    assert assign(blocks[:1], 4)[1:] == [[], [], []]


def test_available_ram_reads_mem_available_and_falls_back(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  2048 kB\nMemFree:  1000 kB\nMemAvailable:  1500 kB\n")
    assert available_ram_bytes(str(meminfo)) == 1500 * 1024
    assert available_ram_bytes(str(tmp_path / "absent")) > 0
    assert available_ram_bytes() > 0


def test_auto_budget_keeps_a_headroom():
    assert auto_budget(10 * GiB) == 8 * GiB
    assert auto_budget(GiB) == 512 * MiB
    assert auto_budget(100 * MiB) == 0


def test_format_size_is_human_readable():
    assert [format_size(n) for n in (0, 1023, 1536, 16 * GiB, 381 * TiB)] == [
        "0 B", "1023 B", "1.5 KiB", "16 GiB", "381 TiB"]


def test_planner_imports_neither_jax_nor_h5py():
    code = "import sys, kernelcli.plan; print(sorted({'jax', 'h5py'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

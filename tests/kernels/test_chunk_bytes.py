"""``KERNELCLI_CHUNK_BYTES`` sets the cpu engine's pairs per chunk, and XLA compiles each
chunk size's program differently (a chunk of one pair drops the batch axis; the
pooling's reductions are vectorised another way), so the kernel's last bits can follow
it. A run records its chunk in its manifest; ``resume`` and ``extend`` compute with
the recorded one whatever the environment says, so they stay bit-identical to an
uninterrupted run.

12x12x3 images under a global average pool: before the cpu engine's row loop carried
the convolution's next row, a chunk of one pair and the default chunk
differed in about 5% of the entries; today's program gives this net the same bits at
either chunk, and a later change may not, so the test checks the recorded chunk is the
one used, and the bits against the uninterrupted run.
"""

from __future__ import annotations

import json

import numpy as np

import kernelcli
from helpers_cli import GAP_NET, assert_bit_identical, images, invoke, read_kernels, write_config

CHUNK_BYTES = "KERNELCLI_CHUNK_BYTES"  # the documented variable, as a user sets it

N, OLD = 24, 16


def computed(folder, name, x, *extra):
    cfg = write_config(folder, name=name, x1=folder / x, key="x", layers=GAP_NET,
                       run_dir=folder / name, compute={"block": 8})
    res = invoke("compute", cfg, "--quiet", *extra)
    assert res.exit_code == 0, res.stderr
    return folder / name


def chunk_of(run) -> int:
    return json.loads((run / "manifest.json").read_text())["plan"]["chunk"]


def test_resume_and_extend_keep_the_chunk_the_run_recorded(tmp_path, monkeypatch):
    x = images(N, 12, 12, 3)
    for name, rows in (("all", x), ("old", x[:OLD]), ("new", x[OLD:])):
        np.savez(tmp_path / f"{name}.npz", x=rows)
    monkeypatch.setenv(CHUNK_BYTES, "1")  # one pair per chunk
    want = read_kernels(computed(tmp_path, "ref", "all.npz") / "kernels.h5")[0]
    assert chunk_of(tmp_path / "ref") == 1
    half = computed(tmp_path, "half", "all.npz", "--shard", "0/2")
    old = computed(tmp_path, "old", "old.npz")

    monkeypatch.delenv(CHUNK_BYTES)  # the default chunk for a new run
    computed(tmp_path, "other", "all.npz")
    assert chunk_of(tmp_path / "other") > 1

    res = invoke("resume", half, "--quiet")
    assert res.exit_code == 0, res.stderr
    assert_bit_identical(read_kernels(half / "kernels.h5")[0], want)
    assert chunk_of(half) == 1

    kernelcli.extend(old, append=tmp_path / "new.npz")
    assert_bit_identical(read_kernels(old / "kernels.h5")[0], want)
    assert chunk_of(old) == 1

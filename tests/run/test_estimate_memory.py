"""``estimate --memory`` predicts the peak memory of ``compute``.

``process_peak_bytes_estimate`` (the estimate process's own resident baseline, plus the
per-input statistics, plus every device's XLA peak) is compared with the measured peak
resident set of a real ``kernelcli compute`` run of the same configuration, within
+-25%.

The measurement (``helpers_cli.run_measured``): a fresh helper Python process starts
``kernelcli compute`` and, after waiting for it, reads
``getrusage(RUSAGE_CHILDREN).ru_maxrss``, so exactly that one child is counted.

Configurations: kernel memory should dominate the ~0.3 GB process baseline, and every
device should be busy at once (several pair batches per block). Under default settings
the engine evaluates pairs in chunks of 4 MiB of covariance, so a device's working set
stays at tens of MiB whatever the budget; the engine's KERNELCLI_CHUNK_BYTES raises the
chunk so that pair batches take hundreds of MiB per device. One case keeps the
defaults (baseline-dominated).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers_cli import (
    FLATTEN_NET,
    GAP2_NET,
    cli_env,
    fresh_cache,
    images,
    run_measured,
    write_config,
)

MiB = 1 << 20

# Peaks are compared between processes: a compilation read from the persistent cache
# needs less memory than one compiled afresh, so these runs compile afresh.
NO_CACHE = {"KERNELCLI_CACHE_DIR": "off"}


def estimate_json(cfg, env, ballast_mib: int = 0) -> dict:
    return json.loads(run_measured(["estimate", cfg, "--memory", "--json"], env,
                                   ballast_mib)[1])


CASES = {
    # 16x16x3, two convs + global_avg_pool: ~385 MiB per device, 4 batches per block
    "pooling_16x16": dict(n=40, hw=16, layers=GAP2_NET, chunk=64 * MiB),
    # 32x32x3, conv + flatten: ~600 MiB per device, 5 batches per block
    "flatten_32x32": dict(n=256, hw=32, layers=FLATTEN_NET, chunk=32 * MiB),
    # defaults: tens of MiB per device, the process baseline dominates
    "pooling_16x16_defaults": dict(n=24, hw=16, layers=GAP2_NET, chunk=None),
    # the native engine (auto's choice here): no covariance between layers, the baseline's
    "pooling_16x16_native": dict(n=40, hw=16, layers=GAP2_NET, chunk=None, engine="native"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_estimated_process_peak_is_within_25_percent_of_the_measured_peak(tmp_path, case):
    c = CASES[case]
    np.save(tmp_path / "x.npy", images(c["n"], c["hw"], c["hw"], 3, seed=5))
    engine = c.get("engine", "cpu")
    cfg = write_config(tmp_path, case, layers=c["layers"], run_dir="run",
                       compute={"engine": engine})
    chunk = {} if c["chunk"] is None else {"KERNELCLI_CHUNK_BYTES": c["chunk"]}
    caches = ((fresh_cache(tmp_path / "a"), fresh_cache(tmp_path / "b")) if engine == "native"
              else (NO_CACHE, NO_CACHE))
    plan = estimate_json(cfg, cli_env(**caches[0], **chunk))
    estimate = plan["process_peak_bytes_estimate"]
    peak, _ = run_measured(["compute", cfg, "--quiet"], cli_env(**caches[1], **chunk))
    numbers = (f"{case}: estimated {estimate / MiB:.0f} MiB (per device "
               f"{plan['peak_bytes_per_device'] / MiB:.0f} MiB x {plan['devices']} devices, "
               f"pair batch {plan['pair_batch']}, block {plan['block']}), measured "
               f"{peak / MiB:.0f} MiB, ratio {peak / estimate:.2f}")
    print(numbers)
    assert (tmp_path / "run" / "kernels.h5").is_file()
    assert 0.75 * estimate <= peak <= 1.25 * estimate, numbers


@pytest.mark.slow
def test_estimate_does_not_count_the_memory_of_the_process_that_started_it(tmp_path):
    """The same estimate whether kernelcli is started by a small process or by one holding
    1 GiB (a notebook, a workflow manager, pytest)."""
    np.save(tmp_path / "x.npy", images(10, seed=6))
    cfg = write_config(tmp_path, "small", layers=GAP2_NET, run_dir="run",
                       compute={"engine": "cpu"})
    env = cli_env(**NO_CACHE)
    small = estimate_json(cfg, env)["process_peak_bytes_estimate"]
    big = estimate_json(cfg, env, ballast_mib=1024)["process_peak_bytes_estimate"]
    assert abs(big - small) <= 0.1 * small, (
        f"started by a small process: {small / MiB:.0f} MiB; by one holding 1 GiB: "
        f"{big / MiB:.0f} MiB")

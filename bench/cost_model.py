"""The accelerator engine's cost model for the six bench cases, as a markdown table.

Predictions for the first GPU run to confirm or refute (BENCHMARKS.md): bytes each
pair moves through device memory, program launches per pair batch, and the time per
kernel entry at a bandwidth and launch latency (default an H200: 4.8 TB/s, 5 us).
Runs on CPU: the kernel is built with ``engine="accelerator"``; the launches are the structural
count (a fused pass per layer, plus input and output), the pair batch what 90% of an
H200's preallocated pool (0.75 x 141 GiB) holds at about three live copies of a
pair's covariances, capped as the planner caps it.

    .venv/bin/python bench/cost_model.py [--bandwidth 4.8e12] [--launch-latency 5e-6]
"""

from __future__ import annotations

import argparse

from cases import CASES, INPUT_SHAPE, config_path
from kernelcli.config import load_config
from kernelcli.kernels import H200_BANDWIDTH, H200_LAUNCH_LATENCY, build_kernel_fn, cost_model
from kernelcli.plan import ACCELERATOR_MAX_PAIR_BATCH

H200_POOL = int(0.75 * 141 * 2**30 * 0.9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bandwidth", type=float, default=H200_BANDWIDTH)
    ap.add_argument("--launch-latency", type=float, default=H200_LAUNCH_LATENCY)
    args = ap.parse_args()
    print("| case | layers | covariance entries / pair | MB / pair | pair batch | "
          "launches / batch | bandwidth us / entry | launches us / entry | "
          "predicted ms / entry |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in CASES:
        cfg = load_config(config_path(name))
        kfn = build_kernel_fn(cfg.architecture, INPUT_SHAPE, cfg.kernel.kinds,
                              cfg.kernel.dtype, engine="accelerator")
        batch = max(1, min(ACCELERATOR_MAX_PAIR_BATCH,
                           H200_POOL // max(1, 3 * kfn.live_bytes_per_pair)))
        m = cost_model(kfn, batch, bandwidth=args.bandwidth,
                       launch_latency=args.launch_latency)
        print(f"| {name} | {kfn.n_layers} | {1 if kfn.flat_input else kfn.cov_elements:,} | "
              f"{m.bytes_per_pair / 1e6:,.3f} | {batch:,} | {m.launches_per_batch} | "
              f"{m.bandwidth_seconds_per_entry * 1e6:,.2f} | "
              f"{m.launch_seconds_per_entry * 1e6:,.3f} | {m.seconds_per_entry * 1e3:.4f} |")
    print()
    print(f"At {args.bandwidth / 1e12:g} TB/s and {args.launch_latency * 1e6:g} us a launch; "
          f"kernels built with engine=accelerator.")


if __name__ == "__main__":
    main()

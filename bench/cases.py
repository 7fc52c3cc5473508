"""Benchmark cases shared by nt_case.py (neural-tangents venv) and kc_case.py.

Numpy only: this module is imported under both interpreters. Each case has a
kernelcli config (:func:`config_path`: ``bench/configs/<name>.yaml``, or for the seed's
network the shipped ``configs/seed_gap.yaml``, so that one network has one file);
nt_case.py builds the same network with neural-tangents ``stax`` by hand, as an
independent reference.
"""

from __future__ import annotations

import json
import resource
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
CONFIGS = BENCH / "configs"
# cases whose network is a shipped configuration's (only its architecture is read)
SHIPPED = {"cnn1_gap": BENCH.parent / "configs" / "seed_gap.yaml",
           # the field's best recipe: random-patch features, 5 conv + ReLU, LAP, flips
           "li2019": BENCH.parent / "configs" / "cifar10_li2019.yaml"}
INPUT_SHAPE = (32, 32, 3)
KINDS = ("nngp", "ntk")

# name -> (N for the full bench, N for --quick). Chosen so that the whole bench
# (neural-tangents and kernelcli, warm-up + reps) stays under 20 min and
# 20 GiB on 2 idle CPU cores; see the measured costs in bench/README.md.
CASES = {
    "cnn1_gap": (8, 2),  # the seed's network (configs/seed_gap.yaml)
    "cnn21_gap": (2, 2),
    "cnn5_gap": (4, 2),
    "myrtle5": (8, 2),
    "cnn21_flatten": (32, 8),
    "cnn5_flatten": (128, 16),
    "fc2": (2000, 64),
}


def config_path(case: str) -> Path:
    """The configuration that describes ``case``'s network."""
    return SHIPPED.get(case, CONFIGS / f"{case}.yaml")


def case_config(case: str) -> dict:
    """``case``'s configuration as a mapping in the bench's form (every section present,
    ``data.x1`` a placeholder the caller replaces): a shipped configuration's
    architecture and kernel on the bench's data, compute and output settings."""
    import yaml  # both interpreters have PyYAML; numpy-only callers never call this

    doc = yaml.safe_load(config_path(case).read_text())
    if case in SHIPPED:
        # the network, its kinds, dtype and flips, and its preprocessing; not its test
        # set, so not the test diagonal
        kernel = {k: v for k, v in doc["kernel"].items() if k != "test_diagonal"}
        data = {"x1": "../out/inputs.npy", "layout": "NHWC", "limit": None}
        pre = doc.get("data", {}).get("preprocess")
        if isinstance(pre, dict) and pre.get("kind") == "random_patches":
            data["preprocess"] = pre  # the recipe's features (a fitted scaling is not kept)
        doc = {"name": f"bench-{case}", "data": data,
               "architecture": doc["architecture"], "kernel": kernel,
               "compute": {"memory": "auto", "devices": "all", "block": "auto"},
               "output": {"run_dir": f"../out/runs/{case}"}}
    return doc


# Cases kernelcli's own benches time (roofline.py, kc_case.py), not neural-tangents'
# (it has no random-patch features): name -> N for a call of a few seconds.
RECIPES = {"li2019": 16}


def case_patches(case: str):
    """``(PatchSettings, zca_reg)`` of ``case``'s random patches as kernelcli reads its
    configuration (its loader's defaults and checks), or ``None`` without them."""
    from kernelcli.config import load_config
    from kernelcli.pipeline import patch_settings

    cfg = load_config(config_path(case))
    settings = patch_settings(cfg)
    return None if settings is None else (settings, cfg.data.preprocess.zca_reg)


def case_input_shape(case: str) -> tuple:
    """The shape of one input of ``case``'s network: the bench's 32 x 32 x 3 images, or
    the feature maps a configuration's random patches make of them (13 x 13 x 512 for
    ``li2019``): the pairs' cost is the network's on those."""
    patches = case_patches(case)
    return INPUT_SHAPE if patches is None else tuple(patches[0].output_shape(INPUT_SHAPE))


def case_augment(case: str) -> tuple:
    """``kernel.augment``'s flips of ``case`` (each pair then evaluated once per flip)."""
    from kernelcli.config import parse_augment

    return parse_augment(case_config(case)["kernel"].get("augment"), "kernel.augment")


def make_inputs(n: int, seed: int = 0, shape: tuple = INPUT_SHAPE) -> np.ndarray:
    """The benchmark inputs: ``(n, *shape)`` float32 standard normals (default
    ``(n, 32, 32, 3)``)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n,) + tuple(shape)).astype(np.float32)


def peak_rss_bytes() -> int:
    """This process's peak resident set size in bytes.

    ``VmHWM`` (Linux), not ``getrusage``: ``ru_maxrss`` survives ``exec`` and so
    starts at the spawning parent's RSS; ``VmHWM`` belongs to this program alone.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def device_peak_bytes(jax) -> int | None:
    """Peak bytes in use on jax's first device (GPU), or None where not tracked (CPU)."""
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001 - any backend without memory stats
        return None
    return (stats or {}).get("peak_bytes_in_use")


def save_result(path: str, out: dict) -> None:
    """Save the kernels as one ``(2, N, M)`` array, nngp first, then ntk."""
    np.save(path, np.stack([np.asarray(out[k], dtype=np.float32) for k in KINDS]))


def report(**fields) -> None:
    """Print the one JSON line that bench/run.py reads."""
    fields["peak_rss"] = peak_rss_bytes()
    print(json.dumps(fields), flush=True)

"""What compute, resume and extend check of a configuration and its arguments before
anything is written: the executor and address given on the command line, the
combinations that cannot work (a job array with ``overwrite`` or with Ray), and inputs
that are files kernelcli writes in its own run directory."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..config import EXECUTORS, RunConfig
from ..errors import RunDirError, UsageError
from ..pipeline import Shard, input_paths, shard_label
from ..store import input_clash


def with_executor(cfg: RunConfig, executor: Optional[str], address: Optional[str]) -> RunConfig:
    """``cfg`` with the arguments ``executor`` / ``address`` (which win)."""
    if executor is None and address is None:
        return cfg
    compute = cfg.compute
    if executor is not None:
        if executor not in EXECUTORS:
            raise UsageError.naming(f"<<executor>>: {executor!r} is not an executor; expected "
                                    f"one of {', '.join(EXECUTORS)}")
        compute = dataclasses.replace(compute, executor=executor)
    if address is not None:
        compute = dataclasses.replace(compute, address=address)
    if compute.address is not None and compute.executor != "ray":
        raise UsageError.naming(f"<<address>>: {compute.address!r} is given but the executor "
                                f"is {compute.executor}; add <<executor>> ray, or drop "
                                f"<<address>>")
    return dataclasses.replace(cfg, compute=compute)


def check_combination(cfg: RunConfig, shard: Optional[Shard], overwrite: bool = False) -> None:
    """Refuse what cannot work, before anything is written."""
    if shard is not None and overwrite:
        raise UsageError.naming(f"<<overwrite>> cannot be combined with <<shard>> "
                                f"{shard_label(shard)}: other processes of the job array may "
                                f"be writing the run directory; remove it (or pick another "
                                f"<<run_dir>>) before starting the array")
    if cfg.compute.executor == "ray":
        if shard is not None:
            raise UsageError.naming(f"<<shard>> {shard_label(shard)} cannot be combined with "
                                    f"the ray executor: a Ray driver already spreads all "
                                    f"tiles over the cluster; use one or the other")
        from ..pipeline import require_ray

        require_ray()


def check_inputs_outside(cfg: RunConfig) -> None:
    """Refuse a run whose input is a file kernelcli writes in its run directory (it
    would be replaced or deleted): exit 2 naming both."""
    clash = input_clash(cfg.output.run_dir, input_paths(cfg))
    if clash is not None:
        what, path, ours = clash
        raise RunDirError.naming(
            f"{what}: {path} is {ours} in the run directory, where kernelcli writes its own "
            f"files; move the input out of {cfg.output.run_dir}, or choose another "
            f"<<run_dir>>")

"""Which local JAX devices a run uses (``compute.devices``)."""

from __future__ import annotations

import os
import re
from typing import Optional

from .. import _env
from ..errors import ComputeError, ConfigError, resume_command


def configure_host_devices() -> None:
    """On CPU, expose one XLA host device per core: the cpu engine runs a thread per host
    device, so a pair batch per core keeps every core busy (one XLA computation alone
    leaves cores idle; the threads call one device's programs, :func:`compute_streams`).
    Must run before jax is imported; a user's own ``XLA_FLAGS`` setting wins."""
    flags = _env.get("XLA_FLAGS") or ""
    if "xla_force_host_platform_device_count" in flags:
        given = re.findall(r"xla_force_host_platform_device_count=(\S*)", flags)
        if not given or not all(v.isdigit() and int(v) >= 1 for v in given):
            # XLA aborts its CPU backend on a count below 1 (a RuntimeError deep in jax)
            shown = given[-1] if given else ""
            raise ConfigError(f"XLA_FLAGS: --xla_force_host_platform_device_count="
                              f"{shown} is not a device count; accepted: an integer >= 1, "
                              f"or leave it out (one device per core)")
        return
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={_cores()}".strip()


def _cores() -> int:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return n or 1


def local_devices(requested: Optional[int]) -> list:
    """The devices to use: all local ones, or the first ``requested``."""
    import jax

    devices = jax.local_devices()
    if requested is None:
        return devices
    if requested > len(devices):
        raise ConfigError(f"compute.devices: {requested} devices requested but only "
                          f"{len(devices)} are available ({devices[0].platform}); "
                          f"use `all` or a count up to {len(devices)}")
    return devices[:requested]


def compute_streams(kfn, devices) -> list:
    """The device each of ``devices``' runner threads calls for ``kfn`` (one thread per
    device, as ``kernels._runner`` spreads calls): on CPU the first host device for all
    of them, elsewhere, or where ``kfn``'s calls are one program over the devices' mesh
    (the accelerator engine, ``kernels._programs``), each its own.

    XLA binds an executable to its device, so a program called on each of two host
    devices is compiled twice (seen in JAX's compile log). CPU host devices
    are one memory and one intra-op thread pool, and the CPU client runs calls of one
    device from several threads at once, so one thread per host device calling the first
    device's program keeps every core busy with one compilation per program; the values
    are the same bits (one program, the same calls), and the inputs are placed once. The
    host devices still count the threads (``compute.devices``, progress, the budget)."""
    devices = list(devices)
    if _per_device_cpu(kfn) and devices and all(getattr(d, "platform", None) == "cpu"
                                                for d in devices):
        return [devices[0]] * len(devices)
    return devices


def _per_device_cpu(kfn) -> bool:
    """Whether ``kfn``'s calls are the cpu engine's programs, one per runner thread (not one
    program over the devices' mesh)."""
    return not kfn.engine.batched and not kfn.mesh_calls


def default_devices(kfn) -> list:
    """The devices a call of ``kfn`` computes on when it names none (``kernel_matrix``,
    the library): jax's local devices; but on the cpu engine, where jax has one host
    device and ``XLA_FLAGS`` forces no count (a process that did not call
    :func:`configure_host_devices`, as a neural-tangents user's), that device once per
    core: a runner thread per core calling its programs (:func:`compute_streams`), as
    with the CLI's host device per core, where one thread alone leaves cores to XLA's
    intra-op split of some loops and runs slower (1.3-1.8x the wall time of two threads,
    measured on the bench cases). A count the user forced is kept."""
    import jax

    devices = jax.local_devices()
    forced = "xla_force_host_platform_device_count" in (_env.get("XLA_FLAGS") or "")
    if len(devices) == 1 and devices[0].platform == "cpu" and not forced and _per_device_cpu(kfn):
        return devices * _cores()
    return devices


DEVICE_SOURCE = "device memory_stats"


def device_memory_available(devices) -> Optional[tuple[int, str]]:
    """``(bytes, "device memory_stats")``: what the least free of ``devices`` can still
    take, from each device's ``memory_stats()`` (``bytes_limit - bytes_in_use``); or
    ``None`` where a device does not say (CPU devices return ``None``, some backends
    raise or leave the keys out): the run then plans by host memory, as on CPU.

    ``bytes_limit`` is the device allocator's pool. With JAX's preallocation on (the
    default, unless ``XLA_PYTHON_CLIENT_PREALLOCATE=false``) the pool is reserved at
    start-up as ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (default 0.75) of the device's
    memory, and everything the run allocates comes out of it, so the pool less what is
    in use is the right budget: the memory outside it is not ours to take (another
    process, or XLA's own workspace). Without preallocation ``bytes_limit`` is the
    most the allocator may grow to (the same fraction, or the device's memory), and
    the difference is still what a program of this process can get. A run uses
    every device alike, so the budget per device is the smallest device's.
    """
    free = []
    for device in devices:
        if getattr(device, "platform", "cpu") == "cpu":
            return None
        try:
            stats = device.memory_stats()
        except Exception:  # noqa: BLE001 - backends without statistics raise various errors
            return None
        if not stats or "bytes_limit" not in stats:
            return None
        free.append(max(0, int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))))
    if not free:
        return None
    return min(free), DEVICE_SOURCE


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is XLA's out-of-memory error: a ``RuntimeError`` (jaxlib's
    ``XlaRuntimeError``, ``jax.errors.JaxRuntimeError`` in later versions; matched by
    its base class, never by a private jaxlib name) whose message says
    ``RESOURCE_EXHAUSTED``."""
    return isinstance(exc, RuntimeError) and "RESOURCE_EXHAUSTED" in str(exc)


def out_of_memory_error(budget_bytes=None, memory: str = "device", given: bool = False,
                        run_dir=None, shard=None) -> ComputeError:
    """The out-of-memory error (exit 1) for XLA's ``RESOURCE_EXHAUSTED``: which memory,
    the budget the plan used and where it came from, what to change, and (given
    ``run_dir``) that completed tiles are kept."""
    from ..config import format_size

    which = "device memory" if memory == "device" else "memory"
    now = ""
    if budget_bytes is not None:
        now = (f" (now {format_size(budget_bytes)} per device"
               f"{'' if given else ', from auto'})")
    text = (f"out of {which} (RESOURCE_EXHAUSTED): lower `compute.memory` in the "
            f"configuration{now}, or set XLA_PYTHON_CLIENT_MEM_FRACTION (the share of a "
            f"GPU's memory JAX takes, default 0.75) / XLA_PYTHON_CLIENT_PREALLOCATE=false")
    if run_dir is not None:
        text += f"; completed tiles are kept: continue with `{resume_command(run_dir, shard)}`"
    return ComputeError(text)

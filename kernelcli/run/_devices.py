"""Which local JAX devices a run uses (``compute.devices``)."""

from __future__ import annotations

import os
from typing import Optional

from .. import _env
from ..errors import ConfigError


def configure_host_devices() -> None:
    """On CPU, expose one XLA host device per core, so a pair batch per device keeps
    every core busy (one XLA computation alone leaves cores idle). Must run before
    jax is imported; a user's own ``XLA_FLAGS`` setting wins."""
    flags = _env.get("XLA_FLAGS") or ""
    if "xla_force_host_platform_device_count" in flags:
        return
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n or 1}".strip()


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

"""Which Ray a training joins: the one named, else none but its own.

`ray.init()` without an address joins the Ray cluster last started on this machine (Ray writes its address to
`/tmp/ray/ray_current_cluster` on `ray start`, and `ray.cluster_utils.Cluster` does too) and keeps doing so while
that file names it. A training that meant to start its own Ray would then join a stranger's, where asking for
`num_cpus` is refused ("When connecting to an existing cluster, num_cpus and num_gpus must not be provided") and
the stranger's resources decide the placement. So a Ray is joined only when named: `RAY_ADDRESS`, or the address a
caller gives (`RayRunners(address=...)`, `--ray-address`, verl's `ray_kwargs.ray_init.address`); else "local", a
new Ray of the process's own.
"""

from __future__ import annotations

import os


def ray_init_address(named: str | None = None) -> str:
    """The `address` for `ray.init`: `named`, else `RAY_ADDRESS`, else "local" (never the last `ray start`'s)."""
    return named or os.environ.get("RAY_ADDRESS") or "local"


def joins_a_cluster(named: str | None = None) -> bool:
    """Whether `ray.init(address=ray_init_address(named))` joins a running cluster (which refuses `num_cpus`)."""
    return ray_init_address(named) != "local"


__all__ = ["joins_a_cluster", "ray_init_address"]

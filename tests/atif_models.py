"""Harbor's ATIF models (pydantic, `harbor.models.trajectories`), read from the pinned harbor 0.26.0 wheel that
`bash .ci/prerequisites` downloads and checks: harbor needs Python >= 3.12 to install, its models import on 3.11."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

WHEEL = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "lightning-otel/wheels/harbor-0.26.0-py3-none-any.whl"
)


def harbor_trajectory_model() -> Any:
    """`harbor.models.trajectories.Trajectory`; a missing wheel is an error that says how to get it (never a skip)."""
    if not WHEEL.is_file():
        raise RuntimeError(f"no {WHEEL}: run `bash .ci/prerequisites` (it downloads Harbor's pinned wheel)")
    if str(WHEEL) not in sys.path:
        sys.path.append(str(WHEEL))  # a wheel is a zip: its packages import from it
    from harbor.models.trajectories import Trajectory

    return Trajectory


def validate(trajectory: dict[str, Any]) -> None:
    """Raise pydantic's ValidationError when `trajectory` is not valid ATIF by Harbor's own models."""
    harbor_trajectory_model().model_validate(trajectory)

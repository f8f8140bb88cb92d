"""Shared test setup: no exporter, no network (LiteLLM's model cost map stays local)."""

from __future__ import annotations

import os

os.environ.setdefault("OTEL_TRACES_EXPORTER", "none")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# Lanes with their own environments (nox) live beside the main suite; the main run does not collect them.
LANES = ["jaeger_lane", "frameworks", "verl_lane", "browser_lane", "phoenix_lane"]
collect_ignore = [] if os.environ.get("AGL_LANE") else LANES

"""Kept for imports of the earlier path: the trackers are the training loop's (`training.loop.metrics`)."""

from lightning_otel.training.loop.metrics import CONSOLE_KEYS, MetricsLog

__all__ = ["CONSOLE_KEYS", "MetricsLog"]

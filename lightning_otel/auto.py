"""`import lightning_otel.auto` as the agent's first import: instrument every supported library installed.

Configured by the standard `OTEL_*` variables and `AGL_TOKEN_IDS` / `AGL_TOKEN_ID_ENDPOINTS`; see
`lightning_otel.instrument` for the explicit form. Spans still queued are flushed at interpreter exit.
"""

from __future__ import annotations

import atexit

from lightning_otel.capture.setup import flush, instrument

instrumentation = instrument()
if instrumentation.tracer_provider is not None and instrumentation.owns_provider:
    atexit.register(flush)

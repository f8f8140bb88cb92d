"""Capture settings read on the hot path: message-content mode and which endpoints are asked for token ids.

Values come from `instrument(...)` arguments first, then environment variables:

- `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`: `true`/`false` or
  `NO_CONTENT` | `SPAN_ONLY` | `EVENT_ONLY` | `SPAN_AND_EVENT`.
- `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`: the latest GenAI conventions (`capture.conventions`);
  with it, content `true` records the operation-details event too.
- `AGL_TOKEN_IDS=1`: request token ids from every endpoint.
- `AGL_TOKEN_ID_ENDPOINTS=<regex>`: request token ids from endpoints whose URL matches (`re.search`).

The trainer and the policy gateway register their own endpoints with `register_trainable_endpoint`.
"""

from __future__ import annotations

import enum
import os
import re
import threading
from collections.abc import Iterable, Mapping

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
TOKEN_IDS_ENV = "AGL_TOKEN_IDS"
SEMCONV_OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
LATEST_GENAI = "gen_ai_latest_experimental"
TOKEN_ID_ENDPOINTS_ENV = "AGL_TOKEN_ID_ENDPOINTS"

_TRUTHY = {"1", "true", "yes", "on"}


class ContentCapture(enum.Enum):
    NO_CONTENT = "NO_CONTENT"
    SPAN_ONLY = "SPAN_ONLY"
    EVENT_ONLY = "EVENT_ONLY"
    SPAN_AND_EVENT = "SPAN_AND_EVENT"

    @property
    def on_span(self) -> bool:
        return self in (ContentCapture.SPAN_ONLY, ContentCapture.SPAN_AND_EVENT)

    @property
    def as_event(self) -> bool:
        return self in (ContentCapture.EVENT_ONLY, ContentCapture.SPAN_AND_EVENT)

    @property
    def enabled(self) -> bool:
        return self is not ContentCapture.NO_CONTENT


def parse_content_capture(value: bool | str | ContentCapture | None) -> ContentCapture:
    """Accept what users write: booleans, `true/false`, or the GenAI mode names (any case)."""
    if isinstance(value, ContentCapture):
        return value
    if value is None:
        return ContentCapture.NO_CONTENT
    if isinstance(value, bool):
        return ContentCapture.SPAN_ONLY if value else ContentCapture.NO_CONTENT
    text = value.strip()
    if text.lower() in _TRUTHY:
        return ContentCapture.SPAN_ONLY
    if text.lower() in {"", "0", "false", "no", "off"}:
        return ContentCapture.NO_CONTENT
    try:
        return ContentCapture(text.upper())
    except ValueError:
        choices = ", ".join(mode.value for mode in ContentCapture)
        raise ValueError(f"{CAPTURE_CONTENT_ENV}={value!r} is not one of true, false, {choices}") from None


def latest_genai(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the user opted in to the latest GenAI conventions (`capture.conventions`): `LATEST_GENAI` in the
    comma-separated `OTEL_SEMCONV_STABILITY_OPT_IN`, as the conventions define the switch."""
    return LATEST_GENAI in {value.strip() for value in environ.get(SEMCONV_OPT_IN_ENV, "").split(",")}


def _names_a_mode(value: bool | str | ContentCapture | None) -> bool:
    """Whether the user named a mode (SPAN_ONLY, ...) rather than just turning content on."""
    return isinstance(value, ContentCapture) or (
        isinstance(value, str) and value.strip().upper() in ContentCapture.__members__
    )


class CaptureSettings:
    """Process-wide capture settings; reads are lock-free, decisions per endpoint are cached."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.content = ContentCapture.NO_CONTENT
        self._all_endpoints = False
        self._endpoint_pattern: re.Pattern[str] | None = None
        self._registered: tuple[str, ...] = ()
        self._decisions: dict[str, bool] = {}
        self.configured = False
        self.latest_genai = False  # OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental (`capture.conventions`)

    def configure_from_environment_once(self) -> None:
        """For instrumentors loaded by `opentelemetry-instrument`, where `instrument()` never runs."""
        if not self.configured:
            self.configure()

    def configure(
        self,
        *,
        capture_content: bool | str | ContentCapture | None = None,
        token_ids: bool | None = None,
        token_id_endpoints: str | None = None,
    ) -> None:
        if capture_content is None:
            capture_content = os.environ.get(CAPTURE_CONTENT_ENV)
        if token_ids is None:
            token_ids = os.environ.get(TOKEN_IDS_ENV, "").strip().lower() in _TRUTHY
        if token_id_endpoints is None:
            token_id_endpoints = os.environ.get(TOKEN_ID_ENDPOINTS_ENV) or None
        latest = latest_genai()
        with self._lock:
            self.latest_genai = latest
            self.content = parse_content_capture(capture_content)
            if latest and self.content is ContentCapture.SPAN_ONLY and not _names_a_mode(capture_content):
                self.content = ContentCapture.SPAN_AND_EVENT  # the operation-details event is recommended now
            self._all_endpoints = bool(token_ids)
            self._endpoint_pattern = re.compile(token_id_endpoints) if token_id_endpoints else None
            self._decisions = {}
            self.configured = True

    def register_trainable_endpoint(self, url_prefix: str) -> None:
        with self._lock:
            if url_prefix not in self._registered:
                self._registered = (*self._registered, url_prefix.rstrip("/"))
            self._decisions = {}

    def unregister_trainable_endpoint(self, url_prefix: str) -> None:
        with self._lock:
            self._registered = tuple(p for p in self._registered if p != url_prefix.rstrip("/"))
            self._decisions = {}

    @property
    def registered_endpoints(self) -> tuple[str, ...]:
        return self._registered

    def wants_token_ids(self, url: str) -> bool:
        """Should a request to `url` ask the server for token ids? Cached: called on every LLM call."""
        decision = self._decisions.get(url)
        if decision is None:
            decision = (
                self._all_endpoints
                or any(url.startswith(prefix) for prefix in self._registered)
                or (self._endpoint_pattern is not None and self._endpoint_pattern.search(url) is not None)
            )
            if len(self._decisions) > 4096:  # URLs with ids in their path must not grow this forever
                self._decisions = {}
            self._decisions[url] = decision
        return decision


settings = CaptureSettings()


def register_trainable_endpoint(url_prefix: str) -> None:
    """Ask for token ids from every endpoint whose URL starts with `url_prefix` (trainer/gateway use this)."""
    settings.register_trainable_endpoint(url_prefix)


def unregister_trainable_endpoint(url_prefix: str) -> None:
    settings.unregister_trainable_endpoint(url_prefix)


def trainable_endpoints() -> Iterable[str]:
    return settings.registered_endpoints

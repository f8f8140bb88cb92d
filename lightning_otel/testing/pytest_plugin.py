"""pytest fixtures for testing agents: `openai_test_server` and `agl_spans`.

    def test_my_agent(openai_test_server, agl_spans):
        openai_test_server.set_replies(["SELECT 1;"])
        run_my_agent(base_url=openai_test_server.base_url)
        (llm,) = agl_spans.llm_spans()
        assert llm.attributes["agl.llm.response_token_ids"]

`agl_spans` instruments the process once (no exporter unless the environment names one) and asks the test
server for token ids; each test starts with an empty capture.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from lightning_otel.testing import OpenAITestServer, SpanCapture


@pytest.fixture(scope="session")
def _agl_session_server() -> Iterator[OpenAITestServer]:
    from lightning_otel.testing.server import OpenAITestServer

    with OpenAITestServer() as server:
        yield server


@pytest.fixture
def openai_test_server(_agl_session_server: OpenAITestServer) -> Iterator[OpenAITestServer]:
    """The session's OpenAI-compatible test server, reset (echo replies, no recorded requests) for this test."""
    from lightning_otel.capture.settings import register_trainable_endpoint

    _agl_session_server.reset()
    register_trainable_endpoint(_agl_session_server.base_url)
    yield _agl_session_server
    _agl_session_server.reset()


@pytest.fixture(scope="session")
def _agl_session_capture() -> SpanCapture:
    from lightning_otel.capture.setup import add_span_processor, instrument
    from lightning_otel.testing.span_capture import SpanCapture

    os.environ.setdefault("OTEL_TRACES_EXPORTER", "none")
    instrument()
    capture = SpanCapture()
    add_span_processor(capture)
    return capture


@pytest.fixture
def agl_spans(_agl_session_capture: SpanCapture) -> Iterator[SpanCapture]:
    """Every span ended during the test (instrumented with lightning_otel), in end order."""
    _agl_session_capture.clear()
    yield _agl_session_capture
    _agl_session_capture.clear()

"""The three ways in, each in a real child process exporting OTLP to a loopback receiver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

import lightning_otel
from lightning_otel import semconv
from tests.otlp_receiver import OTLPReceiver

PROGRAMS = Path(__file__).parent / "programs"
BIN = Path(sys.executable).parent


@pytest.fixture
def receiver():
    with OTLPReceiver() as otlp:
        yield otlp


def run(command, openai_test_server, **env):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGL_"))}
    environment.update(AGENT_LLM_URL=openai_test_server.base_url, LITELLM_LOCAL_MODEL_COST_MAP="True", **env)
    result = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def wait_for_llm_spans(receiver, count=1, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = [s for s in receiver.spans if s["attributes"].get(semconv.GEN_AI_OPERATION_NAME) == "chat"]
        if len(spans) >= count:
            return spans
        time.sleep(0.05)
    raise AssertionError(f"no LLM span arrived; got {receiver.spans}")


def test_lightning_otel_run_traces_an_unmodified_program(receiver, openai_test_server):
    result = run(
        [
            str(BIN / "lightning-otel-run"),
            "--service-name",
            "plain-agent",
            "--token-ids",
            "--",
            sys.executable,
            str(PROGRAMS / "plain_agent.py"),
        ],
        openai_test_server,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
    )
    assert result.stdout.strip() == "You said: hello"
    (span,) = wait_for_llm_spans(receiver)
    tokenizer = openai_test_server.tokenizer
    assert span["resource"]["service.name"] == "plain-agent"
    assert span["attributes"][semconv.AGL_PROMPT_TOKEN_IDS] == tokenizer.encode_chat(
        [{"role": "user", "content": "hello"}]
    )
    assert span["attributes"][semconv.AGL_TOKEN_IDS_COMPLETE] is True


def test_opentelemetry_instrument_finds_our_instrumentors(receiver, openai_test_server):
    run(
        [str(BIN / "opentelemetry-instrument"), sys.executable, str(PROGRAMS / "plain_agent.py")],
        openai_test_server,
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_SERVICE_NAME="otel-instrumented",
        AGL_TOKEN_IDS="1",
    )
    (span,) = wait_for_llm_spans(receiver)
    assert span["resource"]["service.name"] == "otel-instrumented"
    assert span["attributes"][semconv.AGL_RESPONSE_TOKEN_IDS]


def test_existing_sdk_provider_is_reused(openai_test_server):
    result = run([sys.executable, str(PROGRAMS / "existing_provider.py")], openai_test_server)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["same_provider"] is True
    llm = [s for s in report["spans"] if s["name"] == "chat agl-model"]
    assert len(llm) == 1
    assert llm[0]["attributes"][semconv.AGL_ROLLOUT_ID] == "ro-existing"
    assert llm[0]["attributes"][semconv.GEN_AI_AGENT_NAME] == "writer"
    assert llm[0]["attributes"][semconv.AGL_PROMPT_TOKEN_IDS]


def test_sdk_disabled_patches_nothing(receiver, openai_test_server):
    result = run(
        [sys.executable, str(PROGRAMS / "sdk_disabled.py")],
        openai_test_server,
        OTEL_SDK_DISABLED="true",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
    )
    assert json.loads(result.stdout.strip()) == {"patched": False, "content": "You said: hi"}
    time.sleep(0.2)
    assert receiver.spans == []


def test_explicit_grpc_protocol_is_accepted(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    from lightning_otel.capture.setup import build_exporter

    exporter = build_exporter("http://127.0.0.1:4317", "grpc")
    assert isinstance(exporter, OTLPSpanExporter)
    with pytest.raises(ValueError, match="not supported"):
        build_exporter(None, "http/json")


def test_uninstrument_removes_spans_and_instrument_restores_them(openai_test_server, agl_spans):
    client = openai.OpenAI(base_url=openai_test_server.base_url, api_key="t", max_retries=0)
    lightning_otel.uninstrument()
    try:
        with lightning_otel.rollout_context("ro-u"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            with lightning_otel.get_tracer().start_as_current_span("plain"):
                pass
        assert agl_spans.llm_spans() == []
        assert semconv.AGL_ROLLOUT_ID not in (agl_spans.named("plain")[0].attributes or {})
    finally:
        lightning_otel.instrument()
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert len(agl_spans.llm_spans()) == 1


def test_instrumentor_selection_skips_a_framework_whose_parent_package_is_missing() -> None:
    from lightning_otel.capture.instrumentor_registry import _installed, selected_names

    assert _installed("no_such_namespace_pkg.adk") is False  # find_spec would raise ModuleNotFoundError here
    assert "openai" in selected_names(None) and "google_adk" not in selected_names(None)


def test_uninstrument_leaves_no_attribute_of_other_libraries_changed():
    """openai, litellm, httpx, requests and OpenTelemetry (SDK, API, exporters): every module and class attribute is
    the same object after instrument() + real calls + uninstrument() as before (a fresh process)."""
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, str(PROGRAMS / "patch_footprint.py")], capture_output=True, text=True, timeout=180, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "", f"changed and not restored:\n{done.stdout}"


@pytest.fixture
def their_receiver():
    with OTLPReceiver() as otlp:
        yield otlp


def test_a_provider_installed_first_gets_our_exporter_where_an_endpoint_is_set(
    receiver, their_receiver, openai_test_server
):
    """agentops-style: their provider and exporter first, then `import lightning_otel.auto` with
    OTEL_EXPORTER_OTLP_ENDPOINT set: our collector gets the spans, and so does theirs."""
    run(
        [sys.executable, str(PROGRAMS / "agentops_style_provider.py")],
        openai_test_server,
        THEIR_ENDPOINT=their_receiver.endpoint + "/v1/traces",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
    )
    (ours,) = wait_for_llm_spans(receiver)
    (theirs,) = wait_for_llm_spans(their_receiver)
    assert ours["attributes"][semconv.AGL_ROLLOUT_ID] == theirs["attributes"][semconv.AGL_ROLLOUT_ID] == "ro-agentops"


def test_a_provider_already_exporting_to_the_endpoint_is_not_given_a_second_exporter(receiver, openai_test_server):
    run(
        [sys.executable, str(PROGRAMS / "agentops_style_provider.py")],
        openai_test_server,
        THEIR_ENDPOINT=receiver.endpoint + "/v1/traces",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
    )
    wait_for_llm_spans(receiver)
    time.sleep(0.5)
    assert len([s for s in receiver.spans if s["attributes"].get(semconv.GEN_AI_OPERATION_NAME) == "chat"]) == 1


def test_a_provider_installed_first_without_an_endpoint_is_warned_about(their_receiver, openai_test_server):
    program = PROGRAMS / "existing_provider.py"  # an in-memory exporter only: nothing would reach a collector
    result = run([sys.executable, str(program)], openai_test_server)
    assert "was installed before lightning_otel and it has no OTLP exporter" in result.stderr
    result = run(
        [sys.executable, str(PROGRAMS / "agentops_style_provider.py")],
        openai_test_server,
        THEIR_ENDPOINT=their_receiver.endpoint + "/v1/traces",
    )
    assert "installed before lightning_otel" not in result.stderr  # it exports over OTLP: no warning
    wait_for_llm_spans(their_receiver)

"""Extra environments whose pins conflict with the main one (run: `.venv/bin/nox`).

- `openai3`: the capture tests against openai 3.x (the main environment has openai 2.x, which LiteLLM pins).
- `jaeger_client`: an independent Jaeger API client from PyPI (jaeger-mcp) reads traces from the collector.
- `openai_agents`, `langgraph`, `autogen`, `crewai`: framework lanes (tests/frameworks/...), each with its
  framework's own pins.
- `browser`: the collector's rollout view (/ui) in headless Debian Chromium, driven by Playwright.
- `phoenix`: Arize Phoenix receives what `agl-otel-collector --forward-otlp` forwards from a demo run.
- `verl`: verl 0.9.1 on CPU torch, with Google ADK in the same environment (the ADK example trains there; ADK's
  OpenTelemetry <= 1.44 suits verl too), so the Google ADK framework tests run in it as well. The agent-service
  example trains here against its service running in the `openai_agents` environment (run that session first).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
# uv installs without compiling bytecode, and where PYTHONDONTWRITEBYTECODE is set (this project's CI machines) no
# process ever caches it: each one that imports torch, transformers and verl compiled them again, ~8 s of CPU (13 s
# against 4.4 s with bytecode), and the verl lane starts dozens (Ray workers, runners, examples). Compiling once at
# install costs ~70 s there.
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")
nox.options.sessions = [
    "openai3",
    "jaeger_client",
    "openai_agents",
    "langgraph",
    "autogen",
    "crewai",
    "browser",
    "phoenix",
    "verl",
]
nox.options.reuse_existing_virtualenvs = True

TEST_TOOLS = (
    "pytest>=8",
    "pytest-asyncio>=0.24",
    "fastapi>=0.110",
    "requests>=2.31",
    "opentelemetry-distro>=0.48b0",
)
# two test files at a time (-n 2 --dist loadfile) in the lanes long enough to gain from it: openai3, verl
PARALLEL = "pytest-xdist>=3.6"


# main-suite files that never build an OpenAI client (the runtime's own machinery: it is what the openai 3 lane tests
# through the capture, gateway and agent files above them, with the client's 3.x types); tests/test_lanes.py checks
# that each still exists and names no `openai`
NO_OPENAI_CLIENT = (
    "test_batch_export", "test_batch_wait", "test_cli_reference", "test_cli_rollout_limits", "test_demo_and_example",
    "test_harness_calls", "test_otlp_http_transport", "test_output", "test_restart_budget", "test_reward",
    "test_run_follower", "test_runner_environment", "test_runner_reporting", "test_service_context", "test_tracer",
)  # fmt: skip


@nox.session
def openai3(session: nox.Session) -> None:
    # trainer: the demo and runtime tests; rewards: the package face offers RewardModelClient (httpx, tenacity);
    # anthropic: the gateway's Messages dialect, tested beside the Responses dialect on openai 3
    session.install("-e", ".[testing,trainer,rewards,anthropic]", "openai>=3,<4", *TEST_TOOLS, PARALLEL)
    session.run("python", "-c", "import openai; assert openai.__version__.startswith('3.'), openai.__version__")
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        "-n",  # two test files at a time, as the main suite
        "2",
        "--dist",
        "loadfile",
        "tests",
        "--ignore=tests/test_packaging.py",
        "--ignore=tests/collector",  # the collector does not use the openai client
        "--ignore=tests/rewards",  # reward models need torch and TRL (the main environment has them)
        "--ignore=tests/tinker",  # the Tinker backend needs torch, peft and the tinker SDK (main environment)
        "--ignore=tests/models",  # SmolLM2: torch, transformers, gguf and the Tinker backend (main environment)
        # no openai client in these: the command line's input errors, the docs, the code's shape
        "--ignore=tests/test_cli_input_errors.py",
        "--ignore=tests/test_docs.py",
        "--ignore=tests/test_doc_blocks.py",  # the pages' blocks run in README command 1's environment (the main one)
        "--ignore=tests/test_style.py",
        "--ignore=tests/test_layout.py",
        "--ignore=tests/test_examples_public_api.py",
        "--ignore=tests/test_readme.py",
        "--ignore=tests/test_benchmark_quick_modes.py",  # the benchmarks run in the main environment
        "--ignore=tests/test_benchmark_quick_modes_of_speed.py",
        # the loop's and the examples' own logic, the span encoder, the adapter, the task files: no openai client of
        # their own (the runtime's tests run the loop's agents against openai 3.x)
        "--ignore=tests/training",
        "--ignore=tests/examples",
        "--ignore=tests/test_otlp_encoding.py",
        "--ignore=tests/test_trace_adapter.py",
        "--ignore=tests/test_task_files.py",
        "--ignore=tests/test_rollout_timing.py",
        "--ignore=tests/test_tiny_policy.py",
        "--ignore=tests/test_ray_runner_options.py",
        "--ignore=tests/test_agent_lightning_spellings.py",  # the agl command and an example's flags
        "--ignore=tests/test_export.py",  # stores to datasets (pyarrow, datasets: the main environment)
        "--ignore=tests/test_atif.py",  # trajectories in and out of stores (re-tokenizing needs transformers)
        "--ignore=tests/harnesses",  # Claude Code, Codex, TypeScript: their training runs VERL (the main environment)
        # the front door's runs train (torch, peft, transformers: the main environment)
        "--ignore=tests/test_train_front_door.py",
        "--ignore=tests/test_train_resume_and_levers.py",
        "--ignore=tests/runs",
        # no openai client in these either: the runtime's queue, runners and spans, the exporter's transport
        *(f"--ignore=tests/{name}.py" for name in NO_OPENAI_CLIENT),
        "--ignore=tests/test_litellm.py",  # LiteLLM pins openai < 3: not installed here
        *session.posargs,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )


@nox.session
def jaeger_client(session: nox.Session) -> None:
    session.install("-e", ".[collector]", "jaeger-mcp>=0.6", "pytest>=8", "pytest-asyncio>=0.24")
    session.run("python", "-m", "pytest", "-q", "tests/jaeger_lane", *session.posargs, env={"AGL_LANE": "jaeger"})


@nox.session
def openai_agents(session: nox.Session) -> None:
    """OpenAI Agents SDK lane: it needs openai >= 3 (LiteLLM, in the main environment, pins openai < 3)."""
    session.install("-e", ".[testing,openai-agents,rewards]", *TEST_TOOLS)  # rewards: the agent_grpo example's agent
    session.run(
        "python", "-m", "pytest", "-q", "tests/frameworks/openai_agents", *session.posargs, env={"AGL_LANE": "agents"}
    )


@nox.session
def langgraph(session: nox.Session) -> None:
    """LangGraph + LangChain lane: a hand-built SQL graph and a langgraph-supervisor team with named agents; the team's
    rollout through a runner into a store and round-tripped through ATIF (the trainer extra: runner, collector)."""
    session.install("-e", ".[testing,langchain,trainer]", "langchain>=1.0", "langgraph-supervisor>=0.0.30",
                    *TEST_TOOLS)  # fmt: skip
    session.run("python", "-m", "pytest", "-q", "tests/frameworks/langgraph", *session.posargs, env={"AGL_LANE": "lg"})


@nox.session
def autogen(session: nox.Session) -> None:
    """AutoGen agentchat lane: a round-robin team and a Swarm with handoffs and a tool."""
    session.install("-e", ".[testing,autogen]", *TEST_TOOLS)
    session.run("python", "-m", "pytest", "-q", "tests/frameworks/autogen", *session.posargs, env={"AGL_LANE": "ag"})


@nox.session
def crewai(session: nox.Session) -> None:
    """CrewAI lane (openai < 3, OpenTelemetry >= 1.45.1): native provider and LiteLLM path, a tool-using agent, and
    the Tinker example's twenty-questions flow (its dry run through Trainer.dev: the trainer extra)."""
    session.install("-e", ".[testing,crewai,litellm,trainer]", *TEST_TOOLS)
    env = {"AGL_LANE": "crewai", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    session.run("python", "-m", "pytest", "-q", "tests/frameworks/crewai", *session.posargs, env=env)


@nox.session
def browser(session: nox.Session) -> None:
    """The rollout view in a real browser: Playwright from PyPI drives the system's Chromium (`apt-get install
    chromium`; Playwright's own browser download is never used) over a recorded training run."""
    session.install("-e", ".[testing,trainer,openai]", "playwright>=1.45", *TEST_TOOLS)
    env = {"AGL_LANE": "browser", "AGL_SCREENSHOT_DIR": os.environ.get("AGL_SCREENSHOT_DIR", "")}
    session.run("python", "-m", "pytest", "-q", "tests/browser_lane", *session.posargs, env=env)


@nox.session
def phoenix(session: nox.Session) -> None:
    """Arize Phoenix (offline, telemetry off) as a real trace UI behind `--forward-otlp`."""
    session.install("-e", ".[testing,trainer,openai]", "arize-phoenix>=12", *TEST_TOOLS)
    env = {"AGL_LANE": "phoenix", "PHOENIX_TELEMETRY_ENABLED": "false"}
    session.run("python", "-m", "pytest", "-q", "tests/phoenix_lane", *session.posargs, env=env)


@nox.session
def verl(session: nox.Session) -> None:
    """verl 0.9.1 lane on CPU torch: batch construction against verl's real DataProto and GRPO code; the CPU policy
    replica behind the gateway; GRPO steps end to end (our CPU backend, the LangGraph SQL agent in runners); the
    examples (spider, google_adk) as their READMEs run them; and the Google ADK framework tests (one environment with
    ADK, LiteLLM, the trainer and VERL: what `pip install ".[adk,demo]" -c constraints-adk.txt` gives a user)."""
    # A CPU torch wheel where the machine has one (this project's machines keep it in /opt/wheels); else PyPI's.
    wheels = os.environ.get("AGL_TORCH_FIND_LINKS", "/opt/wheels")
    find_links = ["--find-links", wheels] if os.path.isdir(wheels) else []
    torch = "torch==2.13.0+cpu" if find_links else "torch"
    # From a built wheel, not the checkout: proves that a normal install trains on CPU (the CPU backend, the demo).
    # Not session.create_tmp(): it sets TMPDIR for the session, and Ray's socket paths under .nox/ grow too long.
    wheel_dir = tempfile.mkdtemp(prefix="agl-verl-lane-")
    session.run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", wheel_dir, ".", external=True)
    (wheel,) = Path(wheel_dir).glob("lightning_otel-*.whl")
    # the same version as a reused environment's: replace it all the same
    fresh = ["--reinstall-package", "lightning-otel"] if session.venv_backend == "uv" else ["--force-reinstall"]
    constraints = ["-c", "constraints-adk.txt"]  # ADK's OpenTelemetry 1.44 with verl's tree
    # two test files at a time: a VERL run leaves a core idle a third of the time
    session.install(
        *fresh, *find_links, torch, f"{wheel}[demo,langchain,adk,rewards,models]", *constraints, *TEST_TOOLS, PARALLEL
    )
    # Run from a copy of the tests and examples, away from the checkout's `lightning_otel/` folder, which would
    # shadow the installed package (the current directory comes first on sys.path).
    lane = Path(wheel_dir) / "lane"
    shutil.rmtree(lane, ignore_errors=True)
    for part in ("tests", "examples", "benchmarks"):
        outputs = shutil.ignore_patterns("__pycache__", "runs", "data")  # not run outputs
        shutil.copytree(part, lane / part, ignore=outputs)
    shutil.copy("pyproject.toml", lane)  # pytest's settings
    session.chdir(lane)
    check = (
        "import lightning_otel, sys; sys.exit(0 if '/site-packages/' in lightning_otel.__file__ "
        "else 'lightning_otel is not the installed wheel: ' + lightning_otel.__file__)"
    )
    session.run("python", "-c", check)
    lanes = ["tests/verl_lane", "tests/frameworks/google_adk"]
    env = {"AGL_LANE": "verl"}  # LITELLM_LOCAL_MODEL_COST_MAP left as CI has it: the runners and examples set it
    # examples/agent_service runs its service in another environment (openai 3.x): the openai_agents session's,
    # which runs before this one
    env["AGL_SERVICE_PYTHON"] = str(Path(session.virtualenv.location).parent / "openai_agents" / "bin" / "python")
    # each file on one worker: its module fixtures (data, a trained reward model, a GRPO run) are built once
    session.run("python", "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", *lanes, *session.posargs, env=env)

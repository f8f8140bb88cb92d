"""The rooms of `lightning_otel` import each other only in the directions the layout map (docs/architecture.md)
allows, with no cycle between modules (lazy imports inside functions count too, and so does a module named by a
string to `importlib.import_module`/`__import__`), every module of the tree is on the map, and an agent process
loads only capture. `training/` is seven rooms (loop, verl, tinker, sft, dpo, apo, reward_model), each with its own
row."""

from __future__ import annotations

import ast
import graphlib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = {
    "lightning_otel": ROOT / "lightning_otel",
    "lightning_otel.instrumentors": ROOT / "instrumentors",
    "lightning_otel.collector": ROOT / "collector",
}

# The wire contract, and the one TLS context our HTTP clients share: every room may import them; they import
# nothing of ours.
CONTRACT = {
    "lightning_otel.semconv",
    "lightning_otel.flat_span",
    "lightning_otel.version",
    "lightning_otel.tls_context",
}
COLLECTOR_CLIENT = {
    "lightning_otel.collector.client",
    "lightning_otel.collector.client_calls",
    "lightning_otel.collector.queue_schema",
}
# how every HTTP server of ours listens (TCP_NODELAY): the collector's, and serving's apps
TCP_LISTENER = "lightning_otel.collector.tcp_listener"
# the collector's sub-rooms (its folders); its top-level modules that every sub-room may import: bearer tokens,
# request bodies, query parameters and error envelopes, the queue's schema, the TCP listener
COLLECTOR_ROOMS = ("receiving", "stores", "queue", "reads")
COLLECTOR_SHARED = {
    "lightning_otel.collector.auth",
    "lightning_otel.collector.declared_bodies",
    "lightning_otel.collector.query_params",
    "lightning_otel.collector.queue_schema",
    TCP_LISTENER,
}

# room -> the rooms (or single modules) it may import besides itself and the contract: docs/architecture.md.
ALLOWED: dict[str, set[str]] = {
    # capture loads the instrumentors by name (the registry's one edge, below), and imports nothing else
    "capture": set(),
    "instrumentors": {"capture"},
    "adapters": set(),
    # the collector's entry points (server, cli, client) and the pieces every sub-room shares (COLLECTOR_SHARED); the
    # server wires the sub-rooms together
    "collector": {"collector.receiving", "collector.stores", "collector.queue", "collector.reads"},
    # receiving: OTLP over HTTP and gRPC, decoding, ingest; it writes to a store
    "collector.receiving": {*COLLECTOR_SHARED, "collector.stores"},
    # stores: the span record, the store interface, SQLite, PostgreSQL, their SQL: nothing of receiving's
    "collector.stores": {*COLLECTOR_SHARED},
    # the queue: rollouts, attempts, runs and leases in a store's transactions, and its HTTP API
    "collector.queue": {*COLLECTOR_SHARED, "collector.stores"},
    # reads and views: the query APIs and the rollout view (/ui), which explains samples with the adapter's own
    # decisions (the adapter imports only the contract)
    "collector.reads": {
        *COLLECTOR_SHARED,
        "collector.stores",
        "collector.receiving",
        "collector.queue",
        "lightning_otel.adapters.triplets",
        "lightning_otel.adapters.llm_calls",
        "lightning_otel.adapters.credit",
        "lightning_otel.adapters.recorded_settings",
    },
    # the agent author's API: LitAgent, @rollout, resources, HttpAgent (its calls are traced)
    "agent_api": {"capture"},
    # what loads in a runner process: the agent's API, capture, the collector's client; never the trainer's side
    "runner": {"capture", "agent_api", *COLLECTOR_CLIENT},
    # the trainer's orchestration: the collector (the client, and Trainer embeds one when given no URL), the runners
    # it starts, serving (Trainer.dev(gateway=True))
    "runtime": {"capture", "adapters", "collector", "serving", "agent_api", "runner"},
    "serving": {"capture", *COLLECTOR_CLIENT, TCP_LISTENER},
    "training": set(),  # the package's docstring only
    # the loop: samples from the runtime's batches, the gateway in front of a backend's replicas
    "training.loop": {"runtime", "serving", "adapters", "agent_api"},
    # verl's backend: the loop; the CPU replica (serving); the tested-versions table for verl's internals
    "training.verl": {"training.loop", "runtime", "serving", "lightning_otel.capture.tested_versions"},
    "training.tinker": {"training.loop", "runtime", "serving", "adapters"},
    "training.sft": {"training.loop", "runtime", "adapters", "training.trl_device"},
    "training.reward_model": {"rewards", "training.trl_device"},
    # TRL's settings for the device: shared by the rooms that train with TRL, importing nothing
    "training.trl_device": set(),
    # APO: candidates run through the run's queue (runtime), conversations read from the spans (adapters)
    "training.apo": {"runtime", "adapters", "agent_api"},
    # DPO: the loop, a CPU replica (serving), pairs by the export's rule, TRL's internals version-gated
    "training.dpo": {
        "training.loop",
        "runtime",
        "serving",
        "export",
        "training.trl_device",
        "lightning_otel.capture.tested_versions",
    },
    # traces to datasets: rollouts read through the collector (its client; an embedded one over a store), adapted;
    # an ATIF import re-tokenizes with a model's chat template when asked (a model by name, the chat tokenizer)
    "export": {"adapters", "collector", "models", "lightning_otel.serving.sampler_api"},
    # test support; `model_or_tiny` resolves a model by name (models) or builds the tiny one
    # test support shared with the benchmarks; the agents runner processes import in tests (agent_api); spans built
    # for the collector's tests decoded as the collector decodes them
    "testing": {"capture", "serving", "models", "agent_api", "lightning_otel.collector.receiving.otlp_decoding"},
    # reward models: scorer, service, client, scoring helpers (agent side: capture only); the service checks bearer
    # tokens with the collector's one rule
    "rewards": {"capture", "lightning_otel.collector.auth", "lightning_otel.collector.declared_bodies"},
    "auto": {"capture"},
    # real models by name (SmolLM2 from its wheel): nothing else of ours
    "models": set(),
    "_bootstrap": {"auto"},
    # a training run from the command line: settings, backends, its folder, the model it exports, its verdict
    "runs": {
        "training.loop",
        "training.verl",
        "training.tinker",
        "training.sft",
        "training.dpo",
        "export",
        "runtime",
        "serving",
        "agent_api",
        "testing",
        "models",
        "collector",
    },
    "cli": {"*"},
}
# Modules loaded by name at run time (a plugin registry), written in the map: source -> the room it loads from.
# These edges are allowed and left out of the cycle check (the loaded modules import their registry back).
BY_NAME: dict[str, str] = {"lightning_otel.capture.instrumentor_registry": "instrumentors"}
TRAINING_ROOMS = ("loop", "verl", "tinker", "sft", "dpo", "apo", "reward_model")


def module_files() -> dict[str, Path]:
    modules = {}
    for package, folder in SOURCE_ROOTS.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            if package == "lightning_otel" and parts[:1] in (["instrumentors"], ["collector"]):
                continue
            modules[name] = path
    return modules


def _named_module(node: ast.AST) -> str | None:
    """The module a call `importlib.import_module("...")` / `import_module(...)` / `__import__("...")` names: a
    string literal, or an f-string's constant head (`f"lightning_otel.instrumentors.{name}"` names the package)."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if called not in ("import_module", "__import__"):
        return None
    argument = node.args[0]
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    if isinstance(argument, ast.JoinedStr) and argument.values and isinstance(argument.values[0], ast.Constant):
        return str(argument.values[0].value).rstrip(".") or None
    return None


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Our modules that `name` imports anywhere in its file (module level, functions, TYPE_CHECKING blocks, and
    modules named to `importlib.import_module`/`__import__`)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (named := _named_module(node)) is not None:
            targets = [named]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` names a.b.c; an attribute names its module
                target = target.rpartition(".")[0]
            if target.startswith("lightning_otel") and target != name:
                found.add(target)
    return found


def room_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "training":
        return f"training.{parts[2]}"  # training's rooms: loop, verl, tinker, sft, reward_model
    if len(parts) > 2 and parts[1] == "collector" and parts[2] in COLLECTOR_ROOMS:
        return f"collector.{parts[2]}"  # the collector's sub-rooms
    return parts[1] if len(parts) > 1 else "face"


def allowed(source: str, target: str) -> bool:
    if target == "lightning_otel":  # the face: importing it back would tie every room to every other
        return "*" in ALLOWED.get(room_of(source), set())
    if source in CONTRACT:
        return target in CONTRACT
    if target in CONTRACT:
        return True
    source_room, target_room = room_of(source), room_of(target)
    if source_room == target_room or BY_NAME.get(source) == target_room:
        return True
    rules = ALLOWED.get(source_room, set())
    if target_room.startswith("collector.") and not source_room.startswith("collector"):
        target_room = "collector"  # from outside, the collector is one room; its sub-rooms are its own business
    return "*" in rules or target_room in rules or target in rules


def test_every_import_follows_the_layout_map():
    files = module_files()
    known = set(files)
    wrong = []
    for name, path in sorted(files.items()):
        if name == "lightning_otel":
            continue  # the face: lazy names for every room (test_the_face_still_offers_every_public_name)
        for target in sorted(imports_of(name, path, known)):
            if not allowed(name, target):
                wrong.append(f"{name} -> {target}")
    assert not wrong, "imports against the layout map:\n" + "\n".join(wrong)


def test_no_import_cycles_even_lazy_ones():
    files = module_files()
    known = set(files)
    graph = {name: imports_of(name, path, known) for name, path in files.items()}
    graph.pop("lightning_otel")  # the face names every room, lazily, by design; nothing imports it back
    for source, deps in graph.items():
        deps.discard("lightning_otel")
        if source in BY_NAME:  # a registry loading plugins by name: they import it back, by design
            deps -= {dep for dep in deps if room_of(dep) == BY_NAME[source]}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        raise AssertionError(f"import cycle: {' -> '.join(error.args[1])}") from None


def test_an_agent_process_loads_only_capture():
    code = (
        "import sys\n"
        "import lightning_otel.auto\n"
        "import lightning_otel\n"
        "lightning_otel.agent, lightning_otel.rollout_context, lightning_otel.emit_reward, lightning_otel.flush\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('lightning_otel'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"OTEL_TRACES_EXPORTER": "none", "PATH": "/usr/bin:/bin"},
    )
    loaded = done.stdout.split()
    assert "lightning_otel.capture.setup" in loaded
    rooms = {room_of(name) for name in loaded}
    assert rooms <= {"face", "auto", "capture", "instrumentors", "semconv", "version"}, sorted(loaded)


def test_a_runner_process_loads_without_the_collector_servers_libraries():
    """Runners run in the agent's environment, which may lack the collector's server extras (orjson, starlette,
    uvicorn, grpc): the runner, the runtime and the adapters must import without them."""
    code = (
        "import sys\n"
        "for name in ('orjson', 'starlette', 'uvicorn', 'grpc', 'psycopg'):\n"
        "    sys.modules[name] = None  # importing it fails\n"
        "import lightning_otel.runner.runner_process\n"
        "import lightning_otel.adapters.triplets, lightning_otel.adapters.credit\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


RUNNER_ROOMS = {"face", "agent_api", "runner", "capture", "instrumentors", "semconv", "flat_span", "version",
                "tls_context"}  # fmt: skip


def test_the_runner_room_never_imports_the_trainers_orchestration():
    """The runner is a room of its own: nothing in it imports the trainer's orchestration (`runtime`), training or
    serving, even lazily; the check itself refuses such an import."""
    files = module_files()
    known = set(files)
    runner = [name for name in files if room_of(name) == "runner"]
    assert {"lightning_otel.runner.runner", "lightning_otel.runner.runner_process"} <= set(runner)
    reached = {target for name in runner for target in imports_of(name, files[name], known)}
    assert not {room_of(target) for target in reached} & {"runtime", "training", "serving", "adapters"}, reached
    assert not allowed("lightning_otel.runner.runner", "lightning_otel.runtime.training_run")
    assert not allowed("lightning_otel.runner.runner_process", "lightning_otel.runtime.trainer")
    assert allowed("lightning_otel.runtime.runner_pool", "lightning_otel.runner.runner_process")


def test_a_runner_process_loads_only_the_runner_the_agent_api_and_capture():
    """What a runner process (the Trainer's, `lightning-otel runner`'s, a Ray actor's) loads of ours, once its
    agent is loaded and its runner built: the runner room, the agent's API, capture and the collector's client."""
    code = (
        "import sys\n"
        "from lightning_otel.agent_api.agent_loading import load_agent\n"
        "from lightning_otel.runner.runner import Runner\n"
        "from lightning_otel.runner.runner_options import RunnerOptions\n"
        "import lightning_otel.runner.runner_process\n"
        "import lightning_otel.runner.ray_actor\n"  # a Ray actor's body: in the runner's room, loading the same
        "Runner(load_agent('tests.training.agents:length_agent'), 'http://127.0.0.1:9', RunnerOptions())\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('lightning_otel'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = done.stdout.split()
    assert {"lightning_otel.runner.runner", "lightning_otel.runner.ray_actor"} <= set(loaded)
    client = {name for name in loaded if room_of(name) == "collector"}
    assert client <= {"lightning_otel.collector", *COLLECTOR_CLIENT}, client
    assert {room_of(name) for name in loaded} - {"collector"} <= RUNNER_ROOMS, sorted(loaded)


def test_a_benchmarks_agent_module_loads_no_torch_in_its_runners():
    """The benchmarks' agents (FrozenLake's, the credit and policy benchmarks') live in modules that also build the
    run's model (`testing.tiny_model.model_or_tiny`); every runner process imports that module for its agent, and
    torch only where a model is built (4-5 s of CPU a runner otherwise)."""
    code = (
        "import sys\n"
        "import benchmarks.frozen_lake, benchmarks.credit_assignment, benchmarks.policy_per_agent\n"
        "print(' '.join(name for name in ('torch', 'transformers') if name in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [], done.stdout


def test_the_face_still_offers_every_public_name():
    import lightning_otel

    for name in lightning_otel.__all__:
        assert getattr(lightning_otel, name) is not None, name


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    """The rule above can fail: an import inside a function, or a relative one, is seen and judged."""
    known = set(module_files())
    source = tmp_path / "probe.py"
    source.write_text(
        "def later():\n    from lightning_otel.runtime import trainer\n    from .tracer import get_tracer\n"
    )
    found = imports_of("lightning_otel.capture.probe", source, known)
    assert found == {"lightning_otel.runtime.trainer", "lightning_otel.capture.tracer"}
    assert not allowed("lightning_otel.capture.probe", "lightning_otel.runtime.trainer")
    assert allowed("lightning_otel.capture.probe", "lightning_otel.capture.tracer")
    assert not allowed("lightning_otel.collector.server", "lightning_otel.capture.setup")
    assert not allowed("lightning_otel.semconv", "lightning_otel.capture.setup")


def test_the_checker_sees_training_rooms_and_modules_named_by_strings(tmp_path):
    """Each training room has its own row: tinker may not reach capture or the collector client, reward models may
    not reach the runtime's trainer; a module named to importlib inside a function is an import too."""
    known = set(module_files())
    assert not allowed("lightning_otel.training.tinker.backend", "lightning_otel.capture.setup")
    assert not allowed("lightning_otel.training.tinker.backend", "lightning_otel.collector.client")
    assert not allowed("lightning_otel.training.reward_model.train", "lightning_otel.runtime.trainer")
    assert not allowed("lightning_otel.training.loop.loop", "lightning_otel.training.verl.trainer")
    assert allowed("lightning_otel.training.verl.trainer", "lightning_otel.training.loop.loop")
    source = tmp_path / "probe.py"
    source.write_text(
        "import importlib\n"
        "def later(name):\n"
        "    importlib.import_module('lightning_otel.runtime.trainer')\n"
        "    __import__('lightning_otel.collector.client')\n"
        "    importlib.import_module(f'lightning_otel.instrumentors.{name}')\n"
    )
    found = imports_of("lightning_otel.training.tinker.probe", source, known)
    assert found == {
        "lightning_otel.runtime.trainer",
        "lightning_otel.collector.client",
        "lightning_otel.instrumentors",
    }
    assert not allowed("lightning_otel.capture.probe", "lightning_otel.instrumentors.openai")
    assert allowed("lightning_otel.capture.instrumentor_registry", "lightning_otel.instrumentors.openai")


def test_the_collectors_sub_rooms_keep_to_their_rows(tmp_path):
    """A store never reaches a receiver or a query route, a receiver never reaches the queue or the reads, the queue
    never reaches the reads; the server wires them, and the reads may read them all."""
    known = set(module_files())
    source = tmp_path / "probe.py"
    source.write_text(
        "from lightning_otel.collector.receiving import http_receiver\n"
        "def later():\n    from lightning_otel.collector.reads.query_api import query_app\n"
    )
    found = imports_of("lightning_otel.collector.stores.probe", source, known)
    assert found == {"lightning_otel.collector.receiving.http_receiver", "lightning_otel.collector.reads.query_api"}
    assert not any(allowed("lightning_otel.collector.stores.probe", target) for target in found)
    assert not allowed("lightning_otel.collector.receiving.ingest", "lightning_otel.collector.queue.rollout_state")
    assert not allowed("lightning_otel.collector.queue.routes_queue", "lightning_otel.collector.reads.jaeger_json")
    assert not allowed("lightning_otel.collector.receiving.ingest", "lightning_otel.collector.server")
    assert not allowed(
        "lightning_otel.collector.stores.sqlite_store", "lightning_otel.collector.receiving.otlp_decoding"
    )
    assert allowed("lightning_otel.collector.receiving.ingest", "lightning_otel.collector.stores.span_record")
    assert allowed("lightning_otel.collector.reads.rollout_view", "lightning_otel.collector.queue.rollout_transactions")
    assert allowed("lightning_otel.collector.server", "lightning_otel.collector.receiving.http_receiver")
    assert allowed("lightning_otel.runtime.trainer", "lightning_otel.collector.stores.store")
    assert not allowed("lightning_otel.runner.runner", "lightning_otel.collector.stores.store")


LAYOUT_MAP = ROOT / "docs" / "architecture.md"  # the rooms table


def map_rows() -> dict[str, str]:
    """The layout map's rows: the room's path (`lightning_otel/capture/`, `collector/`, `.../sft.py`) -> the
    modules it names (the row's text)."""
    rows = {}
    for line in LAYOUT_MAP.read_text().splitlines():
        if line.startswith("| `"):
            room, holds = line.split("|")[1:3]
            for path in re.findall(r"`([^`]+)`", room):
                rows[path] = holds
    return rows


def row_naming(relative: Path, rows: dict[str, str]) -> str | None:
    """The map's row that names a module file: its own (`.../sft.py`), or its folder's (nearest first), which must
    list it in backticks (`name`, or `name/` for a package); a package's `__init__` is its folder's row itself."""
    if relative.as_posix() in rows:
        return relative.as_posix()
    for parent in relative.parents:
        folder = f"{parent.as_posix()}/"
        if folder not in rows:
            continue
        if relative.name == "__init__.py" and parent == relative.parent:
            return folder
        short = relative.with_suffix("").name if relative.name != "__init__.py" else relative.parent.name
        return folder if f"`{short}`" in rows[folder] or f"`{short}/`" in rows[folder] else None
    return None


def test_every_module_of_the_tree_is_on_the_layout_map():
    rows = map_rows()
    missing = [
        f"{name} ({path.relative_to(ROOT)})"
        for name, path in sorted(module_files().items())
        if row_naming(path.relative_to(ROOT), rows) is None
    ]
    assert not missing, "modules the layout map does not name (docs/architecture.md):\n" + "\n".join(missing)


def test_every_room_of_the_checker_has_its_row_on_the_map():
    """The map (docs/architecture.md) and this checker's table (ALLOWED) name the same rooms: a room added here
    without a row there, or a sub-room there the checker does not know, fails."""
    rows = map_rows()

    def row_of(room: str) -> list[str]:
        if room.startswith("collector"):
            folder = "collector/" + "".join(f"{part}/" for part in room.split(".")[1:])
        elif room == "instrumentors":
            folder = "instrumentors/"
        else:
            folder = "lightning_otel/" + room.replace(".", "/") + "/"
        return [path for path in rows if path in (folder, folder.rstrip("/") + ".py")]

    missing = [room for room in ALLOWED if not row_of(room)]
    assert not missing, f"rooms of the checker with no row on the map: {missing}"
    collector_rows = {path for path in rows if path.startswith("collector/") and path != "collector/"}
    assert collector_rows == {f"collector/{room}/" for room in COLLECTOR_ROOMS}, collector_rows


def test_modules_stay_small():
    """No module over 500 lines and at most 8 over 400: a module that grows past them is split by what it does."""
    sizes = {name: len(path.read_text().splitlines()) for name, path in module_files().items()}
    over_500 = sorted(name for name, lines in sizes.items() if lines > 500)
    over_400 = sorted(name for name, lines in sizes.items() if lines > 400)
    assert not over_500, f"modules over 500 lines: {over_500}"
    assert len(over_400) <= 8, f"{len(over_400)} modules over 400 lines (at most 8): {over_400}"

"""The rooms of `lightning_otel` import each other only in the directions the README's layout map allows, with no
cycle between modules (lazy imports inside functions count too), and an agent process loads only capture."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = {
    "lightning_otel": ROOT / "lightning_otel",
    "lightning_otel.instrumentors": ROOT / "instrumentors",
    "lightning_otel.collector": ROOT / "collector",
}

# The wire contract: every room may import it; it imports nothing of ours.
CONTRACT = {"lightning_otel.semconv", "lightning_otel.flat_span", "lightning_otel.version"}
COLLECTOR_CLIENT = {"lightning_otel.collector.client", "lightning_otel.collector.queue_schema"}
# how every HTTP server of ours listens (TCP_NODELAY): the collector's, and serving's apps
TCP_LISTENER = "lightning_otel.collector.tcp_listener"

# room -> the rooms (or single modules) it may import besides itself and the contract. README: "Layout".
ALLOWED: dict[str, set[str]] = {
    "capture": set(),
    "instrumentors": {"capture"},
    "adapters": set(),
    # the rollout view (/ui) explains samples with the adapter's own decisions; the adapter imports only the contract
    "collector": {"lightning_otel.adapters.triplets"},
    # the collector: the client, and Trainer embeds one when given no URL; serving: Trainer.dev(gateway=True)
    "runtime": {"capture", "adapters", "collector", "serving"},
    "serving": {"capture", *COLLECTOR_CLIENT, TCP_LISTENER},
    "training": {"runtime", "serving", "adapters", "capture", "rewards", *COLLECTOR_CLIENT},
    "testing": {"capture", "serving"},
    # reward models: scorer, service, client, scoring helpers (agent side: capture only); the service checks bearer
    # tokens with the collector's one rule
    "rewards": {"capture", "lightning_otel.collector.auth"},
    "auto": {"capture"},
    "_bootstrap": {"auto"},
    "cli": {"*"},
}


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


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Our modules that `name` imports anywhere in its file (module level, functions, TYPE_CHECKING blocks)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
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
    return parts[1] if len(parts) > 1 else "face"


def allowed(source: str, target: str) -> bool:
    if target == "lightning_otel":  # the face: importing it back would tie every room to every other
        return "*" in ALLOWED.get(room_of(source), set())
    if source in CONTRACT:
        return target in CONTRACT
    if target in CONTRACT:
        return True
    source_room, target_room = room_of(source), room_of(target)
    if source_room == target_room:
        return True
    rules = ALLOWED.get(source_room, set())
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
    for deps in graph.values():
        deps.discard("lightning_otel")
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

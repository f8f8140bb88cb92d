"""A built wheel installs the three import roots and the entry points, not only the editable checkout."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# folder -> import path, as setup.py maps them
SOURCE_ROOTS = {
    "lightning_otel": "lightning_otel",
    "instrumentors": "lightning_otel/instrumentors",
    "collector": "lightning_otel/collector",
}


def source_files() -> list[str]:
    """Every module and data file of every package folder (a folder with `__init__.py`), as wheel paths."""
    files = []
    for folder, target in SOURCE_ROOTS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            package = init.parent
            for path in package.iterdir():
                if path.is_file() and path.suffix in (".py", ".txt"):
                    files.append(f"{target}/{path.relative_to(ROOT / folder).as_posix()}")
    return files


def test_source_files_cover_every_room():
    files = source_files()
    for room in ("capture", "adapters", "runtime", "serving", "training/verl/cpu", "training/tinker", "cli", "testing"):
        assert f"lightning_otel/{room}/__init__.py" in files


def test_wheel_contains_every_package_and_imports_from_the_wheel(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("lightning_otel-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        archive.extractall(tmp_path / "site")
    missing = sorted(set(source_files()) - names)
    assert not missing, f"the wheel lacks these files of the source tree: {missing}"
    assert "lightning_otel/training/verl/cpu/replica.py" in names  # the CPU backend `VERL(device="cpu")` needs
    page = {f"lightning_otel/collector/reads/ui/{name}" for name in ("index.html", "app.js", "style.css")}
    assert page <= names, "the rollout view's page must ship in the wheel (the collector serves it at /ui)"
    assert "agl_openai = lightning_otel.instrumentors.openai:OpenAIInstrumentor" in entry_points
    assert "lightning-otel-run = lightning_otel.cli.run:main" in entry_points
    assert "agl-otel-collector = lightning_otel.collector.cli:main" in entry_points
    # -S: no .pth files, so the editable checkout is invisible; dependencies come from site-packages.
    probe = (
        "import lightning_otel, lightning_otel.instrumentors.openai, lightning_otel.collector, "
        "lightning_otel.testing; print(lightning_otel.__file__); "
        "print(lightning_otel.testing.build_tokenizer().vocab_size)"
    )
    path = f"{tmp_path / 'site'}:{sysconfig.get_paths()['purelib']}:{sysconfig.get_paths()['platlib']}"
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env={"PYTHONPATH": path},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    location, vocab = result.stdout.split()
    assert location.startswith(str(tmp_path / "site"))
    assert int(vocab) > 256


def run_without(packages: tuple[str, ...], body: str) -> subprocess.CompletedProcess[str]:
    """`body` in a fresh Python where importing any of `packages` fails as if they were not installed."""
    code = (
        "import sys\n"
        f"BLOCKED = {packages!r}\n"
        "class Block:\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError('not installed: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
    ) + body
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_pytest_plugin_loads_without_the_server_extras() -> None:
    """The plugin is an entry point: every pytest run of a base install imports it, starlette or not."""
    done = run_without(
        ("starlette", "uvicorn", "httpx"),
        "import lightning_otel, lightning_otel.testing, lightning_otel.testing.pytest_plugin\n",
    )
    assert done.returncode == 0, done.stderr


def test_a_runner_starts_in_an_environment_with_only_the_agents_extras() -> None:
    """Runners often live in the agent's own environment (the agent_grpo example's: openai 3, no collector extras):
    building the CLI's parser and importing the runner must not need the trainer's, the export's or a backend's
    packages (a top-level `import orjson` under `lightning-otel export` once made every runner die at start)."""
    trainer_side = (
        "orjson", "pyarrow", "datasets", "rich", "prometheus_client", "httptools", "trl", "torch", "transformers",
        "peft", "gepa", "verl", "tinker", "matplotlib", "psycopg", "ray",
    )  # fmt: skip
    done = run_without(
        trainer_side,
        "import lightning_otel.runner.runner_process\n"
        "from lightning_otel.cli.main import main\n"
        "sys.argv = ['lightning-otel', 'runner', '--help']\n"
        "main()\n",
    )
    assert done.returncode == 0, done.stderr
    assert "--collector" in done.stdout

"""Bad input on the command line: one line on stderr naming the argument and the problem, exit code 2, no traceback
(the port, the regular expression, the JSONL line, the agent module's own import error)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_otel.runtime.task_files import load_tasks

LIGHTNING = [sys.executable, "-m", "lightning_otel.cli"]
COLLECTOR = [sys.executable, "-m", "lightning_otel.collector"]


def fails_with_one_line(command: list[str], *expected: str, cwd: Path | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def test_an_agent_match_that_is_not_a_regular_expression(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "q"}\n')
    fails_with_one_line([*LIGHTNING, "train", "--agent", "m:a", "--train", str(tasks), "--agent-match", "("],
                        "argument --agent-match", "'(' is not a regular expression")  # fmt: skip


@pytest.mark.parametrize(
    ("value", "said"),
    [("tool_error", "is not NAME=NUMBER"), ("tool_error=bad", "is not NAME=NUMBER"),
     ("tool_failure=-1", "unknown process reward(s) ['tool_failure']")],
)  # fmt: skip
def test_process_rewards_that_do_not_parse(value: str, said: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "q"}\n')
    fails_with_one_line([*LIGHTNING, "train", "--agent", "m:a", "--train", str(tasks), "--process-rewards", value],
                        "argument --process-rewards", said)  # fmt: skip


@pytest.mark.parametrize("port", ["99999", "-5", "http"])
def test_a_port_out_of_range(port: str, tmp_path: Path) -> None:
    fails_with_one_line([*COLLECTOR, "--http-port", port, "--store", str(tmp_path / "s.sqlite3")],
                        "argument --http-port")  # fmt: skip


def test_a_busy_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for flag in ("--query-port", "--grpc-port"):
            others = {"--query-port": "0", "--grpc-port": "0", "--http-port": "0", flag: str(port)}
            args = [item for pair in others.items() for item in pair]
            line = fails_with_one_line([*COLLECTOR, *args, "--store", str(tmp_path / "s.sqlite3")], str(port))
            assert "in use" in line or "not available" in line, line


def test_a_malformed_jsonl_line_is_named_by_its_number(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "one"}\n\n{"question": "three"\n')
    with pytest.raises(ValueError, match=r"tasks.jsonl: not JSON or JSONL \(line 3: "):
        load_tasks(tasks)
    fails_with_one_line([*LIGHTNING, "train", "--agent", "m:a", "--train", str(tasks)], "(line 3: ")


def test_an_agent_module_whose_own_import_fails_says_what_failed(tmp_path: Path) -> None:
    (tmp_path / "my_agents.py").write_text("import package_that_is_not_installed\n\ndef agent(task):\n    return 1.0\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "q"}\n')
    line = fails_with_one_line([*LIGHTNING, "train", "--agent", "my_agents:agent", "--train", str(tasks)],
                               "importing my_agents failed", "package_that_is_not_installed", cwd=tmp_path)  # fmt: skip
    missing = fails_with_one_line([*LIGHTNING, "train", "--agent", "not_there:agent", "--train", str(tasks)],
                                  "no module named 'not_there'", cwd=tmp_path)  # fmt: skip
    assert line != missing


def test_the_rollout_view_of_a_store_that_does_not_exist_says_so_and_creates_nothing(tmp_path: Path) -> None:
    fails_with_one_line([*LIGHTNING, "ui", str(tmp_path / "agl-demo" / "collector.sqlite3")], "no store at",
                        cwd=tmp_path)  # fmt: skip
    (tmp_path / "agl-demo").mkdir()
    (tmp_path / "agl-demo" / "collector.sqlite3").write_bytes(b"")
    line = fails_with_one_line([*LIGHTNING, "ui", "sqlite:///agl-demo/collector.sqlite3"],
                               "no store at /agl-demo/collector.sqlite3", "give its path", cwd=tmp_path)  # fmt: skip
    assert "sqlite:/// is followed by an absolute path" in line
    assert not Path("/agl-demo").exists() and (tmp_path / "agl-demo" / "collector.sqlite3").stat().st_size == 0


def test_ray_flags_without_runner_actors_are_named_not_ignored(tmp_path: Path) -> None:
    command = [*LIGHTNING, "train", "--agent", "m:a", "--train", "t.jsonl", "--ray-address", "auto"]
    fails_with_one_line(command, "--ray-address and --runner-cpus are for runner actors: add --runners-on ray",
                        cwd=tmp_path)  # fmt: skip


def test_a_collector_url_without_its_scheme(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "q"}\n')
    fails_with_one_line([*LIGHTNING, "train", "--dev", "--test-server", "--agent", "m:a", "--train", str(tasks),
                         "--collector", "127.0.0.1:16686"],
                        "argument --collector", "use http://127.0.0.1:16686")  # fmt: skip
    fails_with_one_line([*LIGHTNING, "runner", "--agent", "m:a", "--collector", "localhost:16686"],
                        "argument --collector", "use http://localhost:16686")  # fmt: skip


def test_a_sqlite_url_that_names_the_filesystems_root(tmp_path: Path) -> None:
    fails_with_one_line([*COLLECTOR, "--store", "sqlite:///agl-relative.db"],
                        "names /agl-relative.db", "give its path (agl-relative.db)", cwd=tmp_path)  # fmt: skip
    assert not Path("/agl-relative.db").exists()


def test_a_sqlite_url_that_would_make_a_folder_at_the_root_is_refused_everywhere(tmp_path: Path) -> None:
    """Issue 72's fourth defect: `sqlite:///sub/rel.db` created /sub at the filesystem's root. The command line says
    so in one line, and so does the store itself (a Trainer's `CollectorConfig`, an embedded collector)."""
    from lightning_otel.collector.stores.sqlite_store import SQLiteStore

    fails_with_one_line([*COLLECTOR, "--store", "sqlite:///agl-sub-folder/rel.db"],
                        "names /agl-sub-folder/rel.db", "give its path (agl-sub-folder/rel.db)",
                        "sqlite:////agl-sub-folder/rel.db", cwd=tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match="would create /agl-sub-folder at the filesystem's root"):
        SQLiteStore("sqlite:///agl-sub-folder/rel.db")
    assert not Path("/agl-sub-folder").exists()
    SQLiteStore(f"sqlite:///{tmp_path}/a/b.db")  # a folder under one that exists: as written


def test_agl_managed_store_0_is_heard_by_the_command_line(tmp_path: Path) -> None:
    import os

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "q"}\n')
    command = [*LIGHTNING, "train", "--dev", "--test-server", "--agent", "m:a", "--train", str(tasks)]
    unmanaged = {**os.environ, "AGL_MANAGED_STORE": "0"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=unmanaged)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "AGL_MANAGED_STORE=0" in done.stderr and "--collector" in done.stderr


@pytest.mark.parametrize(
    ("content", "said"),
    [(b'{"question": "q"}\n"just a string"\n', "line 2 is a string, not an object"),
     (b'{"question": "q"}\n[1, 2]\n', "line 2 is a list, not an object"),
     (b'[{"question": "q"}, 3]', "item 2 is a number, not an object"),
     (b'{"question": "q"}\n{"question": "\xff"}\n', "not UTF-8 text (line 2")],
)  # fmt: skip
def test_a_tasks_file_whose_tasks_are_not_objects_or_not_text(content: bytes, said: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(content)
    line = fails_with_one_line([*LIGHTNING, "train", "--dev", "--test-server", "--agent", "m:a", "--train",
                                str(tasks)], said)  # fmt: skip
    assert str(tasks) in line


def test_a_collector_nothing_answers_at_fails_at_once_in_one_line(tmp_path: Path) -> None:
    """Issue 72's second defect: `--collector` at a port nothing listens on was 5.5 minutes of silence and a
    93-line traceback; it is one line, exit 1, before the agent's runners or a model start."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "q"}\n')
    with socket.socket() as closed:  # a port free now: nothing listens on it
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    command = [*LIGHTNING, "train", "--agent", "lightning_otel.testing.runtime_agents:flaky_agent", "--train",
               str(tasks), "--model", "tiny", "--collector", f"http://127.0.0.1:{port}"]  # fmt: skip
    for extra in ([], ["--dev"]):
        done = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=60)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1, (done.returncode, done.stderr)
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"no collector answers at http://127.0.0.1:{port}" in lines[0], lines[0]

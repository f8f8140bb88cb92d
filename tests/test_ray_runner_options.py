"""How runner actors are asked for and where they report: the command line's flags, the Trainer's checks of its
arguments, the collector each node's actors use, and the refusal of a loopback collector for a cluster that spans
machines (the actors there could not reach it). The actors themselves run in tests/collector/test_multi_node_training.py
and benchmarks/scale_out.py's quick mode."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

import lightning_otel as agl
from lightning_otel.cli.train import add_arguments, collector_options
from lightning_otel.runner.ray_actor import collector_for_node
from lightning_otel.runtime.ray_runners import RayRunnerPool


def parsed(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--agent", "m:a", "--train", "t.jsonl", *flags])


def test_the_command_line_asks_for_runner_actors_on_ray() -> None:
    options = collector_options(parsed("--runners", "4", "--runners-on", "ray", "--ray-address", "auto",
                                       "--runner-cpus", "0.5"))  # fmt: skip
    assert options["runners"] == agl.RayRunners(n=4, num_cpus=0.5, address="auto")
    assert collector_options(parsed("--runners", "4"))["runners"] is None  # local processes by default
    with pytest.raises(ValueError, match="add --runners-on ray"):
        collector_options(parsed("--ray-address", "auto"))


def test_the_trainer_takes_the_number_of_runners_from_ray_runners_and_refuses_what_conflicts() -> None:
    trainer = agl.Trainer(runners=agl.RayRunners(n=3))
    assert trainer.n_runners == 3
    with pytest.raises(ValueError, match="give the number in RayRunners"):
        agl.Trainer(n_runners=2, runners=agl.RayRunners(n=3))
    with pytest.raises(ValueError, match="max_rollouts is for local runner processes"):
        agl.Trainer(runners=agl.RayRunners(n=1), max_rollouts=5)
    with pytest.raises(TypeError, match="takes a RayRunners"):
        agl.Trainer(runners=4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be >= 1"):
        agl.RayRunners(n=0)


def test_each_node_reports_to_its_collector_by_node_id_then_ip_then_the_rest() -> None:
    table = {"node-a": "http://a:16686", "10.0.0.2": "http://b:16686", "*": "http://lb:16686"}
    assert collector_for_node(table, "http://trainer:16686", "node-a", "10.0.0.1") == "http://a:16686"
    assert collector_for_node(table, "http://trainer:16686", "node-x", "10.0.0.2") == "http://b:16686"
    assert collector_for_node(table, "http://trainer:16686", "node-x", "10.0.0.9") == "http://lb:16686"
    assert collector_for_node({"node-a": "http://a"}, "http://trainer", "node-x", "10.0.0.9") == "http://trainer"
    assert collector_for_node("http://one:16686", "http://trainer", "node-x", "10.0.0.9") == "http://one:16686"
    assert collector_for_node(None, "http://trainer", "node-x", "10.0.0.9") == "http://trainer"


def fake_ray(*node_ips: str) -> SimpleNamespace:
    nodes = [{"NodeManagerAddress": ip, "Alive": True} for ip in node_ips]
    util = SimpleNamespace(get_node_ip_address=lambda: node_ips[0])
    return SimpleNamespace(util=util, nodes=lambda: nodes)


def pool(url: str, collectors: object = None) -> RayRunnerPool:
    spec = agl.RayRunners(n=1, collectors=collectors)  # type: ignore[arg-type]
    return RayRunnerPool(spec, None, None, url, agl.RunnerOptions(max_concurrency=1), max_replacements=3)  # type: ignore[arg-type]


def test_a_loopback_collector_is_refused_for_a_cluster_on_several_machines() -> None:
    with pytest.raises(ValueError, match=r"loopback.*10\.0\.0\.2.*CollectorConfig\(host=\"0\.0\.0\.0\"\)"):
        pool("http://127.0.0.1:16686")._check_reachable(fake_ray("10.0.0.1", "10.0.0.2"))
    pool("http://127.0.0.1:16686")._check_reachable(fake_ray("10.0.0.1", "10.0.0.1"))  # one machine, two nodes
    pool("http://10.0.0.1:16686")._check_reachable(fake_ray("10.0.0.1", "10.0.0.2"))  # reachable address
    pool("http://127.0.0.1:16686", {"*": "http://c:16686"})._check_reachable(fake_ray("10.0.0.1", "10.0.0.2"))


def test_a_ray_is_joined_only_when_named_never_the_last_ray_start_on_the_machine(tmp_path, monkeypatch) -> None:
    # the CI failure this guards against: the multi-node test's cluster wrote /tmp/ray/ray_current_cluster, and a
    # `lightning-otel train` beside it joined that cluster with `ray.init()` and was refused its num_cpus
    from ray._private.services import canonicalize_bootstrap_address

    from lightning_otel.runtime.ray_address import joins_a_cluster, ray_init_address

    (tmp_path / "ray_current_cluster").write_text("127.0.0.1:6399")  # a `ray start` of someone else's
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    joined = canonicalize_bootstrap_address(None, temp_dir=str(tmp_path))  # what ray.init() does: joins it
    assert joined is not None and joined.endswith(":6399"), joined
    assert canonicalize_bootstrap_address(ray_init_address(), temp_dir=str(tmp_path)) is None  # a Ray of our own
    assert not joins_a_cluster()
    assert ray_init_address("head:6379") == "head:6379" and joins_a_cluster("auto")
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")  # the user's, named in the environment: joined
    assert ray_init_address() == "head:6379" and joins_a_cluster()

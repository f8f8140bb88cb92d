# ruff: noqa: E501  (a table of commands as the docs write them)
"""Every command the docs tell a user to run (README, docs/, the examples' READMEs), as written there (whitespace
collapsed, trailing comment dropped), and where it runs: a test (`tests/...py::name`, which runs that command or the
same one with a test's paths and ports), CI itself (`.ci/run`), or why it is not run here. tests/test_docs.py fails
on a command missing from this table, and on a test named here that does not exist."""

CI = ".ci/run"
NEEDS_GPU = "not run here: needs a GPU with vLLM (benchmarks/gpu/ runs it where one is lent)"
NEEDS_SERVICE = "not run here: needs a model endpoint of your own (an OpenAI-compatible server or API key)"
NEEDS_SPIDER = "not run here: needs the Spider download (the offline generator stands in for it in the tests)"
YOUR_PROGRAM = "not run here: your program; the same command on a test program runs in"
SETUP = "not run here: an environment's install, done by nox for its lane (noxfile.py)"
# a benchmark's full run is minutes, by hand; its --quick mode (same code, tiny sizes) runs in:
QUICK = "tests/test_benchmark_quick_modes.py::test_quick_mode_runs_and_prints_its_comparison"
RECIPE = "not run here: machines of your own; tried by hand on one machine with two Ray nodes (the output is on the page), its shape tested in tests/collector/test_multi_node_training.py"
QUICK_VERL = "tests/verl_lane/test_benchmark_quick_modes.py::test_quick_mode_runs_and_prints_its_comparison"

COMMANDS: dict[str, str] = {
    # README, docs/index.md, docs/getting-started.md
    'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]" -c constraints.txt && .venv/bin/lightning-otel demo': CI,
    "bash .ci/prerequisites && .venv/bin/python -m pytest -n 2 --dist loadfile && .venv/bin/nox": CI,
    "lightning-otel-run --token-ids --service-name sql-agent -- python my_agent.py": "tests/test_ways_in.py::test_lightning_otel_run_traces_an_unmodified_program",
    ".venv/bin/lightning-otel ui agl-demo/collector.sqlite3 --tokenizer agl-demo/model": "tests/verl_lane/test_train_demo.py::test_the_demo_runs_from_the_wheel_quietly_and_its_rollout_view_opens",
    ".venv/bin/lightning-otel demo --trace-only": "tests/test_demo_and_example.py::test_demo_prints_each_rollout_with_token_ids_and_rewards",
    # docs/models.md
    ".venv/bin/lightning-otel model smollm2": "tests/models/test_smollm2.py::test_the_command_prints_the_folder_it_built",
    ".venv/bin/lightning-otel demo --model smollm2": "not run here: about 9 minutes of CPU, by hand (the figures on its page); one of its steps runs in tests/verl_lane/test_smollm2_step.py",
    # docs/training/export.md
    "lightning-otel export agl-demo/collector.sqlite3 sft.jsonl": "tests/verl_lane/test_train_demo.py::test_the_demo_runs_from_the_wheel_quietly_and_its_rollout_view_opens",
    "lightning-otel export agl-demo/collector.sqlite3 pairs.parquet --shape pairs": "tests/verl_lane/test_train_demo.py::test_the_demo_runs_from_the_wheel_quietly_and_its_rollout_view_opens",
    "lightning-otel export agl-demo/collector.sqlite3 rollouts-ds --shape rollouts": "tests/test_export.py::test_rollout_rows_hold_every_call_and_the_task",
    "lightning-otel export http://127.0.0.1:16686 pairs.jsonl --shape pairs --pairs all --margin 0.5 --step 3": "tests/test_export.py::test_the_command_line_from_a_running_collector_and_its_errors",
    # docs/training/apo.md, examples/apo/README.md
    "cd examples/apo": "tests/examples/test_apo_example.py::test_the_apo_tutorial_finds_the_prompt_the_grader_needs",
    "OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_API_KEY=... ../../.venv/bin/python room_selector_apo.py": "tests/examples/test_apo_example.py::test_the_apo_tutorial_finds_the_prompt_the_grader_needs",
    "../../.venv/bin/lightning-otel ui apo-out/collector.sqlite3": "tests/examples/test_apo_example.py::test_the_apo_tutorial_finds_the_prompt_the_grader_needs",
    # docs/training/dpo.md
    ".venv/bin/python benchmarks/dpo_learning.py": QUICK,
    # docs/capture.md
    "lightning-otel-run --token-ids --service-name sql-agent -- python my_agent.py --its-flags": "tests/test_ways_in.py::test_lightning_otel_run_traces_an_unmodified_program",
    "opentelemetry-instrument python my_agent.py": "tests/test_ways_in.py::test_opentelemetry_instrument_finds_our_instrumentors",
    # docs/collector.md
    "agl-otel-collector": "tests/collector/test_collector_process.py::test_ready_lines_env_configuration_and_sigterm",
    'agl-otel-collector --store postgresql://agl@db/agl --host 0.0.0.0 --auth-token "$TOKEN" --forward-otlp '
    "http://jaeger:4318 --forward-otlp grpc://otel-collector:4317": "not run here: a PostgreSQL and a Jaeger of your own; the store, auth and forwarding are tested in "
    "tests/collector/ (test_store_conformance, test_forwarder, test_collector_process)",
    "agl-otel-collector link demo-rollout-0 --jaeger-ui-url http://jaeger:16686": "tests/collector/test_collector_process.py::test_ready_lines_env_configuration_and_sigterm",
    # docs/training/scale-out.md: the multi-machine recipe
    'pip install "lightning-otel[verl,postgres]"': SETUP,
    "createdb -h db-host -U agl agl": RECIPE,
    "agl-otel-collector --store postgresql://agl@db-host/agl --host 0.0.0.0": RECIPE,
    "export RAY_AUTH_MODE=token": RECIPE,
    "ray start --head --port 6379 --num-cpus 8 --num-gpus 1": RECIPE,
    "ray start --address head-host:6379": RECIPE,
    "lightning-otel train --ci-fast --agent examples.sql_agent.graph_agent:sql_graph_rollout --train examples/sql_agent/tasks.jsonl --agent-match write --runners 2 --runners-on ray --ray-address head-host:6379 --collector http://head-host:16686 --gateway-host 0.0.0.0": RECIPE,
    ".venv/bin/python benchmarks/scale_out.py": "tests/collector/test_multi_node_training.py::test_the_scale_out_benchmarks_quick_mode_runs_and_prints_its_comparison",
    # docs/development.md
    "bash .ci/prerequisites": CI,
    ".venv/bin/python -m pytest -n 2 --dist loadfile": CI,
    ".venv/bin/nox": CI,
    ".venv/bin/ruff check . && .venv/bin/ruff format --check .": "tests/test_style.py::test_ruff_is_clean",
    ".venv/bin/python benchmarks/capture_overhead.py": QUICK,
    ".venv/bin/python benchmarks/otlp_export_cost.py": QUICK,
    ".venv/bin/python benchmarks/collector_ingest.py": QUICK,
    ".venv/bin/python benchmarks/trainer_throughput.py [--agl-python PATH]": QUICK,
    ".venv/bin/python benchmarks/tinker_step_time.py [--model smollm2]": QUICK,
    ".venv/bin/python benchmarks/reward_model_service.py": QUICK,
    ".venv/bin/python benchmarks/cpu_replica_batching.py [--group-size 8]": QUICK,
    ".venv/bin/python benchmarks/verl_step_time.py [--model smollm2]": QUICK_VERL,
    ".nox/verl/bin/python benchmarks/agent_build_per_rollout.py": QUICK_VERL,
    "bash benchmarks/gpu/verl_gpu.sh prepare|install|run": NEEDS_GPU,
    # docs/rollout-view.md
    "PHOENIX_TELEMETRY_ENABLED=false phoenix serve": "tests/phoenix_lane/test_phoenix_forwarding.py::test_a_demo_run_forwarded_to_phoenix_arrives_as_the_same_span_tree",
    "agl-otel-collector --store agl-demo/collector.sqlite3 --query-port 16687 --http-port 4319 --grpc-port -1 "
    "--forward-otlp http://127.0.0.1:6006 --phoenix-ui-url http://127.0.0.1:6006 --tokenizer agl-demo/model": "tests/phoenix_lane/test_phoenix_forwarding.py::test_a_demo_run_forwarded_to_phoenix_arrives_as_the_same_span_tree",
    # docs/training/credit.md
    "lightning-otel train --agent my_pkg.agents:sql_rollout --train tasks.jsonl --agent-match write --advantage anchor "
    "--process-rewards tool_error=-0.5": YOUR_PROGRAM
    + " tests/verl_lane/test_verl_training.py::test_ci_fast_cli_trains_two_steps_with_per_call_credit_and_runner_actors_on_verls_ray",
    ".venv/bin/python benchmarks/credit_assignment.py": QUICK,
    # docs/training/async.md
    "lightning-otel demo --max-staleness 1": "tests/verl_lane/test_train_demo.py::test_the_demo_runs_from_the_wheel_quietly_and_its_rollout_view_opens",
    "lightning-otel train --agent my_agent:agent --train tasks.jsonl --max-staleness 1 ...": YOUR_PROGRAM
    + " tests/verl_lane/test_verl_training.py::test_ci_fast_cli_trains_two_steps_with_per_call_credit_and_runner_actors_on_verls_ray",
    # docs/training/reward-models.md
    "lightning-otel reward-model convert --input raw.jsonl --output pairs.jsonl": "tests/rewards/test_preferences.py::test_the_cli_exits_non_zero_on_bad_input_and_converts_good_input",
    "lightning-otel reward-model train --model BASE --data pairs.jsonl --output rm/": "tests/rewards/test_reward_model_training.py::test_the_cli_trains_a_reward_model_that_beats_chance_on_held_out_questions",
    "lightning-otel reward-model serve --model rm/ --port 8010 [--api-key KEY]": "tests/verl_lane/test_agent_grpo_example.py::test_two_grpo_steps_with_the_reward_model_as_a_reward_source",
    # docs/training/runtime.md
    "lightning-otel train --dev --agent my_pkg.agents:sql_rollout --train tasks.jsonl --agent-match write --base-url "
    "http://127.0.0.1:8000/v1 --model my-model": "tests/test_trainer_runtime.py::test_train_dev_cli_runs_a_dataset_file_through_trainer_dev",
    "lightning-otel runner --collector http://trainer-host:16686 --agent my_pkg.agents:sql_rollout --concurrency 32": "tests/test_trainer_runtime.py::test_a_runner_started_elsewhere_joins_a_training_and_stops_cleanly",
    # docs/training/verl.md, examples/sql_agent/README.md
    "lightning-otel train --agent examples.sql_agent.graph_agent:sql_graph_rollout --train train.jsonl --val "
    "val.jsonl --model Qwen/Qwen2.5-0.5B-Instruct --agent-match write --runners 4 data.train_batch_size=32 "
    "actor_rollout_ref.rollout.n=8": NEEDS_GPU,
    "lightning-otel train --ci-fast --agent examples.sql_agent.graph_agent:sql_graph_rollout --train "
    "examples/sql_agent/tasks.jsonl --agent-match write": "tests/verl_lane/test_verl_training.py::test_ci_fast_cli_trains_two_steps_with_per_call_credit_and_runner_actors_on_verls_ray",
    "python examples/sql_agent/agent.py --dev": "tests/test_demo_and_example.py::test_example_dev_run",
    "lightning-otel-run --token-ids -- python examples/sql_agent/agent.py --base-url http://127.0.0.1:8000/v1": YOUR_PROGRAM
    + " tests/test_ways_in.py",
    "lightning-otel train --agent examples.sql_agent.graph_agent:sql_graph_rollout --train examples/sql_agent/tasks.jsonl "
    "--model Qwen/Qwen2.5-0.5B-Instruct --agent-match write --runners 4 data.train_batch_size=32": NEEDS_GPU,
    # examples/agent_grpo/README.md
    "cd examples/agent_grpo": "tests/verl_lane/test_agent_grpo_example.py::test_two_grpo_steps_with_the_reward_model_as_a_reward_source",
    "python medical_data.py data": "tests/verl_lane/test_agent_grpo_example.py::test_the_reward_model_learns_the_preference_set",
    "agl store --port 9999": "tests/test_agent_lightning_spellings.py::test_agl_store_starts_a_collector_whose_query_api_is_on_the_port",
    "AGL_MANAGED_STORE=0 python train_sql_agent.py --llm-proxy --model /path/to/model --external-store-address http://localhost:9999": NEEDS_GPU
    + "; its spellings are tested in tests/test_agent_lightning_spellings.py",
    "lightning-otel reward-model convert --input data/raw_preferences.jsonl --output data/pairs.jsonl": "tests/verl_lane/test_agent_grpo_example.py::test_the_reward_model_learns_the_preference_set",
    "lightning-otel reward-model train --model BASE_MODEL --data data/pairs.jsonl --output runs/reward_model": NEEDS_GPU,
    "lightning-otel reward-model serve --model runs/reward_model --port 8010": "tests/verl_lane/test_agent_grpo_example.py::test_two_grpo_steps_with_the_reward_model_as_a_reward_source",
    "lightning-otel tiny-model runs/base": "tests/verl_lane/test_agent_grpo_example.py::test_the_reward_model_learns_the_preference_set",
    "lightning-otel reward-model train --model runs/base --data data/pairs.jsonl --output runs/reward_model --epochs "
    "10 --learning-rate 3e-4": "tests/verl_lane/test_agent_grpo_example.py::test_the_reward_model_learns_the_preference_set",
    "agl-otel-collector --store runs/store.sqlite3 --query-port 9999 --http-port 4318": "tests/collector/test_collector_process.py::test_ready_lines_env_configuration_and_sigterm",
    "python train_sql_agent.py --ci-fast --runner-python /path/to/agents-env/bin/python": "tests/verl_lane/test_agent_grpo_example.py::test_two_grpo_steps_with_the_reward_model_as_a_reward_source",
    "python train_sql_agent.py --model /path/to/model --collector http://127.0.0.1:9999 --runner-python "
    "/path/to/agents-env/bin/python": NEEDS_GPU,
    # examples/agent_service/README.md
    'python3 -m venv .venv-service && .venv-service/bin/pip install -e ".[openai-agents,testing]" fastapi': SETUP,
    'python3 -m venv .venv-train && .venv-train/bin/pip install -e ".[demo]" -c constraints.txt': SETUP,
    "cd examples/agent_service": "tests/verl_lane/test_agent_service_example.py::test_two_grpo_steps_train_every_call_the_service_made",
    "../../.venv-service/bin/lightning-otel-run --endpoint http://127.0.0.1:4318 -- ../../.venv-service/bin/uvicorn "
    "agent_server:app --port 8765 &": "tests/verl_lane/test_agent_service_example.py::test_two_grpo_steps_train_every_call_the_service_made",
    "../../.venv-train/bin/python train_agent_service.py --ci-fast --device cpu": "tests/verl_lane/test_agent_service_example.py::test_two_grpo_steps_train_every_call_the_service_made",
    "../../.venv-service/bin/lightning-otel-run --endpoint http://127.0.0.1:4318 --service-name agent-service -- "
    "../../.venv-service/bin/uvicorn agent_server:app --port 8765": "tests/verl_lane/test_agent_service_example.py::test_two_grpo_steps_train_every_call_the_service_made",
    "../../.venv-train/bin/python train_agent_service.py --agent-url http://127.0.0.1:8765/chat --otlp-port 4318 --ci-fast": "tests/verl_lane/test_agent_service_example.py::test_two_grpo_steps_train_every_call_the_service_made",
    "../../.venv-service/bin/uvicorn agent_server:app --port 8765": "tests/verl_lane/test_agent_service_example.py::test_two_grpo_steps_train_every_call_the_service_made",
    "../../.venv-train/bin/python train_agent_service.py --agent-url http://127.0.0.1:8765/chat --ci-fast": "tests/verl_lane/test_agent_service_example.py::test_two_grpo_steps_train_every_call_the_service_made",
    "python train_agent_service.py --agent-url http://SERVICE_HOST:8765/chat --collector-host 0.0.0.0 --otlp-port 4318 "
    "--gateway-host 0.0.0.0 --model Qwen/Qwen2.5-1.5B-Instruct": NEEDS_GPU,
    "lightning-otel-run --endpoint http://TRAINER_HOST:4318 -- uvicorn agent_server:app --host 0.0.0.0 --port 8765": "not run here: two machines (the same command on loopback runs in "
    "tests/verl_lane/test_agent_service_example.py)",
    # examples/google_adk/README.md
    'python3 -m venv .venv-adk && .venv-adk/bin/pip install -e ".[adk,demo]" -c constraints-adk.txt': SETUP,
    "cd examples/google_adk": "tests/verl_lane/test_adk_example.py::test_two_grpo_steps_train_the_adk_agents_calls",
    "../../.venv-adk/bin/python adk_debug.py --file data/test.parquet --test-server": "tests/verl_lane/test_adk_example.py::test_the_dry_run_traces_writer_and_checker_with_token_ids",
    "../../.venv-adk/bin/python train_adk.py --ci-fast": "tests/verl_lane/test_adk_example.py::test_two_grpo_steps_train_the_adk_agents_calls",
    "python train_adk.py --train-file data/train.parquet --val-file data/test.parquet --model "
    "${OPENAI_MODEL:-meta-llama/Meta-Llama-3-8B-Instruct} --endpoint ${OPENAI_API_BASE:-http://localhost:8000/v1}": NEEDS_GPU,
    # examples/spider/README.md
    "cd examples/spider": "tests/verl_lane/test_spider_example.py::test_two_grpo_steps_of_the_examples_agent_train_only_write_and_rewrite_rows",
    "python train_sql_agent.py cpu": "not run here: ~15 minutes (its first steps run in CI as `cpu --ci-fast`, "
    "tests/verl_lane/test_spider_example.py; the figures on its page are from runs of it)",
    "python train_sql_agent.py qwen --dev": "tests/verl_lane/test_spider_example.py::test_the_dry_run_answers_ten_questions_with_the_scripted_teacher",
    "python train_sql_agent.py qwen": NEEDS_GPU,
    "python train_sql_agent.py llama": NEEDS_GPU,
    "python train_sql_agent.py qwen --active-agent write": NEEDS_GPU,
    "export OPENAI_API_BASE=https://api.openai.com/v1 OPENAI_API_KEY=...": NEEDS_SERVICE,
    "export OPENAI_API_BASE=<your_api_base> OPENAI_API_KEY=<your_api_key>": NEEDS_SERVICE,
    "python prepare_dataset.py --spider-dir ~/spider": NEEDS_SPIDER,
    "python prepare_dataset.py": "tests/examples/test_spider_data.py::test_prepare_writes_the_tutorials_files",
    "python sql_agent.py": NEEDS_SERVICE,
    # examples/tinker/README.md
    'pip install "lightning-otel[tinker,openai]"': SETUP,
    'pip install "lightning-otel[crewai,trainer]"': SETUP,
    "python hello.py oneclick": "not run here: ~2.5 minutes (`oneclick --ci`, its first steps, runs in tests/tinker/test_hello_example.py; "
    "the figures on its page are from runs of it)",
    "agl-otel-collector --query-port 4747 --http-port 4748 --grpc-port -1 --store logs/hello/store.sqlite3": "tests/tinker/test_hello_example.py::test_algo_and_runners_started_separately_one_added_mid_run",
    "python hello.py algo --port 4747": "tests/tinker/test_hello_example.py::test_algo_and_runners_started_separately_one_added_mid_run",
    "python hello.py runner --port 4747": "tests/tinker/test_hello_example.py::test_algo_and_runners_started_separately_one_added_mid_run",
    "python hello.py runner --port 4747 --n-runners 1": "tests/tinker/test_hello_example.py::test_algo_and_runners_started_separately_one_added_mid_run",
    "python q20_train.py dryrun": "tests/frameworks/crewai/test_q20_example.py::test_dryrun_trains_only_the_players_calls",
    "python q20_train.py dryrun --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-4B-Instruct-2507": NEEDS_SERVICE,
    "agl-otel-collector --query-port 4747 --http-port 4748 --grpc-port -1": "tests/tinker/test_hello_example.py::test_algo_and_runners_started_separately_one_added_mid_run",
    "python q20_train.py algo --model qwen30b --search --port 4747": NEEDS_GPU,
    "python q20_train.py runner --port 4747 --n-runners 4": NEEDS_GPU,
    "python q20_evaluate.py --model Qwen/Qwen3-30B-A3B-Instruct-2507 --base-url http://127.0.0.1:8000/v1 "
    "--output-file logs/twenty_questions_results.jsonl --search": NEEDS_SERVICE,
}

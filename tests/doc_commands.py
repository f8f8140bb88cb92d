# ruff: noqa: E501  (a table of commands as the docs write them)
"""Every command the examples' READMEs tell a user to run, as written there (whitespace collapsed, trailing comment
dropped), and where it runs: a test (`tests/...py::name`, which runs that command or the same one with a test's paths
and ports), or why it is not run here. tests/test_docs.py fails on a command missing from this table, and on a test
named here that does not exist. (README.md's and docs/'s blocks say so on their page: tests/doc_blocks.py.)"""

NEEDS_GPU = "not run here: needs a GPU with vLLM (benchmarks/gpu/ runs it where one is lent)"
NEEDS_SERVICE = "not run here: needs a model endpoint of your own (an OpenAI-compatible server or API key)"
NEEDS_SPIDER = "not run here: needs the Spider download (the offline generator stands in for it in the tests)"
YOUR_PROGRAM = "not run here: your program; the same command on a test program runs in"
SETUP = "not run here: an environment's install, done by nox for its lane (noxfile.py)"
SMOLLM2_RUN = (
    "not run here: SmolLM2 on CPU, 10 to 30 minutes (benchmarks/front_door.py runs it; the same command "
    "with the tiny model runs in tests/test_train_front_door.py)"
)

COMMANDS: dict[str, str] = {
    # examples/front_door/README.md
    "../../.venv/bin/lightning-otel train --model smollm2 --agent antonyms:antonyms --train tasks/antonyms_train.jsonl "
    "--val tasks/antonyms_val.jsonl": SMOLLM2_RUN,
    "../../.venv/bin/lightning-otel train --model smollm2 --agent reviews:reviews --train tasks/reviews_train.jsonl "
    "--val tasks/reviews_val.jsonl": SMOLLM2_RUN,
    "../../.venv/bin/lightning-otel train --model smollm2 --agent slogans:slogans --train tasks/slogans_train.jsonl "
    "--val tasks/slogans_val.jsonl --agent-match writer": SMOLLM2_RUN,
    "../../.venv/bin/lightning-otel train --model smollm2 --agent inventory:inventory --train "
    "tasks/inventory_train.jsonl --val tasks/inventory_val.jsonl --warm-start tasks/inventory_warm_start.jsonl": SMOLLM2_RUN,
    # examples/apo/README.md
    "OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_API_KEY=... ../../.venv/bin/python room_selector_apo.py": "tests/examples/test_apo_example.py::test_the_apo_tutorial_finds_the_prompt_the_grader_needs",
    # examples/sql_agent/README.md
    "lightning-otel train --ci-fast --algorithm verl --agent examples.sql_agent.graph_agent:sql_graph_rollout --train "
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
    # examples/claude_code/README.md
    "cd examples/claude_code": "tests/harnesses/test_claude_code.py::test_the_readmes_dry_run_selects_the_sub_agent",
    "npm ci": "tests/harnesses/test_claude_code.py::test_the_readmes_dry_run_selects_the_sub_agent",
    "../../.venv/bin/python agent.py --dry-run --agent-match '^Explore$'": "tests/harnesses/test_claude_code.py::test_the_readmes_dry_run_selects_the_sub_agent",
    "../../.venv/bin/lightning-otel train --ci-fast --agent agent:claude_code_rollout --train tasks.jsonl --agent-match '^main$'": "tests/harnesses/test_claude_code.py::test_two_grpo_steps_train_the_tokens_claude_code_was_served",
    "lightning-otel train --agent agent:claude_code_rollout --train tasks.jsonl --model /path/to/model --agent-match '^main$' data.max_prompt_length=32768 data.max_response_length=4096 trainer.n_gpus_per_node=1 actor_rollout_ref.rollout.name=vllm": NEEDS_GPU,
    # examples/codex/README.md
    "cd examples/codex": "tests/harnesses/test_codex.py::test_the_readmes_dry_run_selects_the_sub_agent",
    "../../.venv/bin/python agent.py --dry-run --agent-match '^subagent$'": "tests/harnesses/test_codex.py::test_the_readmes_dry_run_selects_the_sub_agent",
    "../../.venv/bin/lightning-otel train --ci-fast --agent agent:codex_rollout --train tasks.jsonl --agent-match '^main$'": "tests/harnesses/test_codex.py::test_two_grpo_steps_train_the_tokens_codex_was_served",
    # examples/typescript_agent/README.md
    "cd examples/typescript_agent": "tests/harnesses/test_typescript_agent.py::test_the_readmes_dry_run_selects_the_writer",
    "../../.venv/bin/python agent.py --dry-run --agent-match '^writer$'": "tests/harnesses/test_typescript_agent.py::test_the_readmes_dry_run_selects_the_writer",
    "../../.venv/bin/lightning-otel train --ci-fast --agent agent:typescript_rollout --train tasks.jsonl --agent-match '^writer$'": "tests/harnesses/test_typescript_agent.py::test_two_grpo_steps_train_the_writers_calls",
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
    # examples/spider/README.md, on SmolLM2
    "python train_sql_smollm2.py --seed 0": "not run here: under an hour of SmolLM2 on 2 cores (33 steps); the same code's quick mode (the tiny model) runs as benchmarks/sql_learning.py --quick in tests/test_benchmark_quick_modes.py",
    "(cd ../.. && python -m benchmarks.sql_learning --seeds 0 1 2)": "not run here: about 2.5 hours of SmolLM2 on 2 cores; its quick mode runs in tests/test_benchmark_quick_modes.py",
    # examples/calculator/README.md
    "cd examples/calculator": "tests/frameworks/langgraph/test_calculator_example.py::test_dryrun_samples_the_agents_calls_with_token_ids",
    "python train_calculator.py dryrun": "tests/frameworks/langgraph/test_calculator_example.py::test_dryrun_samples_the_agents_calls_with_token_ids",
    "python -m benchmarks.calculator_probe --model smollm2 --problems 32": "not run here: about 3 minutes of SmolLM2 on 2 cores; its quick mode (the tiny model) runs in tests/test_benchmark_quick_modes.py",
    "python train_calculator.py train --seed 0": "not run here: about 40 minutes of SmolLM2 on 2 cores; the same code's quick mode (the tiny model) runs as benchmarks/calculator_learning.py --quick in tests/test_benchmark_quick_modes.py",
    "python train_calculator.py train --seed 0 --algorithm dpo": "not run here: about 35 minutes of SmolLM2 on 2 cores; the same code's quick mode runs as benchmarks/calculator_learning.py --quick in tests/test_benchmark_quick_modes.py",
    'python train_calculator.py train --seed 0 --teacher-check --distill-context "For this problem, call the calculate tool with {expression}; the answer is {answer}."': "not run here: about 45 minutes of SmolLM2 on 2 cores; the same code's quick mode (distill-alone) runs as benchmarks/calculator_learning.py --quick in tests/test_benchmark_quick_modes.py",
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

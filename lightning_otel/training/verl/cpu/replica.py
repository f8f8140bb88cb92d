"""verl's `hf` rollout: a CPU policy replica (our `CPUReplica`, an HF model) in verl's rollout-replica slots.

Three pieces, each the counterpart of one vLLM piece in verl 0.9:
- `HFRolloutServer` (a Ray actor per replica, like `vLLMHttpServer`): serves the OpenAI-compatible API in vLLM's
  format on an HTTP port (what the policy gateway forwards to, on CPU exactly as on GPU) and verl's token-in /
  token-out `generate` (what verl's own agent loop calls), and loads the weights the trainer pushes.
- `HFReplica` (a `RolloutReplica`, like `vLLMReplica`): starts that actor and reports its address.
- `HFServerAdapter` (a `BaseRollout` inside each hybrid training worker, like vLLM's `ServerAdapter`): on verl's
  weight sync, gathers the actor's full parameters and sends them to its replica's server.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

SERVER_NAME = "hf_server_{replica_rank}_0"


class HFRolloutServer:
    """One CPU replica: the model, its HTTP server and verl's control calls (sleep/wake are bookkeeping on CPU)."""

    def __init__(self, model_path: str, *, replica_rank: int, seed: int, prompt_length: int,
                 response_length: int, served_model_name: str | None = None) -> None:  # fmt: skip
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from lightning_otel.serving.cpu_replica import CPUReplica, HFChatTokenizer, ReplicaServer

        torch.set_num_threads(max(1, int(os.environ.get("AGL_REPLICA_THREADS", "1"))))
        tokenizer = HFChatTokenizer(AutoTokenizer.from_pretrained(model_path))
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.replica = CPUReplica(model, tokenizer, model_name=served_model_name or model_path,
                                  seed=seed + replica_rank)  # fmt: skip
        self.server = ReplicaServer(self.replica).start()
        self.prompt_length, self.response_length = prompt_length, response_length
        self.global_steps: int | None = None
        self.awake = True

    def get_server_address(self) -> tuple[str, int]:
        return self.server.host, self.server.port

    def weight_version(self) -> int:
        return self.replica.weight_version

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **unused: Any) -> TokenOutput:  # fmt: skip
        """verl's token-in/token-out call (its agent loop): the same sampler the HTTP API uses."""
        params = dict(sampling_params)
        limit = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        max_tokens = int(params.pop("max_tokens", params.pop("max_new_tokens", limit)))
        generation = await self.replica.agenerate(
            prompt_ids,
            max_tokens=max(1, min(max_tokens, limit)),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
        )
        return TokenOutput(
            token_ids=generation.token_ids,
            log_probs=generation.logprobs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """The actor's weights, served as policy version `global_steps`: verl's weight sync passes the step the
        trainer publishes them after, which is the training loop's version count (0: the first weights)."""
        version = self.replica.update_weights(state_dict, global_steps)
        self.global_steps = global_steps
        return version

    # verl's control surface: on CPU nothing is released, so these only keep state.
    async def wake_up(self, tags: list[str] | None = None) -> None:
        self.awake = True

    async def sleep(self) -> None:
        self.awake = False

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        return {"aborted_count": 0, "request_ids": []}

    async def noop(self, *args: Any, **kwargs: Any) -> None:
        return None

    resume_generation = clear_kv_cache = release_kv_cache = resume_kv_cache = noop
    start_profile = stop_profile = wait_for_requests_to_drain = noop

    def shutdown(self) -> None:
        self.server.stop()


class HFReplica(RolloutReplica):
    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        server_cls = ray.remote(HFRolloutServer)
        name = SERVER_NAME.format(replica_rank=self.replica_rank)
        server = server_cls.options(name=name, num_cpus=0, max_concurrency=self.max_concurrency).remote(
            self.model_config.get("local_path") or self.model_config.path,
            replica_rank=self.replica_rank,
            seed=int(self.config.seed or 0),
            prompt_length=int(self.config.prompt_length),
            response_length=int(self.config.response_length),
        )
        self.servers = [server]
        host, port = await server.get_server_address.remote()
        self._server_handle = server
        self._server_address = f"{host}:{port}"


class HFServerAdapter(BaseRollout):
    """The rollout half of verl's hybrid worker: forwards weight syncs and sleep/wake to the replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        per_replica = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // per_replica if replica_rank == -1 else replica_rank
        self.sends = rank % per_replica == 0  # one rank per replica talks to its server
        self._server: Any = None

    def _server_handle(self) -> Any:
        if self._server is None:  # the server starts after the hybrid worker: look it up on first use
            self._server = ray.get_actor(SERVER_NAME.format(replica_rank=self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        if self.sends:
            await self._server_handle().wake_up.remote(tags=tags)

    async def release(self) -> None:
        if self.sends:
            await self._server_handle().sleep.remote()

    async def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], wire_format: str = "named_tensors",
                             **kwargs: Any) -> None:  # fmt: skip
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the CPU replica takes full named tensors, not {wire_format!r}")
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError("the CPU replica takes merged weights: set actor_rollout_ref.model.lora.merge")
        # Every rank iterates: gathering a sharded parameter is a collective.
        state = {name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in weights}
        if self.sends:
            await self._server_handle().update_weights.remote(state, kwargs.get("global_steps"))

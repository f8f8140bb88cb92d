"""The loss functions, with Tinker's definitions (tinker-docs "losses"), per target position; the engine sums them.

- cross_entropy:        -weights * logp
- importance_sampling:  -exp(logp - logp_sampler) * advantages
- ppo:                  -min(ratio * advantages, clip(ratio, clip_low_threshold, clip_high_threshold) * advantages)
                        with ratio = exp(logp - logp_sampler); thresholds 0.8 and 1.2 unless configured.

importance_sampling with `tis_cap: C` in the loss config (asynchronous training's off-policy correction): truncated
importance sampling per token, -min(exp(logp - logp_sampler), C) * advantages, the weight taken as a constant
(gradient min(ratio, C) * advantages * dlogp): a token the sampler found far likelier than the trained policy no
longer blows up the step.

`logp` is the trained policy's log-probability of each target token (what `forward_backward` computes),
`logp_sampler` the sampler's (`loss_fn_inputs["logprobs"]`). Positions whose advantage is 0 add nothing and get no
gradient: that is how prompts and observation tokens are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

PPO_CLIP_LOW = 0.8
PPO_CLIP_HIGH = 1.2

Loss = Callable[[torch.Tensor, Mapping[str, torch.Tensor], Mapping[str, float]], torch.Tensor]


def cross_entropy(logp: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]) -> torch.Tensor:
    return -inputs["weights"] * logp


def importance_sampling(
    logp: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> torch.Tensor:
    ratio = torch.exp(logp - inputs["logprobs"])
    cap = config.get("tis_cap")
    if cap is not None:
        weight = ratio.detach().clamp(max=float(cap))
        return -weight * torch.exp(logp - logp.detach()) * inputs["advantages"]
    return -ratio * inputs["advantages"]


def ppo(logp: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]) -> torch.Tensor:
    ratio = torch.exp(logp - inputs["logprobs"])
    advantages = inputs["advantages"]
    low = float(config.get("clip_low_threshold", PPO_CLIP_LOW))
    high = float(config.get("clip_high_threshold", PPO_CLIP_HIGH))
    clipped = torch.clamp(ratio, low, high)
    return -torch.minimum(ratio * advantages, clipped * advantages)


LOSSES: dict[str, Loss] = {"cross_entropy": cross_entropy, "importance_sampling": importance_sampling, "ppo": ppo}


def loss_function(name: str) -> Loss:
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss_fn {name!r}: the local engine has {', '.join(LOSSES)}") from None

"""Training, one folder each: `loop/` (the one training loop), `verl/` (GRPO on verl's own pieces; `verl/cpu/` is
the CPU backend), `tinker/` (the Tinker-shaped engine), `dpo/` (DPO with TRL), `reward_model/`; `sft.py` (SFT).

Each room's imports are on the layout map (docs/architecture.md).
"""

"""Training backends, one folder each: `verl/` (GRPO on verl's own pieces; `verl/cpu/` is the CPU backend).

May import runtime (the `Algorithm` interface), serving (the gateway), adapters and capture.
"""

"""VERL on traces: `VERL` (algorithm), its `RayPPOTrainer` subclass (trainer), config composition (config), the
`DataProto` built from triplets (batch) and verl's CPU backend (cpu/)."""

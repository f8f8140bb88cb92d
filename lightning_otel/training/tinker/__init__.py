"""The Tinker-shaped backend: a training-engine interface like Tinker's (`engine.py`, `types.py`), the local LoRA
engine (`local_engine.py`, losses in `losses.py`), the hosted-service engine (`remote_engine.py`), samples to datums
(`datums.py`), and the `Tinker` algorithm (`algorithm.py`)."""

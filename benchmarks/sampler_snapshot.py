"""What a sampler snapshot costs the local engine: the LoRA weights copied over the shared base weights (what
`LocalEngine.save_weights_and_get_sampler` does, and what lets a policy per agent keep one base in memory) against a
deep copy of the whole model (what it did before), side by side on the same engine.

    python -m benchmarks.sampler_snapshot                   # SmolLM2-135M-Instruct (built offline), 5 snapshots each
    python -m benchmarks.sampler_snapshot --model tiny --quick

Prints, for each way: the median seconds per snapshot, and the bytes of parameters the snapshot holds of its own
(not shared with the training model); then the ratios.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path


def own_bytes(snapshot: object, model: object) -> int:
    """Bytes of the snapshot's parameters that are not the training model's own tensors."""
    theirs = {p.data_ptr() for p in model.parameters()}  # type: ignore[attr-defined]
    mine = {p.data_ptr(): p for p in snapshot.parameters()}  # type: ignore[attr-defined]
    return sum(p.numel() * p.element_size() for ptr, p in mine.items() if ptr not in theirs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="the tiny model, 2 repeats: that it runs (tests)")
    args = parser.parse_args()
    if args.quick:
        args.model, args.repeats = "tiny", 2
    import torch

    from lightning_otel.training.tinker.local_engine import LocalEngine

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as folder:
        if args.model == "tiny":
            from lightning_otel.testing import save_tiny_model

            path = save_tiny_model(Path(folder) / "tiny")
        else:
            import lightning_otel as agl

            path = agl.smollm2()
        engine = LocalEngine(path, rank=32, seed=0)
        results = {}
        for way in ("whole model (before)", "LoRA over the shared base"):
            seconds, held = [], 0
            for _ in range(args.repeats):
                began = time.perf_counter()
                if way.startswith("whole"):
                    snapshot = copy.deepcopy(engine.model).eval()
                else:
                    snapshot = engine.save_weights_and_get_sampler("s")._replica.model
                seconds.append(time.perf_counter() - began)
                held = own_bytes(snapshot, engine.model)
                del snapshot
            results[way] = (statistics.median(seconds), held)
            print(f"{way:<28} {results[way][0] * 1000:9.1f} ms a snapshot   {held / 2**20:9.1f} MiB of its own")
    (whole_s, whole_b), (lora_s, lora_b) = results.values()
    print(f"ratio shared-base / whole: time {lora_s / whole_s:.3f}x, own memory {lora_b / whole_b:.4f}x "
          f"({args.model}, {args.repeats} snapshots each)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Loaded by Python at start-up in programs run with `lightning-otel-run`: instrument, then chain to the
`sitecustomize` the program would have loaded without us."""

import importlib
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))

if os.environ.get("AGL_RUN_ACTIVE") == "1":
    import lightning_otel.auto  # noqa: F401

# Chain to the next sitecustomize on the path, if any (the way opentelemetry-instrument does it).
_saved = sys.modules.pop("sitecustomize", None)
_path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_old_path, sys.path[:] = list(sys.path), _path
try:
    importlib.import_module("sitecustomize")
except ImportError:
    pass
finally:
    sys.path[:] = _old_path
    if _saved is not None:
        sys.modules["sitecustomize"] = _saved

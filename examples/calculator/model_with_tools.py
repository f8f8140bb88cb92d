"""A model folder whose chat template renders tools: the weights of the original linked, its files copied, and
`chatml_tools.jinja` as its template (SmolLM2's own template, plus tools as Qwen2.5 and Hermes render them: the
template `lightning-otel model smollm2` gives its folder, which so needs no copy). One would start vLLM with
`--chat-template` for a model whose template has no tools; our replicas read the folder's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import lightning_otel

# the template the package gives SmolLM2's folder (lightning_otel/models/chatml_tools.jinja)
TEMPLATE = Path(lightning_otel.__file__).parent / "models" / "chatml_tools.jinja"


def with_tools_template(source: Path, workdir: Path) -> Path:
    """`workdir/<name>-tools`, made once (built aside and renamed into place whole)."""
    folder = workdir / f"{source.name}-tools"
    if (folder / "config.json").exists():
        return folder
    building = workdir / f".{source.name}-tools.building"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    for item in source.iterdir():
        if item.suffix == ".safetensors":
            (building / item.name).symlink_to(item.resolve())
        elif item.is_file() and item.name != "chat_template.jinja":
            shutil.copy2(item, building / item.name)
    config = building / "tokenizer_config.json"
    settings = json.loads(config.read_text()) if config.exists() else {}
    settings.pop("chat_template", None)  # the folder's chat_template.jinja is the template
    config.write_text(json.dumps(settings, indent=1))
    shutil.copy2(TEMPLATE, building / "chat_template.jinja")
    building.rename(folder)
    return folder

"""The tiny Llama 3 checkpoint dressed as a Qwen3.5 model for the ``hf`` parsers.

A copy of :func:`tests.support.tiny_model.tiny_model_dir` (the weights linked, not copied) whose
``tokenizer_config.json`` carries Qwen3's ``response_template`` metadata (XML tool calls,
``<think>`` reasoning: ``tests/fixtures/response-templates/qwen3.json``) and Qwen3.5's chat
template (``tests/fixtures/chat-templates/qwen35.jinja``, which renders the same call syntax and
ends the prompt with the ``<|im_start|>assistant\\n`` anchor the response template looks for).
The markers (``<|im_start|>``, ``<think>``, ``<tool_call>``) are plain text to the Llama 3
vocabulary, so a ``structured_outputs`` regex can make the engine write them.
"""

from __future__ import annotations

import json
import pathlib
import shutil

from tests.support.fixtures import CHAT_TEMPLATES
from tests.support.tiny_model import tiny_model_dir

RESPONSE_TEMPLATE = (
    pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "response-templates" / "qwen3.json"
)
CHAT_TEMPLATE = CHAT_TEMPLATES / "qwen35.jinja"


def hf_template_model(target: pathlib.Path) -> pathlib.Path:
    """Build the copy in ``target`` (a new or empty directory) and return it."""
    source = tiny_model_dir()
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name == "tokenizer_config.json":
            continue
        if item.suffix == ".safetensors":
            (target / item.name).symlink_to(item)
        else:
            shutil.copy(item, target / item.name)
    config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = CHAT_TEMPLATE.read_text(encoding="utf-8")
    config["response_template"] = json.loads(RESPONSE_TEMPLATE.read_text(encoding="utf-8"))
    (target / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return target

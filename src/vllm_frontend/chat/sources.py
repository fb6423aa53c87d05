"""Where a chat template's source comes from: ``--chat-template``, the model's files, a request.

Follows vLLM 0.32 (``renderers/chat_utils.py`` ``load_chat_template``, ``renderers/hf.py``
``resolve_chat_template``) and how transformers loads templates into a tokenizer
(``chat_template.jinja`` and ``additional_chat_templates/*.jinja`` win over
``tokenizer_config.json``'s ``chat_template``; a list there becomes named templates).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from vllm_frontend.chat.errors import ChatError

NO_TEMPLATE_MESSAGE = (
    "As of transformers v4.44, default chat template is no longer allowed, so you must provide a "
    "chat template if the tokenizer does not define one."
)
"""vLLM's error when neither the server nor the model provides a chat template."""

UNTRUSTED_TEMPLATE_MESSAGE = (
    "Chat template is passed with request, but --trust-request-chat-template is not set. "
    "Refused request with untrusted chat template."
)
"""vLLM's 400 for a request carrying its own template without ``--trust-request-chat-template``."""

_JINJA_CHARS = "{}\n"
_PROCESSOR_CONFIGS = ("processor_config.json", "preprocessor_config.json")
# vLLM looks bare names up in its built-in template folder; we ship none, but say where vLLM
# would have looked so the message reads the same.
_VLLM_BUILTIN_DIR = "vllm/transformers_utils/chat_templates"


def load_chat_template_option(value: str | None) -> str | None:
    """The template text for ``--chat-template VALUE``: a readable file's content, else the
    value itself when it looks like Jinja (contains ``{``, ``}`` or a newline).

    A path-like value that cannot be opened raises :class:`ChatError` (vLLM fails startup).
    """
    if value is None:
        return None
    try:
        with open(value, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        if any(c in value for c in _JINJA_CHARS):
            return value
        raise ChatError(
            f"The supplied chat template ({value}) looks like a file path, but it failed to be "
            f"opened. Tried: {value} and {_VLLM_BUILTIN_DIR}/{value}. Reason: {exc}",
            param="chat_template",
        ) from exc


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


class ModelChatTemplates(msgspec.Struct, frozen=True):
    """The chat templates a model ships, as the HF tokenizer (and processor) would load them.

    ``tokenizer`` is one template (``str``), named templates (``dict``), or ``None``;
    ``processor`` is a processor's template (multimodal repos), tried first when no tools are
    given, like vLLM does.
    """

    tokenizer: str | Mapping[str, str] | None = None
    processor: str | None = None

    @classmethod
    def from_model_dir(
        cls, model_dir: str | Path, tokenizer_config: Mapping[str, Any] | None = None
    ) -> ModelChatTemplates:
        """Load from a local model directory (``tokenizer_config`` if already parsed)."""
        root = Path(model_dir)
        if tokenizer_config is None:
            text = _read_text(root / "tokenizer_config.json")
            tokenizer_config = json.loads(text) if text else {}
        files: dict[str, str] = {}
        default = _read_text(root / "chat_template.jinja")
        if default is not None:
            files["default"] = default
        extra_dir = root / "additional_chat_templates"
        if extra_dir.is_dir():
            for path in sorted(extra_dir.glob("*.jinja")):
                text = _read_text(path)
                if text is not None:
                    files[path.name.removesuffix(".jinja")] = text
        tokenizer: str | Mapping[str, str] | None
        if len(files) == 1 and "default" in files:
            tokenizer = files["default"]
        elif files:
            tokenizer = files
        else:
            tokenizer = _config_templates(tokenizer_config.get("chat_template"))
        return cls(tokenizer=tokenizer, processor=_processor_template(root))

    def select(self, requested: str | None, *, has_tools: bool) -> str | None:
        """The template source vLLM renders with.

        ``requested`` is ``--chat-template``'s text or a trusted request template; it may name
        one of the model's templates. Otherwise: the processor template (when no tools), then
        the tokenizer's (``tool_use`` when tools are given and it exists, else ``default``).
        """
        named = self.tokenizer if isinstance(self.tokenizer, Mapping) else None
        if requested is not None:
            if named is not None and requested in named:
                return named[requested]
            return requested
        if not has_tools and self.processor is not None:
            return self.processor
        if named is not None:
            if has_tools and "tool_use" in named:
                return named["tool_use"]
            # No default among several templates: transformers raises, vLLM swallows that
            # and ends with "no template".
            return named.get("default")
        return self.tokenizer if isinstance(self.tokenizer, str) else None


def _config_templates(value: Any) -> str | Mapping[str, str] | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        out: dict[str, str] = {}
        for item in value:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                out[item["name"]] = str(item.get("template", ""))
        return out or None
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    return None


def _processor_template(root: Path) -> str | None:
    # Only a repo with a processor (multimodal) has a processor template; AutoProcessor falls
    # back to the tokenizer otherwise and vLLM ignores it.
    has_processor = any((root / name).exists() for name in _PROCESSOR_CONFIGS)
    if not has_processor:
        return None
    legacy = _read_text(root / "chat_template.json")
    if legacy is None:
        return None
    try:
        data = json.loads(legacy)
    except ValueError:
        return None
    template = data.get("chat_template") if isinstance(data, dict) else None
    return template if isinstance(template, str) else None

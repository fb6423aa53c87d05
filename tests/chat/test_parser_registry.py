"""The lazy parser registries (`vllm_frontend.chat.parser_registry`) against the classes.

The registries name each class by module and attribute so that a server imports only the
parsers it is configured with; these tests import them all and check that the names, the classes
and the token strings startup looks up (``PARSER_TOKENS``) are what the classes say.
"""

from __future__ import annotations

import subprocess
import sys

from vllm_frontend.chat.output_parser import MARKER_TOKENS
from vllm_frontend.chat.parser_registry import (
    PARSER_TOKENS,
    REASONING_PARSERS,
    TOOL_PARSERS,
    LazyClasses,
)
from vllm_frontend.chat.reasoning.base import ReasoningParser
from vllm_frontend.chat.tools.base import ToolParser

# vLLM 0.32's aliases among the tool parser names (the same class under two names).
_TOOL_ALIASES = {
    "glm45": "glm47",
    "llama4_json": "llama3_json",
    "qwen3_json": "hermes",
    "qwen3_xml": "qwen3_coder",
}


def test_reasoning_parsers_are_named_by_their_classes() -> None:
    assert len(REASONING_PARSERS) == len(set(REASONING_PARSERS)) > 30
    for name in REASONING_PARSERS:
        cls = REASONING_PARSERS[name]
        assert issubclass(cls, ReasoningParser)
        assert cls.name == name


def test_tool_parsers_are_named_by_their_classes_or_vllm_aliases() -> None:
    assert len(TOOL_PARSERS) > 50
    for name in TOOL_PARSERS:
        cls = TOOL_PARSERS[name]
        assert issubclass(cls, ToolParser)
        if name in _TOOL_ALIASES:
            assert cls is TOOL_PARSERS[_TOOL_ALIASES[name]]
        else:
            assert cls.name == name


def test_parser_tokens_are_every_class_token() -> None:
    # Startup looks these up in the vocabulary instead of importing every class to ask it.
    declared: set[str] = set(MARKER_TOKENS)
    for registry in (TOOL_PARSERS, REASONING_PARSERS):
        for name in registry:
            cls = registry[name]
            declared.update(cls.required_tokens, cls.optional_tokens)
    assert set(MARKER_TOKENS) | PARSER_TOKENS == declared


def _printed_by(code: str) -> list[str]:
    """The words ``code`` prints, run in a fresh interpreter (nothing imported yet)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_lookups_import_only_what_they_name() -> None:
    code = (
        "import sys\n"
        "from vllm_frontend.chat.parser_registry import TOOL_PARSERS\n"
        "assert 'kimi_k2' in TOOL_PARSERS and len(TOOL_PARSERS) > 50\n"
        "print('vllm_frontend.chat.tools.kimi' in sys.modules)\n"
        "cls = TOOL_PARSERS['kimi_k2']\n"
        "print(cls.__module__ in sys.modules, 'vllm_frontend.chat.tools.xlam' in sys.modules)\n"
    )
    out = _printed_by(code)
    assert out == ["False", "True", "False"]


def test_a_server_imports_no_parser_it_is_not_configured_with() -> None:
    code = (
        "import sys, vllm_frontend.cmd.runner\n"
        "from vllm_frontend.chat.parser_registry import REASONING_PARSERS, TOOL_PARSERS\n"
        "for registry in (TOOL_PARSERS, REASONING_PARSERS):\n"
        "    for name in registry:\n"
        "        module = 'vllm_frontend.chat.' + registry.spec(name).split(':')[0]\n"
        "        if module in sys.modules:\n"
        "            print(module)\n"
    )
    out = _printed_by(code)
    # reasoning.hf (the hf parsers' shared code) and tools.plamo3 (PLaMo 3's structural tag)
    # are imported by other startup modules.
    assert set(out) <= {
        "vllm_frontend.chat.reasoning.hf",
        "vllm_frontend.chat.tools.plamo3",
    }


def test_mapping_behaviour() -> None:
    registry: LazyClasses[ToolParser] = LazyClasses({"x": "tools.base:ToolParser"})
    assert "x" in registry and "y" not in registry and 3 not in registry
    assert list(registry) == ["x"] and len(registry) == 1
    assert registry["x"] is ToolParser and registry.get("y") is None
    assert dict(registry) == {"x": ToolParser}

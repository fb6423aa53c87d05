"""Every ``--tool-call-parser`` and ``--reasoning-parser`` name of vLLM 0.32's registries is
served: none is refused.

The names go through the same startup step ``serve`` runs (``cmd.assemble.output_parsers``: the
flags' config, the model's tokenizer), with the tiny model. A served name starts unless the model
lacks what the parser reads, and then says what (as vLLM's startup check does): marker tokens
the tiny tokenizer lacks, a gpt-oss model for the Harmony parsers, a ``response_template`` in
the tokenizer configuration for the ``hf`` parsers.
"""

from __future__ import annotations

import functools

import pytest
from tests.support.tiny_model import tiny_model_dir

from vllm_frontend.chat.output_parser import ParserConfigError
from vllm_frontend.chat.reasoning.budget import thinking_budget_enabled
from vllm_frontend.chat.reasoning_parsers import REASONING_PARSERS, REFUSED_REASONING_PARSERS
from vllm_frontend.chat.tool_parsers import REFUSED_TOOL_PARSERS, TOOL_PARSERS
from vllm_frontend.cmd.assemble import output_parsers
from vllm_frontend.cmd.config import ConfigError, config_from_args
from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle  # vLLM's registries are the reference

pytest.importorskip("vllm")


def _vllm_tool_names() -> set[str]:
    from vllm.tool_parsers import ToolParserManager

    return set(ToolParserManager.list_registered())


def _vllm_reasoning_names() -> set[str]:
    from vllm.reasoning import ReasoningParserManager

    return set(ReasoningParserManager.list_registered())


@functools.cache
def _tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(tiny_model_dir(), use_fastokens=False)


def _model_mismatch(message: str) -> bool:
    """A served parser refuses only a model it cannot read: marker tokens the tokenizer lacks,
    a non-gpt-oss model for the Harmony parsers, no response template for ``hf``."""
    return (
        "lacks the" in message
        or "is not a gpt-oss one" in message
        or "requires `response_template` metadata" in message
    )


def _start(**flags: object) -> None:
    config = config_from_args({"model_tag": "m", **flags})
    output_parsers(config, _tokenizer())


def test_the_registries_are_vllms_exactly() -> None:
    tools, reasoning = _vllm_tool_names(), _vllm_reasoning_names()
    assert len(tools) >= 53 and len(reasoning) >= 38
    assert not REFUSED_TOOL_PARSERS and not REFUSED_REASONING_PARSERS  # every name is served
    assert set(TOOL_PARSERS) == tools
    assert set(REASONING_PARSERS) == reasoning


@pytest.mark.parametrize("name", sorted(_vllm_tool_names()))
def test_every_tool_parser_name_starts_or_is_refused_by_name(name: str) -> None:
    if name in REFUSED_TOOL_PARSERS:
        with pytest.raises(
            (ConfigError, ParserConfigError), match=rf"'{name}' is not supported.*: \S"
        ):
            _start(tool_call_parser=name, enable_auto_tool_choice=True)
        return
    try:
        _start(tool_call_parser=name, enable_auto_tool_choice=True)
    except ParserConfigError as e:  # only for what this model lacks
        assert _model_mismatch(str(e)) and f"--tool-call-parser {name}" in str(e)


@pytest.mark.parametrize("name", sorted(_vllm_reasoning_names()))
def test_every_reasoning_parser_name_starts_or_is_refused_by_name(name: str) -> None:
    if name in REFUSED_REASONING_PARSERS:
        with pytest.raises(
            (ConfigError, ParserConfigError), match=rf"'{name}' is not supported.*: \S"
        ):
            _start(reasoning_parser=name)
        return
    try:
        _start(reasoning_parser=name)
    except ParserConfigError as e:
        assert _model_mismatch(str(e)) and f"--reasoning-parser {name}" in str(e)


def _vllm_parser_has_markers(name: str) -> bool | None:
    """Whether vLLM's parser gives reasoning start and end strings as vLLM's ``ReasoningConfig``
    reads them (the parser built from the tokenizer alone); None when the tiny tokenizer cannot
    build it and its class does not tell."""
    from transformers import AutoTokenizer
    from vllm.reasoning import ReasoningParserManager
    from vllm.reasoning.basic_parsers import BaseThinkingReasoningParser
    from vllm.reasoning.deepseek_v3_reasoning_parser import (
        DeepSeekV3ReasoningParser,
        DeepSeekV3ReasoningWithThinkingParser,
    )

    cls = ReasoningParserManager.get_reasoning_parser(name)
    try:
        parser = cls(AutoTokenizer.from_pretrained(tiny_model_dir()))
    except (RuntimeError, ValueError):  # marker tokens the tiny tokenizer lacks
        if issubclass(cls, BaseThinkingReasoningParser):  # fixed start and end tokens
            return True
        if issubclass(cls, DeepSeekV3ReasoningParser):  # identity unless thinking by default
            return issubclass(cls, DeepSeekV3ReasoningWithThinkingParser)
        try:  # strings that do not depend on the tokenizer
            bare = object.__new__(cls)
            return bool(bare.reasoning_start_str and bare.reasoning_end_str)
        except AttributeError:
            return None
    return bool(parser.reasoning_start_str and parser.reasoning_end_str)


@pytest.mark.parametrize("name", sorted(_vllm_reasoning_names()))
def test_a_thinking_budget_is_taken_with_the_reasoning_parsers_vllm_enables(name: str) -> None:
    # vLLM's input processor refuses thinking_token_budget unless its reasoning config is
    # enabled: start and end strings from the parser (or --reasoning-config); gpt-oss's parser
    # has none (ours took the budget with any parser)
    expected = _vllm_parser_has_markers(name)
    if expected is None:
        pytest.skip(f"vLLM's {name} parser needs a tokenizer the tiny model lacks")
    assert thinking_budget_enabled(name, "", "") is expected
    assert thinking_budget_enabled(name, "<a>", "</a>")  # --reasoning-config's strings


@pytest.mark.parametrize(
    ("flags", "enabled"),
    [
        ({}, False),
        ({"reasoning_parser": "qwen3"}, True),
        ({"reasoning_parser": "openai_gptoss"}, False),
        ({"reasoning_config": '{"reasoning_start_str": "<a>"}'}, False),
        ({"reasoning_config": '{"reasoning_start_str": "<a>", "reasoning_end_str": "</a>"}'},
         True),
        ({"reasoning_parser": "openai_gptoss",
          "reasoning_config": {"reasoning_start_str": "<a>", "reasoning_end_str": "</a>"}}, True),
        ({"reasoning_config": {"reasoning_parser": "qwen3"}}, True),  # the config's own parser
        ({"reasoning_parser": "openai_gptoss", "reasoning_config": {"reasoning_parser": "qwen3"}},
         False),  # --reasoning-parser replaces it
        ({"structured_outputs_config": {"reasoning_parser": "qwen3"}}, False),  # no part in it
    ],
)  # fmt: skip
def test_the_flags_that_enable_vllms_reasoning_config(
    flags: dict[str, object], enabled: bool
) -> None:
    # vLLM's EngineArgs builds a reasoning config from --reasoning-config, its parser replaced
    # by --reasoning-parser, or from --reasoning-parser alone
    assert config_from_args({"model_tag": "m", **flags}).thinking_budget is enabled

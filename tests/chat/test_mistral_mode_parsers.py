"""``--tool-call-parser mistral`` and ``--reasoning-parser mistral`` with ``--tokenizer-mode
mistral`` match vLLM's parsers on vLLM's ``MistralTokenizer``, delta for delta: the tokenizer's
version picks the pre-v11 JSON list (v7 here, although its table has ``[ARGS]``), a tekken v11
tokenizer without ``[THINK]`` reads reasoning between ``<think>`` text markers, v13 between
``[THINK]`` tokens (``tests/chat/tool_family_harness.py`` compares; the outputs are encoded with
the markers as their special token ids, as the model writes them)."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest

from tests.chat.test_engine_mistral import PRE_V11_OUTPUTS, V11_OUTPUTS
from tests.chat.tool_family_harness import Family, vllm_request
from tests.support.tiny_mistral import tiny_mistral_dir
from vllm_frontend.chat.output_parser import OutputParsers
from vllm_frontend.chat.reasoning.base import ModelFacts
from vllm_frontend.text.tokenizer_mistral import MistralTokenizer

pytestmark = pytest.mark.oracle

pytest.importorskip("vllm")
pytest.importorskip("mistral_common")

_MARKERS = re.compile(r"(\[TOOL_CALLS\]|\[ARGS\]|\[THINK\]|\[/THINK\]|</s>)")


@functools.cache
def _vllm_tokenizer(version: str) -> Any:
    from vllm.tokenizers.mistral import MistralTokenizer as VllmMistralTokenizer

    class Tok(VllmMistralTokenizer):  # type: ignore[misc]
        """vLLM's tokenizer, encoding marker strings as the special tokens the model writes."""

        def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
            raw = self.tokenizer
            ids: list[int] = []
            for part in _MARKERS.split(text):
                if not part:
                    continue
                if _MARKERS.fullmatch(part) and raw.is_special(part):
                    ids.append(raw.get_special_token(part))
                else:
                    ids.extend(raw.encode(part, bos=False, eos=False))
            return ids

    return Tok(
        VllmMistralTokenizer.from_pretrained(str(tiny_mistral_dir(version))).transformers_tokenizer
    )


@functools.cache
def _ours_tokenizer(version: str) -> MistralTokenizer:
    return MistralTokenizer.from_dir(tiny_mistral_dir(version))


class MistralFamily(Family):
    """A family read with mistral_common tokenizers on both sides."""

    version: str = "v13"

    @property
    def tok(self) -> Any:
        return _vllm_tokenizer(self.version)

    @functools.cached_property
    def ours(self) -> OutputParsers:
        tok = _ours_tokenizer(self.version)
        return OutputParsers.for_tokenizer(
            tok.token_to_id,
            tool_call_parser=self.parser,
            reasoning_parser=self.reasoning,
            enable_auto_tool_choice=True,
            model=ModelFacts(mistral_version=tok.version, mistral_grammar=tok.supports_grammar),
            special_tokens=tok.all_special_tokens,
            decode=functools.partial(tok.decode, skip_special_tokens=False),
            encode=functools.partial(tok.encode, add_special_tokens=False),
        )


def _family(version: str, reasoning: str | None = "mistral") -> MistralFamily:
    family = MistralFamily("mistral", reasoning=reasoning)
    family.version = version
    return family


V11_TEXT_THINK = [
    '<think>Need the weather.</think>Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
    "<think>open, never closed",
    "<think>plan  \n[TOOL_CALLS]get_time[ARGS]{}",
    "text </think> more",
    "[THINK]not a marker here[/THINK] answer",
]


@pytest.mark.parametrize("text", V11_OUTPUTS)
@pytest.mark.parametrize("version", ["v11", "v13"])
def test_v11_and_later_match_vllm(version: str, text: str) -> None:
    family = _family(version)
    req = vllm_request()
    family.check(text, req)


@pytest.mark.parametrize("text", V11_TEXT_THINK)
@pytest.mark.parametrize("reasoning", ["mistral", None])
def test_v11_text_think_markers_match_vllm(text: str, reasoning: str | None) -> None:
    family = _family("v11", reasoning)
    for req in (vllm_request(), vllm_request(include_reasoning=False)):
        family.check(text, req)


@pytest.mark.parametrize("text", PRE_V11_OUTPUTS)
def test_v7_reads_pre_v11_calls_by_version(text: str) -> None:
    family = _family("v7")
    family.check(text, vllm_request())


@pytest.mark.parametrize("text", V11_TEXT_THINK[:2] + V11_OUTPUTS[11:14])
def test_reasoning_alone_matches_vllm(text: str) -> None:
    for version in ("v7", "v11", "v13"):
        family = MistralFamily(None, reasoning="mistral")  # type: ignore[arg-type]
        family.version = version
        for req in (vllm_request(None), vllm_request(None, include_reasoning=False)):
            family.check(text, req)

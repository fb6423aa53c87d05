"""guidance's verdict on a request's constraint, as vLLM 0.32's ``validate_guidance_grammar``
(vllm/v1/structured_output/backend_guidance.py) reaches it: the constraint turned into an
llguidance grammar and checked by llguidance's ``LLMatcher.validate_grammar`` without a tokenizer,
or, as vLLM does for Mistral tekken tokenizers, with the tokenizer's llguidance vocabulary
(mistral_common's, which lets a grammar name special tokens); the refusal worded as vLLM words
it.

llguidance is a native package without torch; it is imported on first use, only when a request
goes to guidance. Verdicts without a vocabulary are remembered (a bounded LRU): llguidance's
messages carry no time.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from vllm_frontend.engine.protocol import StructuredOutputsParams

__all__ = [
    "LLGUIDANCE_REQUIREMENT",
    "GuidanceUnavailable",
    "guidance_lacks",
    "guidance_refusal",
    "tekken_vocabulary",
]

LLGUIDANCE_REQUIREMENT = "llguidance>=1.7.0,<1.8.0"
"""The llguidance releases vLLM 0.32 accepts (its own requirement)."""

_CACHE_SIZE = 128


class GuidanceUnavailable(NotImplementedError):
    """llguidance cannot be imported here (HTTP 501 for the request needing it)."""


def guidance_lacks(schema: Any) -> bool:
    """Whether a JSON schema uses a feature vLLM knows guidance lacks (vLLM's
    ``has_guidance_unsupported_json_features``): ``patternProperties`` in the root or in any
    object reached through object values and list items."""
    stack = [schema] if isinstance(schema, dict) else []
    while stack:
        node = stack.pop()
        if "patternProperties" in node:
            return True
        for value in node.values():
            if isinstance(value, dict):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(item for item in value if isinstance(item, dict))
    return False


def guidance_refusal(so: StructuredOutputsParams, vocabulary: Any = None) -> str | None:
    """vLLM's message refusing ``so``'s constraint with guidance, ``None`` where llguidance takes
    it (``vocabulary``: an llguidance tokenizer, :func:`tekken_vocabulary`). Raises
    :class:`GuidanceUnavailable` without llguidance."""
    kind, text = _key(so)
    if vocabulary is None:
        return _verdict(kind, text)
    return _verdict_uncached(kind, text, vocabulary)


@functools.lru_cache(maxsize=4)
def tekken_vocabulary(mistral: Any) -> Any:
    """The llguidance tokenizer vLLM checks a tekken tokenizer's constraints with (``mistral``:
    mistral_common's ``MistralTokenizer``), built once per tokenizer."""
    _llguidance()
    from mistral_common.guidance.tokenizer import from_mistral_tokenizer

    return from_mistral_tokenizer(mistral)


def _key(so: StructuredOutputsParams) -> tuple[str, str]:
    # The constraint vLLM's get_structured_output_key picks, in its order, as text.
    if so.json is not None:
        return "json", so.json if isinstance(so.json, str) else json.dumps(so.json)
    if so.json_object:
        return "json_object", ""
    if so.regex is not None:
        return "regex", so.regex
    if so.choice is not None:
        return "choice", so.choice if isinstance(so.choice, str) else json.dumps(so.choice)
    if so.grammar is not None:
        return "grammar", so.grammar
    if so.structural_tag is not None:
        tag = so.structural_tag
        return "structural_tag", tag if isinstance(tag, str) else json.dumps(tag)
    raise ValueError("No valid structured output parameter found")


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _verdict(kind: str, text: str) -> str | None:
    return _verdict_uncached(kind, text, None)


def _verdict_uncached(kind: str, text: str, vocabulary: Any) -> str | None:
    llg = _llguidance()
    try:
        grammar = _grammar(llg, kind, text)
    except _TagError as e:
        return str(e)
    except (ValueError, KeyError, TypeError) as e:
        return f"Invalid grammar specification: {e}"
    except Exception as e:  # vLLM lets these escape as a 500; a 400 here
        return f"Invalid grammar specification: {e}"
    error = llg.LLMatcher.validate_grammar(grammar, vocabulary)
    return f"Grammar error: {error}" if error else None


def _grammar(llg: Any, kind: str, text: str) -> str:
    # vLLM's serialize_guidance_grammar with its defaults (flexible whitespace, additional
    # properties as the schema says).
    if kind == "json":
        return _schema_grammar(llg, text)
    if kind == "json_object":
        return _schema_grammar(llg, '{"type": "object"}')
    if kind == "structural_tag":
        return _tag_grammar(llg, text)
    return str(llg.grammar_from(kind, text))


def _schema_grammar(llg: Any, schema: Any) -> str:
    options = {"whitespace_flexible": True}
    return str(llg.LLMatcher.grammar_from_json_schema(schema, defaults=options))


def _tag_grammar(llg: Any, text: str) -> str:
    # The legacy form only (``triggers`` and ``structures``), read in vLLM's order so that the
    # same Python errors (their text) come out.
    spec = json.loads(text)
    triggers = spec["triggers"]
    tags = []
    for structure in spec["structures"]:
        begin = structure["begin"]
        trigger = next((t for t in triggers if begin.startswith(t)), None)
        if trigger is None:
            raise _TagError(f"Trigger {begin} not found in triggers {triggers}")
        begin = structure["begin"]
        grammar = _schema_grammar(llg, structure["schema"])
        end = structure["end"]
        tags.append(llg.StructTag(trigger=trigger, begin=begin, grammar=grammar, end=end))
    if not tags:
        raise _TagError("No structural tags found in the grammar spec.")
    return str(llg.StructTag.to_grammar(tags))


class _TagError(Exception):
    # vLLM's own refusals inside the serialization, which reach the client unwrapped.
    pass


@functools.cache
def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as e:
        raise GuidanceUnavailable(
            "This request needs llguidance (vLLM checks its constraint with guidance), which is "
            f"not installed. Install it with:\n    pip install '{LLGUIDANCE_REQUIREMENT}'"
        ) from e
    return llguidance

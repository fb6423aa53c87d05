"""Differential tests: the same OpenAI SDK requests to our frontend and to vLLM's own Python
frontend, each in front of an identical fresh engine, give the same responses.

Everything is compared except what is random or build-specific: ``id``, ``created`` and
``system_fingerprint``. The tiny model's weights are random, so its greedy text is gibberish full
of multi-byte characters and odd tokens, which exercises detokenization for free. Requests go to
both servers in the same order, so the two engines see the same request sequence (and the same
prefix-cache state).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Frontends

pytestmark = pytest.mark.engine

IGNORED = {"id", "created", "system_fingerprint"}
PROMPTS = ["Hello world", "The capital of France is", "Ünïcödé ✓ 日本語のテキスト"]


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in IGNORED}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _diff(ours: Any, ref: Any, path: str = "$") -> list[str]:
    """Differences between two JSON values (floats equal up to 1e-5 relative)."""
    if isinstance(ours, dict) and isinstance(ref, dict):
        out = []
        if set(ours) != set(ref):
            only_ours, only_ref = sorted(set(ours) - set(ref)), sorted(set(ref) - set(ours))
            out.append(f"{path}: key sets differ: ours-only {only_ours}, vllm-only {only_ref}")
        for key in ours.keys() & ref.keys():
            out += _diff(ours[key], ref[key], f"{path}.{key}")
        return out
    if isinstance(ours, list) and isinstance(ref, list):
        if len(ours) != len(ref):
            return [f"{path}: length {len(ours)} != {len(ref)}: {ours!r} vs {ref!r}"]
        return [d for i, (a, b) in enumerate(zip(ours, ref, strict=True))
                for d in _diff(a, b, f"{path}[{i}]")]  # fmt: skip
    if (
        isinstance(ours, float)
        and isinstance(ref, float)
        and (ours == ref or math.isclose(ours, ref, rel_tol=1e-5))
    ):
        return []
    if ours != ref or type(ours) is not type(ref):
        return [f"{path}: {ours!r} != {ref!r}"]
    return []


def assert_same(ours: Any, ref: Any) -> None:
    """Fail with a readable list of differences unless both responses agree."""
    diffs = _diff(_strip(ours), _strip(ref))
    assert not diffs, "ours vs vLLM:\n" + "\n".join(diffs[:30])


Call = Callable[[openai.OpenAI], Any]


def both(sdk: dict[str, openai.OpenAI], call: Call) -> tuple[Any, Any]:
    """Run ``call`` against our server, then vLLM's; return the JSON-able results."""
    results = []
    for name in ("ours", "vllm"):
        result = call(sdk[name])
        if hasattr(result, "__iter__") and not hasattr(result, "model_dump"):
            result = [chunk.model_dump(exclude_unset=True) for chunk in result]
        else:
            result = result.model_dump(exclude_unset=True)
        results.append(result)
    return results[0], results[1]


def _merge_logprobs(into: dict[str, Any] | None, new: dict[str, Any] | None) -> Any:
    if new is None:
        return into
    if into is None:
        return {k: list(v) if isinstance(v, list) else v for k, v in new.items()}
    for k, v in new.items():
        if isinstance(v, list):
            into[k] = (into.get(k) or []) + v
    return into


# Values that depend on how many engine steps a chunk carries, masked in the chunks compared
# whole (their keys still count): the steps' share of text, tokens and logprobs, and continuous
# usage (which counts that share). A choice's first chunk may also be its finishing chunk, so the
# first chunk's finish and stop reason are masked too, and so are the finishing chunk's prompt
# token ids (sent with a choice's first chunk); the choice's summary has the real values.
_STEP_KEYS = ("text", "token_ids", "logprobs")
_FINISH_KEYS = ("finish_reason", "stop_reason")
_FIRST_KEYS = ("prompt_token_ids",)
_VARIES = "<depends on chunking>"


def _masked(chunk: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    out = {k: _VARIES if k == "usage" else v for k, v in chunk.items()}
    out["choices"] = []
    for c in chunk.get("choices", []):
        c = {k: _VARIES if k in keys else v for k, v in c.items()}
        if isinstance(c.get("delta"), dict):
            c["delta"] = {k: _VARIES if k == "content" else v for k, v in c["delta"].items()}
        out["choices"].append(c)
    return out


def _layout(chunk: dict[str, Any], choice: dict[str, Any]) -> tuple[tuple[str, ...], ...]:
    delta = choice.get("delta")
    return (tuple(sorted(chunk)), tuple(sorted(choice)),
            tuple(sorted(delta)) if isinstance(delta, dict) else ())  # fmt: skip


def stream_summary(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a stream says, independent of how its deltas were cut into chunks.

    vLLM coalesces the deltas of several engine steps into one chunk when its HTTP writer falls
    behind (so may we), so chunk boundaries depend on timing: a short choice can arrive as one
    chunk that both starts and finishes it, or with no chunk between its first and its last.
    Compared instead, per choice: its first and its finishing chunk (shape and metadata, see
    _masked), its concatenated text, logprobs and token ids, its finish and stop reason, its
    usage at the finish, how many chunks finish it or come after that; and for the stream: the
    key layouts of the chunks in between (see assert_same_stream), the trailing usage chunk and
    any other chunk without choices.
    """
    choices: dict[int, dict[str, Any]] = {}
    middle_layouts = set()
    choiceless = []
    for n, chunk in enumerate(chunks):
        if not chunk.get("choices"):
            if n < len(chunks) - 1:
                choiceless.append(chunk)
            continue
        # Choices of different samples or prompts interleave in arrival order: per choice.
        for c in chunk["choices"]:
            state = choices.get(c["index"])
            first = state is None
            if state is None:
                state = choices[c["index"]] = {
                    "first_chunk": _masked(chunk, _STEP_KEYS + _FINISH_KEYS), "text": "",
                    "token_ids": [], "logprobs": None, "finish_chunks": 0,
                    "chunks_after_finish": 0,
                }  # fmt: skip
            if state["finish_chunks"]:
                state["chunks_after_finish"] += 1
            delta = c.get("delta")
            if delta is not None:
                state["text"] += delta.get("content") or ""
                if "role" in delta:
                    state["role"] = delta["role"]
            else:
                state["text"] += c.get("text") or ""
            state["token_ids"] += c.get("token_ids") or []
            # Text offsets run on across chunks, so the concatenation agrees however cut.
            state["logprobs"] = _merge_logprobs(state["logprobs"], c.get("logprobs"))
            if c.get("prompt_token_ids") is not None:
                state["prompt_token_ids"] = c["prompt_token_ids"]
            if c.get("finish_reason") is not None:
                state["finish_chunks"] += 1
                state["finish_reason"] = c["finish_reason"]
                state["stop_reason"] = c.get("stop_reason")
                state["finish_chunk"] = _masked(chunk, _STEP_KEYS + _FIRST_KEYS)
                state["usage_at_finish"] = chunk.get("usage")
            elif not first:
                middle_layouts.add(_layout(chunk, c))
    return {
        "choices": choices,
        "middle_layouts": sorted(middle_layouts),
        "choiceless_chunks": choiceless,
        "usage_chunk": chunks[-1] if chunks and not chunks[-1].get("choices") else None,
    }


def assert_same_stream(ours: list[dict[str, Any]], ref: list[dict[str, Any]]) -> None:
    """Fail unless two streams say the same (see stream_summary)."""
    summaries = stream_summary(_strip(ours)), stream_summary(_strip(ref))
    if not all(s["middle_layouts"] for s in summaries):
        # A stream whose steps all arrived coalesced into first and finishing chunks has no
        # chunk in between: the layouts of such chunks are compared only when both have some.
        for s in summaries:
            s["middle_layouts"] = None
    assert_same(*summaries)


def compare(sdk: dict[str, openai.OpenAI], call: Call) -> Any:
    """Assert both servers answer ``call`` alike; return vLLM's answer.

    Streams are compared through :func:`assert_same_stream`.
    """
    ours, ref = both(sdk, call)
    if isinstance(ref, list):
        assert_same_stream(ours, ref)
    else:
        assert_same(ours, ref)
    return ref


def completion(model: str, **kw: Any) -> Call:
    """A ``completions.create`` call (vLLM-only fields go through ``extra_body``)."""
    extra = {k: kw.pop(k) for k in list(kw) if k in _EXTRA}
    return lambda c: c.completions.create(model=model, extra_body=extra or None, **kw)


def chat(model: str, **kw: Any) -> Call:
    """A ``chat.completions.create`` call."""
    extra = {k: kw.pop(k) for k in list(kw) if k in _EXTRA}
    kw.setdefault("messages", [{"role": "user", "content": "Tell me a story."}])
    return lambda c: c.chat.completions.create(model=model, extra_body=extra or None, **kw)


_EXTRA = {
    "return_token_ids", "prompt_logprobs", "ignore_eos", "min_tokens", "stop_token_ids",
    "include_stop_str_in_output", "skip_special_tokens", "top_k", "echo", "add_generation_prompt",
    "continue_final_message", "add_special_tokens", "return_tokens_as_token_ids",
    "return_prompt_text", "repetition_detection",
}  # fmt: skip


def _text_of(chunks: list[dict[str, Any]], index: int = 0) -> str:
    out = []
    for ch in chunks:
        for choice in ch.get("choices", []):
            if choice["index"] != index:
                continue
            delta = choice.get("delta")
            out.append((delta or {}).get("content") or "" if delta is not None else choice["text"])
    return "".join(out)


# --- the headline: greedy requests ---------------------------------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_completion_gives_the_same_text_tokens_and_logprobs(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, prompt: str
) -> None:
    ref = compare(sdk, completion(frontends.model, prompt=prompt, max_tokens=24, temperature=0,
                                  logprobs=5, return_token_ids=True))  # fmt: skip
    assert ref["choices"][0]["token_ids"] and len(ref["choices"][0]["token_ids"]) <= 24


def test_greedy_chat_gives_the_same_text_tokens_and_logprobs(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    compare(sdk, chat(frontends.model, max_tokens=24, temperature=0, logprobs=True,
                      top_logprobs=3, return_token_ids=True))  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_chat_returns_the_rendered_prompt_on_request(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, stream: bool
) -> None:
    compare(sdk, chat(frontends.model, max_tokens=3, temperature=0, return_prompt_text=True,
                      stream=stream))  # fmt: skip


def test_chat_with_a_system_prompt_and_history(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello. ✓"},
        {"role": "user", "content": "Count to three in Japanese: 一、二、三"},
    ]
    compare(sdk, chat(frontends.model, messages=messages, max_tokens=16, temperature=0))


def test_long_greedy_generation_with_multibyte_text_matches(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    ref = compare(sdk, completion(frontends.model, prompt="日本語", max_tokens=120, temperature=0,
                                  logprobs=1))  # fmt: skip
    assert any(ord(ch) > 127 for ch in ref["choices"][0]["text"]), "expected non-ASCII output"


# --- streaming ----------------------------------------------------------------------------------


@pytest.mark.parametrize("continuous", [False, True])
def test_streamed_completion_chunks_match(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, continuous: bool
) -> None:
    ref = compare(sdk, completion(
        frontends.model, prompt=PROMPTS[0], max_tokens=12, temperature=0, logprobs=2, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": continuous}))  # fmt: skip
    assert ref[-1]["choices"] == [] and ref[-1]["usage"]["completion_tokens"] == 12


@pytest.mark.parametrize("continuous", [False, True])
def test_streamed_chat_chunks_match(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, continuous: bool
) -> None:
    ref = compare(sdk, chat(
        frontends.model, max_tokens=12, temperature=0, stream=True, logprobs=True,
        top_logprobs=2, stream_options={"include_usage": True,
                                        "continuous_usage_stats": continuous}))  # fmt: skip
    assert ref[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_streamed_chat_without_usage_matches(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    ref = compare(sdk, chat(frontends.model, max_tokens=8, temperature=0, stream=True,
                            return_token_ids=True))  # fmt: skip
    assert ref[-1]["choices"][0]["finish_reason"] == "length"


def test_stream_and_full_response_tell_the_same_story(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    full = compare(sdk, chat(frontends.model, max_tokens=20, temperature=0))
    streamed = compare(sdk, chat(frontends.model, max_tokens=20, temperature=0, stream=True))
    assert _text_of(streamed) == full["choices"][0]["message"]["content"]


# --- stops ----------------------------------------------------------------------------------------


def _greedy_text(sdk: dict[str, openai.OpenAI], model: str, prompt: str, n: int = 30) -> str:
    out = sdk["vllm"].completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
    sdk["ours"].completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
    return out.choices[0].text


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_cuts_the_text_alike(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, include: bool, stream: bool
) -> None:
    text = _greedy_text(sdk, frontends.model, PROMPTS[1])
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop.strip(), text
    ref = compare(sdk, completion(frontends.model, prompt=PROMPTS[1], max_tokens=30, temperature=0,
                                  stop=[stop, "@@never@@"], include_stop_str_in_output=include,
                                  stream=stream, return_token_ids=True))  # fmt: skip
    final = ref[-1] if stream else ref
    if not stream:
        assert final["choices"][0]["stop_reason"] == stop


def test_stop_string_in_chat_stream(sdk: dict[str, openai.OpenAI], frontends: Frontends) -> None:
    full = compare(sdk, chat(frontends.model, max_tokens=30, temperature=0))
    text = full["choices"][0]["message"]["content"]
    stop = text[10:12]
    compare(sdk, chat(frontends.model, max_tokens=30, temperature=0, stop=stop, stream=True))


def test_stop_token_ids_end_generation_with_that_id_as_reason(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    first = compare(sdk, completion(frontends.model, prompt=PROMPTS[0], max_tokens=10,
                                    temperature=0, return_token_ids=True))  # fmt: skip
    stop_id = first["choices"][0]["token_ids"][4]
    ref = compare(sdk, completion(frontends.model, prompt=PROMPTS[0], max_tokens=10,
                                  temperature=0, stop_token_ids=[stop_id],
                                  return_token_ids=True))  # fmt: skip
    assert ref["choices"][0]["stop_reason"] == stop_id


# Token 128009 is <|eot_id|> (the tokenizer's EOS), 128001 <|end_of_text|> (an extra EOS of the
# generation config), 128006 <|start_header_id|>: a large logit bias makes the random model emit
# them on demand.
EOT, END_OF_TEXT, HEADER = 128009, 128001, 128006


def test_eos_stops_generation_unless_ignore_eos(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    bias = {str(EOT): 100}
    stopped = compare(sdk, completion(frontends.model, prompt=PROMPTS[0], max_tokens=8,
                                      temperature=0, logit_bias=bias,
                                      return_token_ids=True))  # fmt: skip
    assert stopped["choices"][0]["finish_reason"] == "stop"
    ignored = compare(sdk, completion(frontends.model, prompt=PROMPTS[0], max_tokens=8,
                                      temperature=0, logit_bias=bias, ignore_eos=True,
                                      return_token_ids=True))  # fmt: skip
    assert ignored["choices"][0]["finish_reason"] == "length"


def test_generation_config_eos_is_a_stop_token(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    ref = compare(sdk, chat(frontends.model, max_tokens=8, temperature=0,
                            logit_bias={str(END_OF_TEXT): 100}, return_token_ids=True))  # fmt: skip
    assert ref["choices"][0]["stop_reason"] == END_OF_TEXT


@pytest.mark.parametrize("stream", [False, True])
def test_repetition_detection_ends_a_looping_generation(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, stream: bool
) -> None:
    ref = compare(sdk, completion(frontends.model, prompt=PROMPTS[0], max_tokens=30,
                                  temperature=0, logit_bias={"264": 100}, stream=stream,
                                  repetition_detection={"max_pattern_size": 2, "min_count": 3},
                                  return_token_ids=True))  # fmt: skip
    if not stream:
        assert ref["choices"][0]["finish_reason"] == "repetition"


def test_min_tokens_holds_eos_back(sdk: dict[str, openai.OpenAI], frontends: Frontends) -> None:
    ref = compare(sdk, completion(frontends.model, prompt=PROMPTS[0], max_tokens=12,
                                  temperature=0, logit_bias={str(EOT): 100}, min_tokens=5,
                                  return_token_ids=True, stream=True))  # fmt: skip
    assert ref


@pytest.mark.parametrize("skip", [True, False])
def test_special_tokens_in_output_follow_skip_special_tokens(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, skip: bool
) -> None:
    compare(sdk, completion(frontends.model, prompt="<|begin_of_text|>Hi<|eot_id|>",
                            max_tokens=10, temperature=0, logit_bias={str(HEADER): 8},
                            skip_special_tokens=skip, logprobs=1,
                            return_token_ids=True))  # fmt: skip


def test_special_tokens_in_chat_prompts_are_tokenized_alike(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    messages = [{"role": "user", "content": "<|eot_id|>what<|start_header_id|> ?"}]
    compare(sdk, chat(frontends.model, messages=messages, max_tokens=8, temperature=0,
                      return_token_ids=True, skip_special_tokens=False))  # fmt: skip


# --- logprobs and echo --------------------------------------------------------------------------


def test_prompt_logprobs_match(sdk: dict[str, openai.OpenAI], frontends: Frontends) -> None:
    compare(sdk, completion(frontends.model, prompt=PROMPTS[2], max_tokens=4, temperature=0,
                            prompt_logprobs=3))  # fmt: skip
    compare(sdk, chat(frontends.model, max_tokens=4, temperature=0, prompt_logprobs=1))


@pytest.mark.parametrize("max_tokens", [0, 6])
def test_echo_returns_the_prompt_with_its_logprobs(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, max_tokens: int
) -> None:
    ref = compare(sdk, completion(frontends.model, prompt=PROMPTS[2], max_tokens=max_tokens,
                                  temperature=0, echo=True, logprobs=2))  # fmt: skip
    assert ref["choices"][0]["text"].startswith(PROMPTS[2])


def test_echo_streamed(sdk: dict[str, openai.OpenAI], frontends: Frontends) -> None:
    compare(sdk, completion(frontends.model, prompt=PROMPTS[0], max_tokens=5, temperature=0,
                            echo=True, stream=True, logprobs=1))  # fmt: skip


def test_chat_echo_continues_the_final_assistant_message(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Well,"}]
    kw: dict[str, Any] = dict(messages=messages, max_tokens=6, temperature=0, echo=True,
                              add_generation_prompt=False, continue_final_message=True)  # fmt: skip
    full = compare(sdk, chat(frontends.model, **kw))
    assert full["choices"][0]["message"]["content"].startswith("Well,")
    # Streamed, vLLM 0.32 fails here (it puts the message's content-part list into a
    # DeltaMessage, a pydantic error sent as an SSE error event); we stream the echoed text
    # first, as its non-streaming response and vllm-rs do.
    chunks = [c.model_dump() for c in chat(frontends.model, stream=True, **kw)(sdk["ours"])]
    assert _text_of(chunks) == full["choices"][0]["message"]["content"]


def test_return_tokens_as_token_ids(sdk: dict[str, openai.OpenAI], frontends: Frontends) -> None:
    compare(sdk, chat(frontends.model, max_tokens=5, temperature=0, logprobs=True,
                      top_logprobs=2, return_tokens_as_token_ids=True))  # fmt: skip


# --- n > 1 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_two_seeded_samples_match(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, stream: bool
) -> None:
    ours, ref = both(sdk, completion(frontends.model, prompt=PROMPTS[0], max_tokens=10, n=2,
                                     seed=1234, temperature=1.0, stream=stream,
                                     return_token_ids=True))  # fmt: skip
    if stream:
        # The two samples' chunks interleave in arrival order: compare what each choice says.
        assert_same_stream(ours, ref)
    else:
        assert_same(ours, ref)
    ours, ref = both(sdk, chat(frontends.model, max_tokens=10, n=2, seed=99, temperature=0.8,
                               logprobs=True))  # fmt: skip
    assert_same(ours, ref)


# --- the context limit and bad requests ---------------------------------------------------------


def _prompt_of_tokens(sdk: dict[str, openai.OpenAI], frontends: Frontends, n: int) -> list[int]:
    # " a" is one Llama 3 token; with the BOS that makes n tokens.
    return [128000] + [264] * (n - 1)


def test_max_tokens_fills_the_context_exactly(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    limit = frontends.max_model_len
    prompt = _prompt_of_tokens(sdk, frontends, limit - 5)
    ref = compare(sdk, completion(frontends.model, prompt=prompt, max_tokens=5, temperature=0,
                                  ignore_eos=True))  # fmt: skip
    assert ref["usage"]["completion_tokens"] == 5
    ref = compare(sdk, completion(frontends.model, prompt=prompt, max_tokens=50, temperature=0,
                                  ignore_eos=True))  # fmt: skip
    assert ref["usage"]["total_tokens"] == limit
    text = "word " * (limit - 40)
    compare(sdk, chat(frontends.model, messages=[{"role": "user", "content": text}],
                      temperature=0, ignore_eos=True))  # fmt: skip


@pytest.mark.parametrize(
    "prompt,truncate,side",
    [
        (PROMPTS[2], 4, None),
        (PROMPTS[2], 4, "left"),
        (PROMPTS[2], 4, "right"),
        ([128000, 9906, 1917, 264, 264, 264], 3, None),
        ([128000, 9906, 1917, 264, 264, 264], 3, "left"),
        ("word " * 400, -1, None),
    ],
)  # fmt: skip
def test_truncate_prompt_tokens_keeps_the_same_prompt_tokens(
    sdk: dict[str, openai.OpenAI],
    frontends: Frontends,
    prompt: str | list[int],
    truncate: int,
    side: str | None,
) -> None:
    extra: dict[str, Any] = {"truncate_prompt_tokens": truncate}
    if side is not None:
        extra["truncation_side"] = side
    ref = compare(sdk, lambda c: c.completions.create(
        model=frontends.model, prompt=prompt, max_tokens=3, temperature=0,
        extra_body={"return_token_ids": True, **extra}))  # fmt: skip
    assert len(ref["choices"][0]["prompt_token_ids"]) == (
        truncate if truncate > 0 else frontends.max_model_len - 1
    )
    messages: list[Any] = [{"role": "user", "content": "one two three four five six seven"}]
    compare(sdk, lambda c: c.chat.completions.create(
        model=frontends.model, messages=messages, max_tokens=3, temperature=0,
        extra_body={"return_token_ids": True, "truncate_prompt_tokens": 12,
                    **({"truncation_side": side} if side else {})}))  # fmt: skip


def _raw(frontends: Frontends, path: str, body: dict[str, Any]) -> list[tuple[int, Any]]:
    out = []
    for url in (frontends.ours, frontends.vllm):
        r = httpx.post(url + path, json=body, timeout=60)
        try:
            payload = r.json()
        except json.JSONDecodeError:
            payload = r.text
        out.append((r.status_code, payload))
    return out


_CHAT_X = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    "path,body",
    [
        pytest.param("/v1/completions", {"prompt": [128000] + [264] * 300, "max_tokens": 4},
                     id="prompt-too-long"),
        pytest.param("/v1/completions", {"prompt": "hi", "max_tokens": 100000},
                     id="max-tokens-too-large"),
        pytest.param("/v1/completions", {"prompt": "hi", "model": "no-such-model"},
                     id="unknown-model"),
        pytest.param("/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "word " * 300}]},
                     id="chat-prompt-too-long"),
        pytest.param("/v1/chat/completions", {"messages": _CHAT_X, "n": 2, "temperature": 0},
                     id="greedy-n2"),
        pytest.param("/v1/chat/completions",
                     {"messages": _CHAT_X, "max_completion_tokens": 300},
                     id="max-completion-tokens-too-large"),
        pytest.param("/v1/completions", {"prompt": "hi", "truncate_prompt_tokens": 300},
                     id="truncate-above-context"),
        pytest.param("/v1/completions", {"prompt": "hi", "suffix": "there"}, id="suffix"),
        pytest.param("/v1/completions", {"prompt": "hi", "suffix": "x", "echo": True},
                     id="suffix-with-echo"),
        pytest.param("/v1/completions", {"prompt": "hi", "prompt_embeds": "AAAA"},
                     id="prompt-embeds"),
        pytest.param("/v1/completions", {"prompt": "hi", "max_tokens": 0}, id="max-tokens-0"),
        pytest.param("/v1/completions", {"prompt": "hi", "max_tokens": 4, "min_tokens": 8},
                     id="min-tokens-above-max"),
        pytest.param("/v1/completions", {"prompt": "hi", "logprobs": 21},
                     id="logprobs-above-max"),
        pytest.param("/v1/chat/completions",
                     {"messages": _CHAT_X, "logprobs": True, "top_logprobs": 21},
                     id="top-logprobs-above-max"),
        pytest.param("/v1/completions", {"prompt": "hi", "stop": [""]}, id="empty-stop-string"),
        pytest.param("/v1/completions", {"prompt": "hi", "temperature": 3}, id="temperature-3"),
        pytest.param("/v1/completions", {"prompt": [128000, 999999]}, id="token-out-of-vocab"),
        pytest.param("/v1/completions", {"prompt": []}, id="empty-prompt-list"),
        pytest.param("/v1/completions", {"prompt": [], "stream": True},
                     id="empty-prompt-list-streamed"),
    ],
)  # fmt: skip
def test_bad_requests_get_vllms_status_and_error(
    frontends: Frontends, path: str, body: dict[str, Any]
) -> None:
    body = {"model": frontends.model, **body}
    (ours_status, ours), (ref_status, ref) = _raw(frontends, path, body)
    assert ref_status >= 400
    assert (ours_status, ours) == (ref_status, ref)
    # A refused request leaves the server healthy and nothing behind in the engine.
    assert httpx.get(frontends.ours + "/health", timeout=10).status_code == 200
    if frontends.our_engine_client is not None:
        assert frontends.our_engine_client.num_in_flight == 0


def test_x_request_id_names_the_response(frontends: Frontends) -> None:
    for path, body, prefix in (
        ("/v1/completions", {"prompt": "hi", "max_tokens": 2}, "cmpl"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "max_tokens": 2}, "chatcmpl"),
    ):  # fmt: skip
        ids = [
            httpx.post(url + path, json={"model": frontends.model, **body},
                       headers={"X-Request-Id": "my-id-42"}, timeout=60).json()["id"]
            for url in (frontends.ours, frontends.vllm)
        ]  # fmt: skip
        assert ids == [f"{prefix}-my-id-42"] * 2


@pytest.mark.parametrize("stream", [False, True])
def test_several_prompts_in_one_completion_request(
    sdk: dict[str, openai.OpenAI], frontends: Frontends, stream: bool
) -> None:
    ref = compare(sdk, completion(frontends.model, prompt=PROMPTS, max_tokens=6, temperature=0,
                                  logprobs=1, stream=stream))  # fmt: skip
    if not stream:
        assert [c["index"] for c in ref["choices"]] == [0, 1, 2]


def test_raw_response_bodies_have_vllms_keys(frontends: Frontends) -> None:
    body = {"model": frontends.model, "prompt": PROMPTS[0], "max_tokens": 3, "temperature": 0}
    (s1, ours), (s2, ref) = _raw(frontends, "/v1/completions", body)
    assert s1 == s2 == 200
    assert_same(ours, ref)
    body = {"model": frontends.model, "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 3, "temperature": 0}  # fmt: skip
    (s1, ours), (s2, ref) = _raw(frontends, "/v1/chat/completions", body)
    assert s1 == s2 == 200
    assert_same(ours, ref)


def _usages(path: str, status: int, payload: Any) -> list[Any]:
    # a full answer's usage, or each usage a stream's events carry
    assert status == 200, payload
    if isinstance(payload, dict):
        return [payload["usage"]]
    out = []
    for line in payload.split("\n"):
        if line.startswith("data: {"):
            event = json.loads(line[6:])
            out += [u for u in (event.get("usage"), event.get("message", {}).get("usage")) if u]
    return out


def test_usage_counts_the_prefix_cache_as_vllm(frontends: Frontends) -> None:
    # --enable-prompt-tokens-details on both: a long prompt sent twice is read from the prefix
    # cache the second time (each engine sees the same requests in the same order)
    text = "The quick brown fox jumps over the lazy dog. " * 12
    messages = [{"role": "user", "content": text}]
    stream = {"stream": True, "stream_options": {"include_usage": True}}
    calls = [
        ("/v1/completions", {"prompt": text}), ("/v1/completions", {"prompt": text, **stream}),
        ("/v1/chat/completions", {"messages": messages}),
        ("/v1/chat/completions", {"messages": messages}),
        ("/v1/chat/completions", {"messages": messages, **stream}),
        ("/v1/messages", {"messages": messages}),
        ("/v1/messages", {"messages": messages, "stream": True}),
    ]  # fmt: skip
    seen = []
    for path, fields in calls:
        body = {"model": frontends.model, "max_tokens": 3, "temperature": 0, **fields}
        (s1, ours), (s2, ref) = _raw(frontends, path, body)
        assert _usages(path, s1, ours) == _usages(path, s2, ref), path
        seen += _usages(path, s2, ref)
    cached = [u["prompt_tokens_details"]["cached_tokens"] for u in seen if "prompt_tokens" in u]
    assert max(cached) > 0
    assert any(u.get("cache_read_input_tokens") for u in seen)


# --- metrics ----------------------------------------------------------------------------------

_COUNTED = (
    "vllm:request_success_total",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:request_prompt_tokens_count",
    "vllm:request_generation_tokens_sum",
    "vllm:request_params_max_tokens_sum",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:time_to_first_token_seconds_count",
    "vllm:inter_token_latency_seconds_count",
    "vllm:request_params_n_count",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
)


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=30).text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in _COUNTED:
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_count_requests_like_vllm(
    sdk: dict[str, openai.OpenAI], frontends: Frontends
) -> None:
    before = {name: _scrape(url) for name, url in (("ours", frontends.ours),
                                                   ("vllm", frontends.vllm))}  # fmt: skip
    compare(sdk, completion(frontends.model, prompt=PROMPTS[0], max_tokens=7, temperature=0))
    compare(sdk, completion(frontends.model, prompt=PROMPTS[1], max_tokens=7, temperature=0,
                            logit_bias={str(EOT): 100}))  # fmt: skip
    compare(sdk, chat(frontends.model, max_tokens=5, temperature=0, stream=True))
    after = {name: _scrape(url) for name, url in (("ours", frontends.ours),
                                                  ("vllm", frontends.vllm))}  # fmt: skip
    deltas = {
        name: {k: v - before[name].get(k, 0.0) for k, v in after[name].items()}
        for name in ("ours", "vllm")
    }
    assert deltas["ours"] == deltas["vllm"]
    success = {dict(k[1])["finished_reason"]: v for k, v in deltas["vllm"].items()
               if k[0] == "vllm:request_success_total"}  # fmt: skip
    assert success["length"] == 2 and success["stop"] == 1


# --- disconnects (ours only: needs our engine client's view) ------------------------------------


def _generated_text(event: str) -> str:
    choice = json.loads(event.removeprefix("data: "))["choices"][0]
    return str(choice.get("text") or (choice.get("delta") or {}).get("content") or "")


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": PROMPTS[0]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Go on."}]}),
])  # fmt: skip
def test_client_disconnect_mid_stream_aborts_the_engine_request(
    frontends: Frontends, path: str, body: dict[str, Any]
) -> None:
    client, engines = frontends.our_engine_client, frontends.our_engines
    if client is None or engines is None:
        pytest.skip("needs our in-process server and its engine")
    body = {"model": frontends.model, "max_tokens": 200, "ignore_eos": True, "stream": True,
            "temperature": 0, **body}  # fmt: skip
    with httpx.Client(timeout=60) as http:
        response = http.send(http.build_request("POST", frontends.ours + path, json=body),
                             stream=True)  # fmt: skip
        try:
            assert response.status_code == 200
            # Mid-stream: read until generated text has arrived.
            events = (line for line in response.iter_lines() if line.startswith("data: {"))
            assert any(_generated_text(event) for event in events)
            # A frozen engine can neither finish the request nor say anything: from here on,
            # only the server noticing the closed connection can end the request (its 200
            # tokens take the engine, niced below this process, far longer than reading one).
            with engines.paused():
                response.close()
                deadline = time.monotonic() + 30
                while client.num_in_flight and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert client.num_in_flight == 0
        finally:
            response.close()
    # The server keeps serving, and the engine really dropped the request: the abort reached it
    # before this request did, so nothing is left running once this one is done.
    r = httpx.post(frontends.ours + "/v1/completions", timeout=60,
                   json={"model": frontends.model, "prompt": "hi", "max_tokens": 2})  # fmt: skip
    assert r.status_code == 200
    gauges = {name: v for (name, _), v in _scrape(frontends.ours).items()
              if name in ("vllm:num_requests_running", "vllm:num_requests_waiting")}  # fmt: skip
    assert gauges == {"vllm:num_requests_running": 0, "vllm:num_requests_waiting": 0}

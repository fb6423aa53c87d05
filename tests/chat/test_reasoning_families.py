"""Every ``--reasoning-parser`` name of vLLM 0.32 is served exactly as vLLM does, or refused.

Reference: vLLM's own parsers, composed by ``ParserManager.get_parser`` as its chat serving does,
on the tiny Llama 3 tokenizer with the family's markers added as single tokens. For each name, a
corpus of outputs (start/end markers, only the end, truncated, unicode, reasoning or content
only) is compared whole and streamed in many chunkings (the concatenated reasoning and content a
client assembles), with and without the chat template kwargs that switch thinking.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.hf_tokenizer import fresh_tokenizer
from vllm_frontend.chat.output_parser import (
    OutputParsers,
    ParserConfigError,
    RequestToolOptions,
    resolve_reasoning_parser,
)
from vllm_frontend.chat.reasoning_parsers import (
    REASONING_PARSERS,
    REFUSED_REASONING_PARSERS,
    ModelFacts,
)

pytestmark = pytest.mark.oracle  # imports vLLM or transformers as the reference

pytest.importorskip("vllm")


@dataclass(frozen=True)
class Family:
    """How a family's outputs look: its markers and a prompt that ends its chat template."""

    start: str
    end: str
    tokens: tuple[str, ...]
    """Added as single (non-special) tokens; ``special`` as special tokens."""
    special: tuple[str, ...]
    prompt: str
    kwargs: tuple[dict[str, Any], ...] = ({},)
    """Chat template kwargs variants to run the corpus with."""
    extra: tuple[str, ...] = ()
    """Outputs of the family's own shape, added to the shared corpus."""


_CHATML = ("<|im_start|>", "<|im_end|>")
_CHATML_PROMPT = "<|im_start|>user\nWhat is the weather?<|im_end|>\n<|im_start|>assistant\n"
_THINK = ("<think>", "</think>", "<tool_call>", "</tool_call>")
_ON_OFF = ({}, {"enable_thinking": False}, {"enable_thinking": True})
_V3_KWARGS = (
    {},
    {"thinking": True},
    {"enable_thinking": True},
    {"thinking": False},
    {"thinking": None},
    {"thinking": False, "enable_thinking": True},
)

FAMILIES: dict[str, Family] = {
    "deepseek_r1": Family("<think>", "</think>", _THINK, _CHATML, _CHATML_PROMPT),
    "deepseek_v3": Family("<think>", "</think>", _THINK, _CHATML, _CHATML_PROMPT, _V3_KWARGS),
    "holo2": Family("<think>", "</think>", _THINK, _CHATML, _CHATML_PROMPT, _V3_KWARGS),
    "poolside_v1": Family(
        "<think>",
        "</think>",
        (*_THINK, "<assistant>"),
        _CHATML,
        "<user>What is the weather?</think><assistant>",
        _V3_KWARGS,
    ),
    "ernie45": Family(
        "<think>",
        "</think>",
        (*_THINK, "<response>", "</response>"),
        _CHATML,
        _CHATML_PROMPT,
    ),
    "step3": Family("<think>", "</think>", _THINK, _CHATML, _CHATML_PROMPT),
    "minimax_m2_append_think": Family("<think>", "</think>", _THINK, _CHATML, _CHATML_PROMPT),
    "qwen3": Family("<think>", "</think>", _THINK, _CHATML, _CHATML_PROMPT, _ON_OFF),
    "mimo": Family("<think>", "</think>", _THINK, _CHATML, _CHATML_PROMPT, _ON_OFF),
    "step3p5": Family("<think>", "</think>", _THINK, _CHATML, _CHATML_PROMPT, _ON_OFF),
    "ling3": Family(
        "<think>",
        "</think>",
        _THINK,
        ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"),
        "<|user|>What is the weather?<|assistant|>",
        _V3_KWARGS,
    ),
    "glm45": Family(
        "<think>",
        "</think>",
        _THINK,
        ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"),
        "<|user|>What is the weather?<|assistant|>",
        _V3_KWARGS,
    ),
    "glm47": Family(
        "<think>",
        "</think>",
        _THINK,
        ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"),
        "<|user|>What is the weather?<|assistant|>",
        _V3_KWARGS,
    ),
    "hy_v3": Family(
        "<think>",
        "</think>",
        _THINK,
        _CHATML,
        _CHATML_PROMPT,
        ({}, *({"reasoning_effort": e} for e in ("low", "no_think", "none"))),
    ),
    "minimax_m2": Family(
        "<think>",
        "</think>",
        ("<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>"),
        _CHATML,
        _CHATML_PROMPT,
        _ON_OFF,
    ),
    "nemotron_v3": Family(
        "<think>",
        "</think>",
        _THINK,
        _CHATML,
        _CHATML_PROMPT,
        (
            {},
            {"enable_thinking": False},
            {"force_nonempty_content": True},
            {"enable_thinking": True, "force_nonempty_content": True},
        ),
    ),
    "kimi_k2": Family(
        "<think>",
        "</think>",
        ("<think>", "</think>"),
        ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", *_CHATML),
        _CHATML_PROMPT,
        _V3_KWARGS,
    ),
    "deepseek_v4": Family(
        "<think>",
        "</think>",
        ("<think>", "</think>"),
        ("<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>", *_CHATML),
        _CHATML_PROMPT,
        ({}, {"thinking": False, "enable_thinking": True}, {"reasoning_effort": "none"}),
    ),
    "deepseek_v41": Family(
        "<think>",
        "</think>",
        ("<think>", "</think>"),
        ("<｜DSML｜ calls>", "</｜DSML｜ calls>", *_CHATML),
        _CHATML_PROMPT,
        ({}, {"thinking": False}),
    ),
    "granite_thinking_parser": Family(
        "<think>",
        "</think>",
        _THINK,
        _CHATML,
        _CHATML_PROMPT,
        ({}, {"enable_thinking": False}, {"force_nonempty_content": True}),
    ),
    "inkling": Family(
        "<|content_thinking|>",
        "<|end_message|>",
        (),
        (
            "<|message_model|>",
            "<|content_text|>",
            "<|content_thinking|>",
            "<|content_invoke_tool_json|>",
            "<|content_model_end_sampling|>",
            "<|end_message|>",
        ),
        "<|message_user|>What is the weather?<|end_message|><|message_model|>",
    ),
    "mistral": Family(
        "[THINK]",
        "[/THINK]",
        (),
        ("[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]", "</s>"),
        "[INST]What is the weather?[/INST]",
    ),
    "gemma4": Family(
        "<|channel>",
        "<channel|>",
        (),
        ("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<|turn>", "<turn|>"),
        "<|turn>user\nWhat is the weather?<turn|>\n<|turn>model\n",
        _ON_OFF,
    ),
    "hy_v4": Family(
        "<think>",
        "</think>",
        _THINK,
        _CHATML,
        _CHATML_PROMPT,
        ({}, *({"reasoning_effort": e} for e in ("no_think", ""))),
    ),
    # olmo3 writes its markers with ordinary vocabulary pieces ("</", "think", ">").
    "olmo3": Family(
        "<think>",
        "</think>",
        (),
        _CHATML,
        _CHATML_PROMPT,
        extra=(
            "a </think> b",
            "<thi",
            "x</thi",
            "reason</think>",
            "<think>a<think>b</think>c</think>d",
            "one <<think>> two",
        ),
    ),
    "granite": Family(
        "Here is my thought process:",
        "Here is my response:",
        (),
        (),
        "<|start_of_role|>assistant<|end_of_role|>",
        extra=(
            "Here's my thought process: plan Here's my response: answer",
            "Here's my thought process:\nHere is my resp",
            "Here is my thought process: Here we go. Here is my response: Here it is: done",
            "Here is my thought process: a Here is no response: b Here's my response:c",
            "Here",
            "Here is my thought",
            "Here is my thoughts: no",
            "Intro. Here is my thought process: a Here is my response: b",
            "Here is my thought process:Here is my response:",
            "Here is my thought process: x: y Here: z Here is my response: w: v",
        ),
    ),
    "hunyuan_a13b": Family(
        "<think>\n",
        "\n</think>\n<answer>\n",
        (),
        _CHATML,
        _CHATML_PROMPT,
        extra=(
            "<think>\nplan\n</think>\n<answer>\nIt is sunny.\n</answer>",
            "<think>\n\nplan</think>\n<answer>\nok\n</answer>",
            "<think>\nplan\n</think>\n<answ",
            "<think>\nplan\n</thinking> more\n</think>\n<answer>\nok",
            "Just an answer.\n</answer>",
            "<think>\n</think>\n<answer>\n",
            "<th\nink",
        ),
    ),
    "minimax_m3": Family(
        "<mm:think>",
        "</mm:think>",
        ("<mm:think>", "</mm:think>", "<minimax:tool_call>", "</minimax:tool_call>"),
        _CHATML,
        _CHATML_PROMPT,
        ({}, {"thinking_mode": "enabled"}),
        extra=(
            "</mm:think>stray closer first",
            "</mm:thi",
            "<mm:thi",
            "a <mm:think> b </mm:thi",
            "text </mm:think> more </mm:think> end",
            "<mm:think>x</mm:think><mm:think>y</mm:think>z",
            "<mm:<mm:think>x",
        ),
    ),
    # Cohere Command: the whole output goes through cohere_melody's filter.
    **{
        name: Family(
            "<|START_THINKING|>",
            "<|END_THINKING|>",
            (),
            (
                "<|START_THINKING|>",
                "<|END_THINKING|>",
                "<|START_RESPONSE|>",
                "<|END_RESPONSE|>",
                "<|START_ACTION|>",
                "<|END_ACTION|>",
                "<|CHATBOT_TOKEN|>",
                "<|START_OF_TURN_TOKEN|>",
                "<|END_OF_TURN_TOKEN|>",
            ),
            "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>What is the weather?<|END_OF_TURN_TOKEN|>"
            "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
            extra=(
                "<|START_THINKING|>plan<|END_THINKING|><|START_RESPONSE|>Sunny with a "
                "<co>quote</co: 0:[0]>.<|END_RESPONSE|>",
                "<|START_RESPONSE|>no thinking<|END_RESPONSE|>",
                "<|START_THINKING|>x<|END_THINKING|><|START_ACTION|>[]<|END_ACTION|>",
                "<|START_THI",
            ),
        )
        for name in ("cohere_command3", "cohere_command4")
    },
    # MiniCPM-V: the Qwen3 grammar, <|im_end|> and reserved markers dropped, escaped newlines
    # ("\\n" written as two characters) recovered outside code and LaTeX.
    "minicpmv": Family(
        "<think>",
        "</think>",
        (*_THINK, *(f"<reserved_{i}>" for i in range(12, 16))),
        (*_CHATML, *(f"<|reserved_{i}|>" for i in range(12, 16))),
        _CHATML_PROMPT,
        _ON_OFF,
        extra=(
            "<think>plan\\nstep 2</think>Answer:\\nline two<|im_end|>",
            "<think>a\\r\\nb</think>`code\\n` and $x\\n$ and \\(y\\n\\) and ```\\n``` ok\\n",
            "plan<|reserved_12|> more<reserved_13></think>tail \\\\n double \\x\\",
            "no think at all\\n<think>hidden</think>shown<|im_end|>",
            "<think>x</think>a<|reserved_15|>b</think>c <think>d",
            "<think>x\\",
            "text $$ open\\n",
            "<think>r</think><tool_call>\\n<function=f>\\n</function>\\n</tool_call>",
        ),
    ),
    # Kimi K3: XTML markers of three tokens each; the response channel is unwrapped.
    "kimi_k3": Family(
        "<|open|>think<|sep|>",
        "<|close|>think<|sep|>",
        (),
        ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"),
        "<|open|>user<|sep|>What is the weather?<|close|>user<|sep|><|open|>assistant<|sep|>",
        (
            {},
            {"thinking": False},
            {"enable_thinking": False},
            {"thinking": True, "enable_thinking": False},
        ),
        extra=(
            "<|open|>think<|sep|>plan<|close|>think<|sep|><|open|>response<|sep|>Sunny."
            "<|close|>response<|sep|><|close|>message<|sep|>",
            "<|open|>response<|sep|>no thinking<|close|>response<|sep|>",
            "plan<|close|>think<|sep|>answer <|close|>message<|sep|>",
            "<|open|>think<|sep|>x<|close|>think<|sep|><|open|>response<|sep|>cut <|clo",
            "<|open|>thi",
            "a<|close|>think<|sep|>b<|open|>think<|sep|>c<|close|>think<|sep|>d",
        ),
    ),
    # MuseGlimmer: reasoning in to=self channels, the answer in to=user, tools in the others.
    "muse_glimmer": Family(
        "to=self<|message|>",
        "<|eom|>",
        ("<atem:function_calls>", "</atem:function_calls>"),
        ("<|start|>", "<|message|>", "<|eom|>", "<|eot|>"),
        "<|start|>user<|message|>What is the weather?<|eot|><|start|>assistant",
        extra=(
            "to=self<|message|>plan<|eom|><|start|>assistant to=user<|message|>Sunny.<|eot|>",
            "to=self<|message|>a<|eom|>to=self<|message|>b<|eom|>to=user<|message|>c",
            "to=self<|message|>plan<|eom|><|start|>assistant to=get_weather<|message|>"
            '<atem:function_calls>\n<atem:invoke name="get_weather">'
            '<atem:parameter name="city">Paris</atem:parameter></atem:invoke>\n'
            "</atem:function_calls><|eom|>",
            "to=self<|message|>I could call <atem:invoke name=x> here<|eom|>"
            "to=user<|message|>no<|eot|>",
            "to=self<|message|>open reasoning then to=get_time<|message|><atem:invoke",
            "to=self<|message|>tail to",
            "to=self<|message|>tail <|eo",
            "to=user<|message|>answer only <|st",
            "plain text, no framing",
            "to=user<|message|><atem:function_calls>x",
        ),
    ),
    "k2_horizon": Family(
        "<ifm|think>",
        "</ifm|think>",
        (
            "<ifm|think>",
            "</ifm|think>",
            "<ifm|think_fast>",
            "</ifm|think_fast>",
            "<ifm|think_faster>",
            "</ifm|think_faster>",
            "<ifm|tool_calls>",
            "</ifm|tool_calls>",
        ),
        _CHATML,
        _CHATML_PROMPT,
        ({}, *({"reasoning_effort": e} for e in ("medium", "low"))),
        extra=(
            "<ifm|think_fast>quick</ifm|think_fast>answer",
            "<ifm|think_faster>quicker</ifm|think_faster>answer",
            "plan <ifm|tool_calls><ifm|tool_call>x</ifm|tool_call></ifm|tool_calls>",
            "plan <ifm|tool_c",
            "plan </ifm|thi",
            "<ifm|thi",
            "<ifm|think>",
            "  leading <ifm|think>inner</ifm|think>",
        ),
    ),
    # PLaMo 3: markers of three tokens each ("<|plamo:begin_", the word, ":plamo|>").
    "plamo3": Family(
        "<|plamo:begin_think:plamo|>",
        "<|plamo:end_think:plamo|>",
        ("<|plamo:constrain|>", "<|plamo:msg|>"),
        ("<|plamo:begin_", "<|plamo:end_", ":plamo|>", "<|plamo:tag|>", "<|plamo:bos|>"),
        "<|plamo:bos|>user\nWhat is the weather?<|plamo:tag|>assistant\n",
        _ON_OFF,
        extra=(
            "visible<|plamo:end_",
            "visible<|plamo:end_think",
            "visible<|plamo:end_thi",
            "plan<|plamo:end_think:plamo|>answer<|plamo:begin_",
            "plan<|plamo:tag|>after the turn",
            "plan<|plamo:begin_tool_requests:plamo|><|plamo:begin_tool_request:plamo|>"
            "<|plamo:begin_tool_name:plamo|>get_time<|plamo:end_tool_name:plamo|>",
            "a <|plamo:unknown b<|plamo:end_think:plamo|> literal <|plamo:",
        ),
    ),
    "seed_oss": Family(
        "<seed:think>",
        "</seed:think>",
        ("<seed:think>", "</seed:think>", "<seed:tool_call>", "</seed:tool_call>"),
        ("<seed:bos>", "<seed:eos>"),
        "<seed:bos>user\nWhat is the weather?<seed:eos><seed:bos>assistant\n",
        _ON_OFF,
    ),
}

# Outputs written with <S>/<E> for the family's start/end markers.
_CORPUS = [
    "<S>\nThe user asks about weather. I should answer.\n<E>\n\nIt is sunny.",
    "The user asks about weather.\n<E>\n\nIt is sunny.",
    "<S> Still thinking when the tokens ran out",
    "No reasoning markers at all.",
    "<S><E>Empty reasoning.",
    "<S>a < b and c > d, not a </thi marker or <seed:thi <E>Answer: x<y",
    "<S>first <E>middle<E>end",
    "before <S>inside <E>after",
    "<S>Zürich 日本 ünïcode 🎉<E> Grüße",
    "<E> only an end",
    "<S> thinking <E>",
    "<S> reasoning with trailing space   \n <E>  content  ",
    "<S> one <S> nested <E> two",
    "<S> plan <tool_call>\n{}</tool_call> after",
    "<S> think <E>\n\n<response>\nanswer\n</response>\n",
    "<S> think <E> <response> answer",
    "<S>a<E>b<S>c<E>d<E>e",
    "reasoning only, no markers, ends here\n",
    "<E>",
    "<S>",
    "",
    "<S>thought\nchannel style<E>answer",
    "thought\nno opener<E>answer",
    "\n\n<S>late start<E>\n\nanswer",
]


def corpus(name: str) -> list[str]:
    """The corpus in the family's markers."""
    fam = FAMILIES[name]
    out = []
    for text in _CORPUS:
        text = text.replace("<S>", fam.start).replace("<E>", fam.end)
        if name in ("deepseek_v4", "deepseek_v41"):
            tag = "tool_calls" if name == "deepseek_v4" else " calls"
            text = text.replace("<tool_call>", f"<｜DSML｜{tag}>")
            text = text.replace("</tool_call>", f"</｜DSML｜{tag}>")
        if name == "kimi_k2":
            text = text.replace("<tool_call>", "<|tool_calls_section_begin|>")
            text = text.replace("</tool_call>", "<|tool_calls_section_end|>")
        if name == "plamo3":
            text = text.replace("<tool_call>", "<|plamo:begin_tool_requests:plamo|>")
            text = text.replace("</tool_call>", "<|plamo:end_tool_requests:plamo|>")
        if name in ("seed_oss", "minimax_m2", "minimax_m3"):
            prefix = "seed" if name == "seed_oss" else "minimax"
            text = text.replace("<tool_call>", f"<{prefix}:tool_call>")
            text = text.replace("</tool_call>", f"</{prefix}:tool_call>")
        out.append(text)
    return out + list(fam.extra)


@functools.cache
def tokenizer(name: str) -> Any:
    """The tiny model's tokenizer with the family's markers as single tokens."""
    fam = FAMILIES[name]
    tok = fresh_tokenizer()
    tok.add_tokens(list(fam.tokens))
    tok.add_tokens(list(fam.special), special_tokens=True)
    vocab = tok.get_vocab()
    tok.get_vocab = lambda: vocab  # type: ignore[method-assign]
    return tok


@functools.cache
def _ids(name: str, text: str) -> tuple[int, ...]:
    return tuple(tokenizer(name).encode(text, add_special_tokens=False))


@functools.cache
def vllm_parser_cls(name: str) -> Any:
    """vLLM's composed parser class for ``--reasoning-parser name``."""
    from vllm.parser import ParserManager

    return ParserManager.get_parser(reasoning_parser_name=name, tokenizer=tokenizer(name))


@functools.cache
def ours(name: str) -> OutputParsers:
    """Our parsers for ``--reasoning-parser name``."""
    tok = tokenizer(name)
    return OutputParsers(
        tok.get_vocab(),
        reasoning_parser=name,
        decode=functools.partial(tok.decode, skip_special_tokens=False),
        encode=functools.partial(tok.encode, add_special_tokens=False),
    )


def request(kwargs: dict[str, Any], **fields: Any) -> Any:
    """vLLM's validated request."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    return ChatCompletionRequest.model_validate({**body, "chat_template_kwargs": kwargs, **fields})


def vllm_parser(name: str, kwargs: dict[str, Any]) -> Any:
    """A fresh vLLM parser for one choice."""
    return vllm_parser_cls(name)(tokenizer(name), None, chat_template_kwargs=dict(kwargs))


def ours_parser(name: str, kwargs: dict[str, Any], include_reasoning: bool = True) -> Any:
    """A fresh parser of ours for one choice."""
    options = RequestToolOptions(
        False,
        "none",
        include_reasoning,
        dict(kwargs),
        request_chat_template_kwargs=dict(kwargs),
    )
    return ours(name).for_request(options)


def deltas_of(name: str, text: str, cuts: list[int]) -> list[tuple[str, list[int]]]:
    """``text`` as engine updates: token groups cut at ``cuts`` with their incremental text
    (multi-byte characters held back as the detokenizer does)."""
    tok = tokenizer(name)
    ids = list(_ids(name, text))
    bounds = [*sorted({c for c in cuts if 0 < c < len(ids)}), len(ids)]
    out: list[tuple[str, list[int]]] = []
    start, sent = 0, ""
    for end in bounds:
        decoded = tok.decode(ids[:end], skip_special_tokens=False)
        if not decoded.startswith(sent) or "\ufffd" in decoded[len(sent) :]:
            continue
        out.append((decoded[len(sent) :], ids[start:end]))
        sent, start = decoded, end
    assert sent == text, "test texts must round-trip through the tokenizer"
    return out


def _assemble(messages: list[Any]) -> tuple[str | None, str | None]:
    reasoning = content = None
    for msg in messages:
        if msg is None or isinstance(msg, type):
            continue
        if msg.reasoning:
            reasoning = (reasoning or "") + msg.reasoning
        if msg.content:
            content = (content or "") + msg.content
    return reasoning, content


def stream_both(
    name: str,
    kwargs: dict[str, Any],
    text: str,
    cuts: list[int],
    include_reasoning: bool = True,
    prompt_text: str | None = None,
) -> tuple[Any, Any]:
    """(ours, vLLM's) assembled streamed reasoning and content, and reasoning token counts."""
    prompt = list(_ids(name, FAMILIES[name].prompt if prompt_text is None else prompt_text))
    req = request(kwargs, include_reasoning=include_reasoning)
    theirs, mine = vllm_parser(name, kwargs), ours_parser(name, kwargs, include_reasoning)
    deltas = deltas_of(name, text, cuts)
    got, want = [], []
    all_ids: list[int] = []
    for k, (delta, ids) in enumerate(deltas):
        last = k == len(deltas) - 1
        try:
            want.append(
                theirs.parse_delta(delta, list(ids), req, prompt_token_ids=prompt, finished=last)
            )
        except Exception as e:  # vLLM fails the stream (hunyuan_a13b: one token per update)
            with pytest.raises(type(e)):
                mine.feed(delta, ids, prompt, finished=last)
            got.append(type(e))
            want.append(type(e))
            break
        got.append(mine.feed(delta, ids, prompt, finished=last))
        all_ids += ids
    return (
        (_assemble(got), mine.streamed_reasoning_tokens()),
        (_assemble(want), theirs.count_reasoning_tokens(all_ids)),
    )


def _cases() -> list[tuple[str, int, int]]:
    return [
        (name, k, i)
        for name, fam in FAMILIES.items()
        for k in range(len(fam.kwargs))
        for i in range(len(corpus(name)))
    ]


@pytest.mark.parametrize(("name", "k", "i"), _cases())
def test_whole_and_streamed_outputs_match_vllm(name: str, k: int, i: int) -> None:
    kwargs = FAMILIES[name].kwargs[k]
    text = corpus(name)[i]
    req = request(kwargs)
    ids = list(_ids(name, text))
    theirs = vllm_parser(name, kwargs)
    expected = theirs.parse(text, req, model_output_token_ids=ids)[:2]
    mine = ours_parser(name, kwargs)
    parsed = mine.parse(text)
    assert (parsed.reasoning, parsed.content) == expected
    assert mine.count_reasoning_tokens(ids) == vllm_parser(name, kwargs).count_reasoning_tokens(ids)
    for cuts in ([], list(range(len(ids))), [1, 2, 5, 6]):
        got, want = stream_both(name, kwargs, text, cuts)
        assert got == want, cuts


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_include_reasoning_false_matches_vllm(name: str) -> None:
    for kwargs in FAMILIES[name].kwargs:
        for text in corpus(name)[:4]:
            ids = _ids(name, text)
            got, want = stream_both(name, kwargs, text, list(range(len(ids))), False)
            assert got[0] == want[0]


def _written_keys(
    name: str, kwargs: dict[str, Any], text: str, cuts: list[int], include_reasoning: bool
) -> tuple[list[Any], list[Any]]:
    """(vLLM's, ours) per engine update: whether the chunk's delta writes the ``content`` and
    ``reasoning`` keys (vLLM dumps ``DeltaMessage`` with ``exclude_unset``: a field its parser
    set to None is written as null; ours writes a key with a value or flagged as set)."""
    prompt = list(_ids(name, FAMILIES[name].prompt))
    req = request(kwargs, include_reasoning=include_reasoning)
    theirs, mine = vllm_parser(name, kwargs), ours_parser(name, kwargs, include_reasoning)
    deltas = deltas_of(name, text, cuts)
    want: list[Any] = []
    got: list[Any] = []
    for k, (delta, ids) in enumerate(deltas):
        last = k == len(deltas) - 1
        try:
            msg = theirs.parse_delta(delta, list(ids), req, prompt_token_ids=prompt, finished=last)
        except Exception:  # vLLM fails the stream (pinned by stream_both's callers)
            break
        fields = None if msg is None else msg.model_fields_set
        want.append(None if fields is None else ("content" in fields, "reasoning" in fields))
        ours = mine.feed(delta, ids, prompt, finished=last)
        got.append(
            None
            if ours is None
            else (
                ours.content is not None or ours.content_set,
                ours.reasoning is not None or ours.reasoning_hidden,
            )
        )
    return want, got


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_streamed_deltas_write_the_fields_vllms_parser_sets(name: str) -> None:
    """Found by a differential probe of the chat route: vLLM's granite, hunyuan_a13b, hy_v4,
    k2_horizon, kimi_k3 and minimax_m3 reasoning parsers set ``content`` beside reasoning (and
    ``reasoning`` beside content) even when None, so the chunk says ``"content": null``; ours
    write the same keys, whole and token by token, with ``include_reasoning`` on and off."""
    for kwargs in FAMILIES[name].kwargs:
        for text in corpus(name)[:5]:
            n = len(_ids(name, text))
            for include_reasoning in (True, False):
                for cuts in ([], list(range(n))):
                    want, got = _written_keys(name, kwargs, text, cuts, include_reasoning)
                    assert got == want, (kwargs, text, include_reasoning, cuts)


_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(
    st.sampled_from(sorted(FAMILIES)),
    st.integers(0, 5),
    st.integers(0, 40),
    st.lists(st.integers(0, 30), max_size=12),
)
def test_streaming_matches_vllm_for_any_chunking(
    name: str, k: int, i: int, cuts: list[int]
) -> None:
    kwargs = FAMILIES[name].kwargs[k % len(FAMILIES[name].kwargs)]
    texts = corpus(name)
    got, want = stream_both(name, kwargs, texts[i % len(texts)], cuts)
    assert got == want


def _prompts(name: str) -> list[str]:
    fam = FAMILIES[name]
    return [
        fam.prompt,
        fam.prompt + fam.start + "\n",
        fam.prompt + fam.start + "\n\n" + fam.end + "\n\n",
        fam.end + fam.prompt,
        fam.start + fam.prompt,
        fam.prompt + fam.end,
    ]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_prompt_decides_whether_output_starts_in_reasoning_like_vllm(name: str) -> None:
    for kwargs in FAMILIES[name].kwargs:
        for prompt in _prompts(name):
            ids = list(_ids(name, prompt))
            parser = ours_parser(name, kwargs)
            if hasattr(parser, "reasoning"):
                mine = parser.reasoning
            else:  # a unified parser's (Cohere's): the reasoning class answers it
                configured = ours(name)
                mine = configured.reasoning_cls(configured.vocab, kwargs)
            # (granite's test answers None, which vLLM reads as not ended)
            theirs = bool(vllm_parser(name, kwargs).is_reasoning_end(ids))
            assert mine.prompt_ends_reasoning(ids) == theirs, (kwargs, prompt)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_prompt_prefilled_reasoning_streams_like_vllm(name: str) -> None:
    """Outputs after a prompt that opened or closed reasoning (the streamed path reads it)."""
    for prompt in _prompts(name):
        for kwargs in FAMILIES[name].kwargs:
            for text in corpus(name)[:4]:
                got, want = stream_both(name, kwargs, text, [1, 3, 4], prompt_text=prompt)
                assert got == want, (prompt, kwargs, text)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_special_tokens_are_kept_when_vllm_keeps_them(name: str) -> None:
    req = request({})
    assert req.skip_special_tokens is True
    adjusted = vllm_parser(name, {}).adjust_request(req)
    options = RequestToolOptions(False, "none")
    assert ours(name).needs_special_tokens(options) == (adjusted.skip_special_tokens is False)


def test_every_vllm_reasoning_parser_is_served_or_refused_with_a_reason() -> None:
    from vllm.reasoning import ReasoningParserManager

    names = set(ReasoningParserManager.list_registered())
    assert len(names) >= 38
    served, refused = set(REASONING_PARSERS), set(REFUSED_REASONING_PARSERS)
    assert not served & refused
    assert names == served | refused
    # openai_gptoss's corpus is gpt-oss Harmony output (tests/chat/test_harmony_output.py),
    # hf's the response templates' outputs (tests/chat/test_hf_parsers.py).
    assert set(FAMILIES) == served - {"openai_gptoss", "hf"}, "every served name has a corpus"
    for name in refused:
        with pytest.raises(ParserConfigError, match=rf"'{name}' is not supported.*vllm"):
            resolve_reasoning_parser(name)


def test_startup_names_the_missing_marker_tokens() -> None:
    with pytest.raises(ParserConfigError, match="<seed:think>"):
        OutputParsers({"<think>": 1, "</think>": 2}, reasoning_parser="seed_oss")
    with pytest.raises(ParserConfigError, match="<assistant>"):
        OutputParsers({"<think>": 1, "</think>": 2}, reasoning_parser="poolside_v1")


def _model_tokenizer(tokens: list[str], **attrs: Any) -> Any:
    tok = fresh_tokenizer()
    tok.add_tokens(tokens)
    for key, value in attrs.items():
        setattr(tok, key, value)
    # The vocabulary is final now; each parser asks for it (0.1 s a time), as tokenizer() says.
    vocab = tok.get_vocab()
    tok.get_vocab = lambda: vocab
    return tok


def _whole_and_streamed(
    name: str, tok: Any, facts: ModelFacts, kwargs: dict[str, Any], text: str
) -> tuple[Any, Any]:
    from vllm.parser import ParserManager

    cls = ParserManager.get_parser(reasoning_parser_name=name, tokenizer=tok)
    req = request(kwargs)
    ids = tok.encode(text, add_special_tokens=False)
    theirs = cls(tok, None, chat_template_kwargs=dict(kwargs))
    want = theirs.parse(text, req, model_output_token_ids=ids)[:2]
    stream = cls(tok, None, chat_template_kwargs=dict(kwargs))
    want_stream = _assemble(
        [stream.parse_delta(text, ids, req, prompt_token_ids=[], finished=True)]
    )
    parsers = OutputParsers(tok.get_vocab(), reasoning_parser=name, model=facts)
    mine = parsers.for_request(RequestToolOptions(False, "none", True, dict(kwargs)))
    parsed = mine.parse(text)
    mine = parsers.for_request(RequestToolOptions(False, "none", True, dict(kwargs)))
    got_stream = _assemble([mine.feed(text, ids, [], finished=True)])
    return ((parsed.reasoning, parsed.content), got_stream), (want, want_stream)


@pytest.mark.parametrize("effort", [None, "low", "no_think"])
def test_hy_v3_markers_carry_the_tokenizer_token_suffix_like_vllm(effort: str | None) -> None:
    tok = _model_tokenizer(["<think_x>", "</think_x>"])
    tok.init_kwargs["token_suffix"] = "_x"
    facts = ModelFacts(tokenizer_config={"token_suffix": "_x"})
    kwargs = {} if effort is None else {"reasoning_effort": effort}
    for text in ["<think_x>plan</think_x>answer", "plan</think_x>answer", "<think>a</think>b"]:
        got, want = _whole_and_streamed("hy_v3", tok, facts, kwargs, text)
        assert got == want, text
    with pytest.raises(ParserConfigError, match="<think_x>"):
        OutputParsers({"<think>": 1, "</think>": 2}, reasoning_parser="hy_v3", model=facts)


GLM53_TEMPLATE = (
    "[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    "Reasoning Effort: high <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>"
)


@pytest.mark.parametrize("name", ["glm45", "glm47"])
@pytest.mark.parametrize("template", [GLM53_TEMPLATE, GLM53_TEMPLATE + " enable_thinking", None])
def test_glm53_template_keeps_thinking_on_like_vllm(name: str, template: str | None) -> None:
    tok = _model_tokenizer(["<think>", "</think>"], chat_template=template)
    facts = ModelFacts(chat_template=template)
    for kwargs in ({"enable_thinking": False}, {"thinking": False}, {}):
        for text in ["plan</think>answer", "<think>plan</think>answer"]:
            got, want = _whole_and_streamed(name, tok, facts, kwargs, text)
            assert got == want, (kwargs, text)


@pytest.mark.parametrize("effort", [None, "no_think"])
def test_hy_v4_markers_carry_the_structural_token_suffix_like_vllm(effort: str | None) -> None:
    """vLLM reads the suffix off the vocabulary's structural tokens; we read it off the
    tokenizer config's added tokens, where a checkpoint declares them."""
    tok = _model_tokenizer(["<think:6124c78e>", "</think:6124c78e>", "<tool_calls:6124c78e>"])
    added = {
        str(tok.convert_tokens_to_ids(t)): {"content": t, "special": True}
        for t in ("<tool_calls:6124c78e>", "<think:6124c78e>", "</think:6124c78e>")
    }
    facts = ModelFacts(tokenizer_config={"added_tokens_decoder": added})
    kwargs = {} if effort is None else {"reasoning_effort": effort}
    for text in [
        "<think:6124c78e>plan</think:6124c78e>answer",
        "plan</think:6124c78e>answer",
        "<think>a</think>b",
    ]:
        got, want = _whole_and_streamed("hy_v4", tok, facts, kwargs, text)
        assert got == want, text
    with pytest.raises(ParserConfigError, match="<think:6124c78e>"):
        OutputParsers({"<think>": 1, "</think>": 2}, reasoning_parser="hy_v4", model=facts)


@pytest.mark.parametrize("effort", ["none", "minimal", 3])
def test_k2_horizon_refuses_a_reasoning_effort_without_markers_like_vllm(effort: Any) -> None:
    with pytest.raises(ValueError) as theirs:
        vllm_parser("k2_horizon", {"reasoning_effort": effort})
    options = RequestToolOptions(False, "none", True, {"reasoning_effort": effort})
    with pytest.raises(ValueError) as mine:
        ours("k2_horizon").check_request(options)
    assert str(mine.value) == str(theirs.value)

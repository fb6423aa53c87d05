"""Pre-encoded chunk events: splicing a new text's JSON into a template gives exactly the bytes
that encoding the whole chunk gives, for any text (checked against msgspec's full encoding)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vllm_frontend.server.chat import Chunk, ContentDelta, DeltaChoice
from vllm_frontend.server.completions import StreamChoice, StreamChunk
from vllm_frontend.server.sse import SseTemplate, sse


def completion_chunk(text: str, index: int = 3, model: str = "m") -> StreamChunk:
    choice = StreamChoice(index, text, None, None, None, None, None)
    return StreamChunk(id="cmpl-1", object="text_completion", created=17, model=model,
                       choices=[choice])  # fmt: skip


def chat_chunk(text: str, index: int = 0) -> Chunk:
    return Chunk(id="chatcmpl-1", object="chat.completion.chunk", created=17, model="m",
                 choices=[DeltaChoice(index, ContentDelta(text), None, None, None)])  # fmt: skip


@given(st.text())
def test_completion_chunk_template_gives_the_full_encoding(text: str) -> None:
    template = SseTemplate.of(completion_chunk)
    assert template is not None
    assert template.render(text) == sse(completion_chunk(text))


@given(st.text(alphabet=st.characters(codec="utf-8")))
def test_chat_chunk_template_gives_the_full_encoding(text: str) -> None:
    template = SseTemplate.of(chat_chunk)
    assert template is not None
    assert template.render(text) == sse(chat_chunk(text))


def test_a_chunk_whose_other_fields_hold_the_marker_gets_no_template() -> None:
    assert SseTemplate.of(lambda t: completion_chunk(t, model="\x00chunk-text\x00")) is None

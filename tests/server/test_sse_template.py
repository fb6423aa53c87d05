"""Pre-encoded chunk events: splicing a new text's JSON into a template gives exactly the bytes
that encoding the whole chunk gives, for any text (checked against msgspec's full encoding)."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from vllm_frontend.server.chat import Chunk, ContentDelta, DeltaChoice
from vllm_frontend.server.completions import StreamChoice, StreamChunk
from vllm_frontend.server.sse import RequestTemplates, SseTemplate, sse


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


def _chat_text_chunk(request_id: str, created: int, key: tuple[str, int], text: str) -> Chunk:
    model, index = key
    return Chunk(id=request_id, object="chat.completion.chunk", created=created, model=model,
                 choices=[DeltaChoice(index, ContentDelta(text), None, None, None)])  # fmt: skip


def _completion_text_chunk(
    request_id: str, created: int, key: tuple[str, int], text: str
) -> StreamChunk:
    model, index = key
    choice = StreamChoice(index, text, None, None, None, None, None)
    return StreamChunk(id=request_id, object="text_completion", created=created, model=model,
                       choices=[choice])  # fmt: skip


_MARKERS = ["\x00chunk-id\x00", "\x00chunk-text\x00", "-48271931170113", "48271931170113"]
_ANY_TEXT = st.one_of(st.text(alphabet=st.characters(codec="utf-8")), st.sampled_from(_MARKERS))


@example(request_id="\x00chunk-text\x00", created=5, model="m", index=0, texts=["a"])
@example(request_id="\x00chunk-id\x00", created=5, model="m", index=0, texts=["a"])
@given(
    request_id=_ANY_TEXT,
    created=st.integers(0, 2**40),
    model=_ANY_TEXT,
    index=st.integers(0, 300),
    texts=st.lists(_ANY_TEXT, min_size=1, max_size=3),
)
def test_request_templates_give_the_full_encoding(
    request_id: str, created: int, model: str, index: int, texts: list[str]
) -> None:
    # The pieces found once per model and choice, spliced around each request's id and
    # created time, give what encoding the whole chunk gives (markers anywhere included).
    for make in (_chat_text_chunk, _completion_text_chunk):
        templates = RequestTemplates(make)
        for rid in (request_id, "chatcmpl-2"):  # a second request from the kept pieces
            key = (model, index)
            template = templates.template(rid, created, key)
            per_request = SseTemplate.of(lambda t, r=rid, m=make, k=key: m(r, created, k, t))
            if template is None:  # a marker in the model: no template either way
                assert per_request is None
            for text in texts if template is not None else ():
                assert template.render(text) == sse(make(rid, created, key, text))


def test_a_model_holding_a_marker_falls_back_to_a_template_per_request() -> None:
    templates = RequestTemplates(_chat_text_chunk)
    for model in _MARKERS[:3]:
        template = templates.template("chatcmpl-1", 17, (model, 0))
        expected = SseTemplate.of(lambda t, m=model: _chat_text_chunk("chatcmpl-1", 17, (m, 0), t))
        assert templates._pieces[(model, 0)] is None
        assert (template is None) == (expected is None)
        if template is not None and expected is not None:
            assert template.render("hi") == expected.render("hi")


def test_past_the_key_limit_templates_are_made_per_request() -> None:
    templates = RequestTemplates(_chat_text_chunk)
    for k in range(RequestTemplates._LIMIT + 3):
        template = templates.template("chatcmpl-1", 17, (f"m{k}", 0))
        assert template is not None
        assert template.render("hi") == sse(_chat_text_chunk("chatcmpl-1", 17, (f"m{k}", 0), "hi"))
    assert len(templates._pieces) == RequestTemplates._LIMIT

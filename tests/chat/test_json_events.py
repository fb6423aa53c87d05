"""The pre-v11 Mistral reader's JSON events match ``ijson``'s (the C backend vLLM's parser
feeds piece by piece), chunk for chunk, errors included (vLLM never sends an empty chunk, which
ends the text)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_frontend.chat.engine.json_events import JsonEventError, JsonEvents

ijson = pytest.importorskip("ijson")

_PIECES = st.sampled_from(
    ['{"name": "f", "arguments": {"a": [1, 2.5e3, -0]}}', "[", "]", "{", "}", ",", ":", '"k"',
     '"a\\"b\\u00e9"', "true", "nul", "l", "1", "0", "01", "-", "1.", "e5", " ", "\n", "x",
     '"\\q"', "[]", "{}", '"é日"', "\t", "2E+1", "fals", "e"]
)  # fmt: skip


def _ijson(chunks: list[str]) -> list[object]:
    events = ijson.sendable_list()
    coro = ijson.parse_coro(events)
    out: list[object] = []
    for chunk in chunks:
        try:
            coro.send(chunk.encode())
        except Exception:  # any parse error
            out.append("error")
            break
        out.append([(p, e, v if e in ("map_key", "string") else None) for p, e, v in events])
        del events[:]
    return out


def _ours(chunks: list[str]) -> list[object]:
    reader = JsonEvents()
    out: list[object] = []
    for chunk in chunks:
        try:
            events = reader.feed(chunk)
        except JsonEventError:
            out.append("error")
            break
        out.append([(p, e, v if e in ("map_key", "string") else None) for p, e, v in events])
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(_PIECES, min_size=1, max_size=4).map("".join), max_size=8))
def test_json_events_match_ijson(chunks: list[str]) -> None:
    assert _ours(chunks) == _ijson(chunks)

"""``tag_overlap``: the longest proper prefix of a tag that a text ends with (a streaming
parser holds that much back), checked against the definition over every short case."""

from __future__ import annotations

import itertools

from vllm_frontend.chat.tools.base import tag_overlap


def _by_definition(text: str, tag: str) -> int:
    return max((k for k in range(len(tag)) if text.endswith(tag[:k]) and k <= len(text)), default=0)


def test_tag_overlap_is_the_longest_proper_prefix_the_text_ends_with() -> None:
    for tag in ("", "<", "ab", "aab", "<tool_call>", "abab", "aaa"):
        alphabet = sorted(set(tag + "x")) or ["x"]
        for n in range(6):
            for chars in itertools.product(alphabet, repeat=n):
                text = "".join(chars)
                assert tag_overlap(text, tag) == _by_definition(text, tag), (text, tag)
    assert tag_overlap("okay okay <tool_", "<tool_call>") == 6
    assert tag_overlap("okay okay", "<tool_call>") == 0

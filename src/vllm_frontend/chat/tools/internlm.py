"""InternLM2 tool calls: ``<|action_start|><|plugin|>{"name": …, "parameters": …}<|action_end|>``,
as vLLM 0.32's ``Internlm2ToolParser``: one call per output. As in vLLM, an unreadable call in a
whole output is an error of the request (the exception propagates), and a second action marker
in a stream is one too."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser, is_complete_json
from vllm_frontend.chat.tools.json_calls import common_prefix, partial_json

__all__ = ["InternLM2ToolParser"]

ACTION_START = "<|action_start|>"
MARK = "<|action_start|><|plugin|>"
ACTION_END = "<|action_end|>"


def _arguments(call: Any) -> Any:
    if "parameters" in call:
        return call.get("parameters")
    if "arguments" in call:
        return call.get("arguments")
    return None


class InternLM2ToolParser(ToolParser):
    """``internlm``: the first plugin action is the call; text before it is content."""

    name = "internlm"
    needs_special_tokens = True

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._position = 0
        self._current = -1
        self._name_sent = False

    def extract(self, text: str) -> ExtractedToolCalls:
        """The action's call (raises on a malformed action, as vLLM)."""
        if MARK not in text:
            return ExtractedToolCalls(False, content=text)
        text, action = text.split(MARK)
        action = action.split(ACTION_END)[0]
        call = json.loads(action[action.find("{") :])
        name = call["name"]
        arguments = call.get("parameters", call.get("arguments", {}))
        if not isinstance(name, str):
            raise TypeError("tool name is not a string")
        return ExtractedToolCalls(
            True, [(name, json.dumps(arguments, ensure_ascii=False))], text or None
        )

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Content up to the action, then the call's name and its arguments as they grow."""
        if ACTION_START not in current_text:
            self._position = len(current_text)
            return OutputDelta(content=delta_text)
        if self._current > 0:
            return OutputDelta(content="")
        rest = current_text[self._position :]
        if MARK not in rest:
            return None
        text, action = rest.split(MARK)  # a second action: vLLM fails the stream here too
        if text:
            self._position += len(text)
            return OutputDelta(content=text)
        action = action.strip().split(ACTION_END)[0]
        try:
            return self._step(action, delta_text)
        except Exception:
            return None  # vLLM skips the chunk on any error

    def _step(self, action: str, delta_text: str) -> OutputDelta | None:
        call = partial_json(action, allow_partial_strings=self._name_sent)
        delta: OutputDelta | None = None
        if not self._name_sent:
            if name := call.get("name"):
                self._current += 1
                if not isinstance(name, str):
                    raise TypeError("tool name is not a string")
                delta = OutputDelta(
                    tool_calls=[ToolCallDelta(self._current, id=new_tool_call_id(), name=name)]
                )
                self._name_sent = True
                self.streamed_args.append("")
        else:
            index = self._current
            prev_args = _arguments(self.prev_calls[index])
            cur_args = _arguments(call)
            piece: str | None = None
            if cur_args and not prev_args:
                dumped = json.dumps(cur_args, ensure_ascii=False)
                at = dumped.find(delta_text)
                if at != -1:
                    piece = dumped[: at + len(delta_text)]
                elif is_complete_json(action):
                    piece = dumped
                else:
                    return None
            elif cur_args and prev_args:
                dumped = json.dumps(cur_args, ensure_ascii=False)
                sent = len(self.streamed_args[index])
                if is_complete_json(action):
                    piece = dumped[sent:]
                else:
                    prev_dumped = json.dumps(prev_args, ensure_ascii=False)
                    piece = (
                        common_prefix(prev_dumped, dumped)[sent:] if dumped != prev_dumped else ""
                    )
            if piece is not None:
                delta = OutputDelta(tool_calls=[ToolCallDelta(index, arguments=piece)])
                self.streamed_args[index] += piece
        call["arguments"] = _arguments(call)
        self.prev_calls = [call]
        return delta

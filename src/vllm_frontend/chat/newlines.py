"""MiniCPM-V's escaped newlines: its tokenizer writes a newline as the two characters ``\\``
``n``, which vLLM 0.32's MiniCPM-V parser (vllm/parser/minicpmv.py) turns back into newlines in
reasoning and content, except inside code (backticks), LaTeX (``$``, ``\\(``, ``\\[``) and
runs of backslashes. Streaming holds back a possibly unfinished escape until the next delta."""

from __future__ import annotations

from vllm_frontend.chat.parsed import OutputDelta

__all__ = ["DeltaNewlines", "EscapedNewlines", "recover_newlines"]

_OPENERS = (("```", "```"), ("`", "`"), ("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


class EscapedNewlines:
    """One text stream's recovery (fed in pieces; ``final`` releases what is held)."""

    __slots__ = ("_closer", "_held")

    def __init__(self) -> None:
        """A stream outside any code or LaTeX span."""
        self._closer: str | None = None
        self._held = ""

    def feed(self, text: str, *, final: bool = False) -> str:
        """The recovered text this piece releases."""
        text, self._held = self._held + text, ""
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            rest = text[i:]
            closer = self._closer
            if closer is not None:
                if rest.startswith(closer):
                    out.append(closer)
                    i += len(closer)
                    self._closer = None
                elif not final and closer.startswith(rest):
                    self._held = rest
                    break
                else:
                    out.append(text[i])
                    i += 1
                continue
            char = text[i]
            if char in "`$":
                if not final and rest in (("`", "``") if char == "`" else ("$",)):
                    self._held = rest
                    break
                opener, self._closer = next((o, c) for o, c in _OPENERS if rest.startswith(o))
                out.append(opener)
                i += len(opener)
                continue
            if char != "\\":
                out.append(char)
                i += 1
                continue
            run = i + 1
            while run < n and text[run] == "\\":
                run += 1
            if run - i > 1:  # a run of backslashes stays as it is (held while it may grow)
                if not final and run == n:
                    self._held = text[i:]
                    break
                out.append(text[i:run])
                i = run
                continue
            if not final and rest in ("\\", "\\r", "\\r\\"):
                self._held = rest
                break
            if rest.startswith("\\r\\n"):
                out.append("\n")
                i += 4
            elif rest.startswith(("\\n", "\\r")):
                out.append("\n")
                i += 2
            elif rest.startswith(("\\(", "\\[")):
                opener, self._closer = next((o, c) for o, c in _OPENERS if rest.startswith(o))
                out.append(opener)
                i += 2
            else:
                out.append("\\")
                i += 1
        if final and self._held:
            out.append(self._held)
            self._held = ""
        return "".join(out)


def recover_newlines(text: str | None) -> str | None:
    """A whole text's recovery."""
    if text is None or "\\" not in text:
        return text
    return EscapedNewlines().feed(text, final=True)


class DeltaNewlines:
    """Recovery over a stream of deltas, reasoning and content apart."""

    __slots__ = ("_content", "_reasoning")

    def __init__(self) -> None:
        """A fresh stream."""
        self._reasoning = EscapedNewlines()
        self._content = EscapedNewlines()

    def apply(self, delta: OutputDelta | None, *, finished: bool) -> OutputDelta | None:
        """The delta with its reasoning and content recovered (``None`` if nothing is left);
        reasoning is released once content or a tool call follows it."""
        reasoning_done = finished or (
            delta is not None and (delta.content is not None or bool(delta.tool_calls))
        )
        reasoning = self._reasoning.feed(
            (delta.reasoning or "") if delta else "", final=reasoning_done
        )
        content = self._content.feed((delta.content or "") if delta else "", final=finished)
        if delta is None:
            if not reasoning and not content:
                return None
            return OutputDelta(reasoning=reasoning or None, content=content or None)
        delta.reasoning = reasoning or None
        delta.content = content or None
        if not delta.content and not delta.reasoning and not delta.tool_calls:
            return None
        return delta

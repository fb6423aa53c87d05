"""Incremental detokenization of one generated sequence, token by token.

Follows vLLM's `FastIncrementalDetokenizer` (vllm/v1/engine/detokenizer.py), which is what vLLM
uses for every tokenizer backed by the Rust `tokenizers` library: a `tokenizers` `DecodeStream`
primed with the prompt ids (so leading spaces and byte merges come out right), stepped once per
generated token. A step that cannot yet produce valid UTF-8 (a multi-byte character split across
byte-fallback or byte-level tokens) yields nothing; the bytes come out with the token that
completes the character, and bytes still incomplete when the sequence ends are dropped, as vLLM
does.

Byte-level BPE tokenizers (GPT-2, Llama 3, Qwen: the decoder is exactly `ByteLevel`) get a
cheaper path with the same output. Their decoding of a token list is "concatenate each token's
fixed bytes, then decode UTF-8 replacing invalid sequences", so DecodeStream's step reduces to:

- keep the bytes not yet emitted (`pending`); append the new token's bytes;
- if the pending bytes are non-empty and their lossy decoding does not end with U+FFFD, emit
  that decoding and clear them; otherwise emit nothing.

(DecodeStream only emits text that does not end inside a character, so the decoding of
"emitted prefix + pending" is the prefix's text followed by the pending bytes' own decoding, and
its "invalid prefix" error cannot occur.) Priming with the prompt only matters when the prompt's
text ends with U+FFFD (a character cut off, an invalid byte, or a real U+FFFD): DecodeStream then
keeps the whole prompt pending and emits the prompt's text again with the first chunk; vLLM does
so, and so do we. Token bytes come from per-tokenizer tables filled on first use of each id, or
ahead of use for the whole vocabulary by :func:`prefill` (a server runs it in slices once it is
serving); a token whose bytes are complete UTF-8 is then a single list lookup.
"""

from __future__ import annotations

import codecs
import logging
import re
import weakref
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate

from tokenizers.decoders import DecodeStream

from vllm_frontend.text.tokenizer import PieceLookup, Tokenizer

__all__ = ["IncrementalDetokenizer", "prefill"]

_log = logging.getLogger(__name__)

# The error text of tokenizers' DecodeStream when the decoded prefix stops being monotonic.
_INVALID_PREFIX = "Invalid prefix encountered"

_REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Turns a sequence's token ids into text one token at a time, O(1) work per token.

    Constructing one returns the byte-level implementation when the tokenizer allows it and the
    DecodeStream-based one otherwise; both produce exactly what vLLM's detokenizer produces.
    """

    __slots__ = ()

    def __new__(
        cls,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        request_id: str = "",
    ) -> IncrementalDetokenizer:
        if cls is IncrementalDetokenizer:
            if tokenizer.is_mistral:
                cls = _MistralDetokenizer
            elif _byte_tables(tokenizer) is None:
                cls = _StreamDetokenizer
            elif _suppresses_spaces(tokenizer, skip_special_tokens, spaces_between_special_tokens):
                cls = _SpacingByteLevelDetokenizer
            else:
                cls = _ByteLevelDetokenizer
        return object.__new__(cls)

    def decode_next(self, token_id: int) -> str:
        """The text this token adds (possibly empty while a character is incomplete)."""
        raise NotImplementedError


def _suppresses_spaces(
    tokenizer: Tokenizer, skip_special_tokens: bool, spaces_between_special_tokens: bool
) -> bool:
    # vLLM only honours spaces_between_special_tokens=False when special tokens are kept, and
    # then only between two consecutive added tokens (special or not).
    return (
        not skip_special_tokens
        and not spaces_between_special_tokens
        and bool(tokenizer.added_tokens)
    )


def _log_invalid_id(token_id: object) -> None:
    # An id that does not fit the tokenizer's integer type: vLLM logs it and emits nothing.
    _log.exception("Encountered invalid token id: %r", token_id)


class _StreamDetokenizer(IncrementalDetokenizer):
    """Any tokenizer: tokenizers' DecodeStream, as vLLM drives it."""

    __slots__ = (
        "_added_tokens",
        "_backend",
        "_last_added",
        "_request_id",
        "_skip_special_tokens",
        "_step",
        "_stream",
        "_suppress_spaces",
    )

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        request_id: str = "",
    ) -> None:
        self._backend = tokenizer.backend
        self._skip_special_tokens = skip_special_tokens
        self._request_id = request_id
        self._stream = DecodeStream(
            ids=list(prompt_token_ids), skip_special_tokens=skip_special_tokens
        )
        self._step = self._stream.step
        self._suppress_spaces = _suppresses_spaces(
            tokenizer, skip_special_tokens, spaces_between_special_tokens
        )
        self._added_tokens = tokenizer.added_tokens
        self._last_added = False

    def decode_next(self, token_id: int) -> str:
        """The text this token adds (possibly empty while a character is incomplete)."""
        try:
            text = self._step(self._backend, token_id)
        except (OverflowError, TypeError):
            _log_invalid_id(token_id)
            text = None
        except Exception as e:
            if not str(e).startswith(_INVALID_PREFIX):
                raise
            # DecodeStream's state breaks when decoding is not prefix-monotonic; vLLM restarts the
            # stream without context and carries on (vllm issue 17448).
            _log.warning(
                "Encountered invalid prefix detokenization error for request %s, "
                "resetting decode stream.",
                self._request_id,
            )
            self._stream = DecodeStream(skip_special_tokens=self._skip_special_tokens)
            self._step = self._stream.step
            text = self._step(self._backend, token_id)
        if self._suppress_spaces:
            content = self._added_tokens.get(token_id)
            if content is not None and self._last_added:
                # The raw token, without the space the decoder put between two added tokens.
                text = content
            self._last_added = content is not None
        return text or ""


# -- mistral_common tokenizers ------------------------------------------------------------------

_PROMPT_WINDOW = 5
"""Prompt tokens before the first generated one that its text is read against (vLLM's
``INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET``)."""


class _MistralDetokenizer(IncrementalDetokenizer):
    """A ``mistral_common`` tokenizer, detokenized as vLLM's ``SlowIncrementalDetokenizer``
    does it: pieces are kept per token, and each step decodes the pieces from a prefix offset
    twice (up to the read offset, and to the end); the difference is the new text, held back
    while the decoding ends with U+FFFD (a character not complete yet)."""

    __slots__ = ("_pieces", "_prefix", "_read", "_skip", "_tokenizer")

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        request_id: str = "",
    ) -> None:
        from vllm_frontend.text.tokenizer_mistral import MistralTokenizer

        assert isinstance(tokenizer, MistralTokenizer)
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        tail = list(prompt_token_ids[-_PROMPT_WINDOW - 2 :])
        self._pieces: list[str | bytes] = tokenizer.pieces_for_detokenizer(
            tail, skip_special_tokens
        )
        self._read = len(self._pieces)
        self._prefix = max(self._read - _PROMPT_WINDOW, 0)

    def decode_next(self, token_id: int) -> str:
        """The text this token adds (possibly empty while a character is incomplete)."""
        tokenizer = self._tokenizer
        if type(token_id) is int and 0 <= token_id < tokenizer.vocab_size:
            new = tokenizer.pieces_for_detokenizer([token_id], self._skip)
        else:
            new = [""]
        pieces = self._pieces
        pieces.extend(new)
        prefix, read = self._prefix, self._read
        to_text = tokenizer.pieces_to_text
        prefix_text = to_text(pieces[prefix:read])
        full_text = to_text(pieces[prefix:])
        if len(full_text) <= len(prefix_text) or full_text.endswith(_REPLACEMENT):
            return ""
        self._prefix, self._read = read, len(pieces)
        return full_text[len(prefix_text) :]


# -- byte-level BPE ------------------------------------------------------------------------------


def _byte_of_char() -> dict[str, int]:
    # GPT-2's reversible byte <-> printable character map, which tokenizers' ByteLevel uses:
    # printable Latin-1 bytes stand for themselves, the other 68 bytes get U+0100 onwards in
    # byte order.
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {chr(b): b for b in printable}
    others = (b for b in range(256) if b not in set(printable))
    for offset, b in enumerate(others):
        chars[chr(0x100 + offset)] = b
    return chars


_BYTE_OF_CHAR = _byte_of_char()
# str.translate table taking a piece made only of ByteLevel characters to a Latin-1 string of its
# bytes. Latin-1 characters outside the alphabet become U+FFFF so that encoding to Latin-1 fails,
# as it does for any other character outside the alphabet.
_TO_LATIN1: dict[int, int] = {ord(c): b for c, b in _BYTE_OF_CHAR.items() if ord(c) != b}
_TO_LATIN1.update({c: 0xFFFF for c in range(0x100) if chr(c) not in _BYTE_OF_CHAR})


def _piece_bytes(piece: str) -> bytes:
    # The ByteLevel decoder maps a piece character by character, unless a character is outside
    # its alphabet (an added token such as "<tool call>"): then it takes the piece's UTF-8.
    try:
        return piece.translate(_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:
        return piece.encode()


class _ByteTable:
    """One tokenizer's token bytes for one skip_special_tokens setting, filled on first use.

    `text[id]` holds the text of tokens whose bytes are complete UTF-8 not ending with U+FFFD
    (what DecodeStream emits for them when nothing is pending), None where not known yet;
    `raw` holds the bytes of the rest; `skipped_ids` the ids whose text is empty because their
    piece is skipped (the only entries another table's `text` can differ on).
    """

    __slots__ = ("_pieces_of", "_skipped", "raw", "skipped_ids", "text")

    def __init__(
        self,
        pieces_of: PieceLookup,
        skipped: frozenset[str],
        size: int,
        text: list[str | None] | None = None,
    ) -> None:
        self._pieces_of = pieces_of
        self._skipped = skipped
        self.text: list[str | None] = [None] * size if text is None else text
        self.raw: dict[int, bytes] = {}
        self.skipped_ids: set[int] = set()

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes this token adds; OverflowError/TypeError for an id that is not a u32."""
        known = self.text[token_id] if 0 <= token_id < len(self.text) else None
        if known is not None:
            return known.encode()
        raw = self.raw.get(token_id)
        if raw is not None:
            return raw
        # The same lookup as tokenizers' decode (added tokens first, then the model); an id
        # with no token adds nothing, as does a skipped special token (matched by content).
        piece = self._pieces_of(token_id)
        if piece is not None and piece in self._skipped:
            self.skipped_ids.add(token_id)
            raw = b""
        else:
            raw = b"" if piece is None else _piece_bytes(piece)
        try:
            decoded = raw.decode()
        except UnicodeDecodeError:
            self.raw[token_id] = raw
        else:
            if decoded.endswith(_REPLACEMENT) or not 0 <= token_id < len(self.text):
                self.raw[token_id] = raw
            else:
                self.text[token_id] = decoded
        return raw


class _ByteTables:
    """A tokenizer's two byte tables: special tokens kept, and skipped."""

    __slots__ = ("_added", "_keep", "_pieces_of", "skip")

    def __init__(self, tokenizer: Tokenizer) -> None:
        # (From the tokenizer's own copies, not its `tokenizers` object, which it may let go.)
        added = tokenizer.added_tokens
        special = frozenset(added[i] for i in tokenizer.special_added_token_ids if i in added)
        size = max([tokenizer.vocab_size, *(i + 1 for i in added)])
        self._pieces_of = pieces_of = tokenizer.pieces_of
        # Ids and pieces that decode differently from a plain vocabulary piece, or only in one
        # of the tables: prefilling leaves them to the lazy path.
        self._added = (frozenset(added), frozenset(added.values()))
        self.skip = _ByteTable(pieces_of, special, size)
        # Requests keep special tokens rarely: that table (its list alone ~1 MB for Llama 3) is
        # made on first use.
        self._keep: _ByteTable | None = None

    @property
    def keep(self) -> _ByteTable:
        """The table with special tokens kept: a copy of :attr:`skip`'s text so far, but for the
        ids skipped there (left to its lazy path)."""
        keep = self._keep
        if keep is None:
            text = self.skip.text.copy()
            for token_id in self.skip.skipped_ids:
                text[token_id] = None
            keep = self._keep = _ByteTable(self._pieces_of, frozenset(), len(text), text)
        return keep

    def prefill(self, start: int, stop: int) -> None:
        """Fill both tables' `text` for the plain vocabulary pieces among ids [start, stop)."""
        added_ids, added_pieces = self._added
        id_to_token = self._pieces_of.id_to_token
        pieces: list[str] = []
        skip: list[int] = []  # positions (in this slice) left to the lazy path
        for k, token_id in enumerate(range(start, stop)):
            piece = id_to_token(token_id)
            if piece is None or token_id in added_ids or piece in added_pieces:
                skip.append(k)
                piece = ""
            pieces.append(piece)
        texts = _decode_pieces(pieces)
        for k in skip:
            texts[k] = None
        for table in (self.skip, self._keep):
            if table is None:
                continue
            known = table.text[start:stop]
            table.text[start:stop] = [
                t if t is not None else old for t, old in zip(texts, known, strict=True)
            ]


# Prefilling joins the pieces with a character outside the alphabet that a charmap codec takes
# to byte 0xFF, which is never valid in UTF-8: each separator decodes on its own (to a lone
# surrogate, with surrogateescape) and cannot merge with its neighbours. In that codec the
# alphabet's own character for 0xFF has no byte, so a piece holding it fails to encode, as does
# any other character outside the alphabet: such pieces are left to the lazy path.
_SEPARATOR = "\x00"
_SEPARATOR_TEXT = "\udcff"
_PIECES_CODEC = codecs.charmap_build(
    "".join(
        _SEPARATOR if b == 0xFF else c
        for c, b in sorted(_BYTE_OF_CHAR.items(), key=lambda cb: cb[1])
    )
)
# In the decoded pieces: an undecodable byte (other than the separator), or U+FFFD, which is
# not text at a piece's end.
_NOT_TEXT = re.compile("[\udc80-\udcfe\ufffd]")


def _pieces_bytes(pieces: list[str]) -> bytes:
    """The pieces' bytes, separator-joined; UnicodeEncodeError where a piece is not made of
    ByteLevel characters (or holds the one for 0xFF)."""
    return codecs.charmap_encode(_SEPARATOR.join(pieces), "strict", _PIECES_CODEC)[0]


def _prefillable(piece: str) -> bool:
    try:
        _pieces_bytes([piece])
    except UnicodeEncodeError:
        return False
    return _SEPARATOR not in piece


def _decode_pieces(pieces: list[str]) -> list[str | None]:
    """Each piece's text as :meth:`_ByteTable.token_bytes` would find it, or None where it
    would not be text (invalid UTF-8, ending with U+FFFD, a character outside the alphabet).

    One pass over all pieces at once, in C: their bytes with one charmap encode, their text
    with one ``bytes.decode``, split on the separator; a regex finds the exceptions.
    """
    if not pieces:
        return []
    excluded: set[int] = set()
    try:
        data = _pieces_bytes(pieces)
        clean = data.count(0xFF) == len(pieces) - 1  # else a piece holds the separator
    except UnicodeEncodeError:
        clean = False
    if not clean:
        excluded = {k for k, piece in enumerate(pieces) if not _prefillable(piece)}
        data = _pieces_bytes(["" if k in excluded else piece for k, piece in enumerate(pieces)])
    text = data.decode("utf-8", "surrogateescape")
    texts = text.split(_SEPARATOR_TEXT)
    if len(texts) != len(pieces):  # cannot happen; never guess
        return [None] * len(pieces)
    odd = [
        m.start()
        for m in _NOT_TEXT.finditer(text)
        if m.group() != "\ufffd"
        or text.startswith(_SEPARATOR_TEXT, m.end())
        or m.end() == len(text)
    ]
    if odd:
        starts = list(accumulate((len(t) + 1 for t in texts), initial=0))
        excluded.update(bisect_right(starts, p) - 1 for p in odd)
    parts: list[str | None] = list(texts)
    for k in excluded:
        parts[k] = None
    return parts


# Keyed by the Tokenizer (which is immutable once built); None: not a byte-level tokenizer.
_TABLES: weakref.WeakKeyDictionary[Tokenizer, _ByteTables | None] = weakref.WeakKeyDictionary()


# The tokenizer _byte_tables found last and its tables: a server has one tokenizer, and the
# weak dictionary's lookup (a new weak reference each time) costs more than this check.
_last_tables: tuple[weakref.ref[Tokenizer], _ByteTables | None] | None = None


def _byte_tables(tokenizer: Tokenizer) -> _ByteTables | None:
    global _last_tables
    last = _last_tables
    if last is not None and last[0]() is tokenizer:
        return last[1]
    if tokenizer.is_mistral:
        return None  # (no tokenizers backend: its detokenizer is _MistralDetokenizer)
    try:
        tables = _TABLES[tokenizer]
    except KeyError:
        cacheable = True
    except TypeError:  # not weakly referenceable: a table per detokenizer, still correct
        cacheable = False
    else:
        _last_tables = (weakref.ref(tokenizer), tables)
        return tables
    # Decoding only involves the id -> token lookup and the decoder (normalizer, pre-tokenizer
    # and post-processor play no part), so an exact ByteLevel decoder is all the fast path needs.
    tables = _ByteTables(tokenizer) if tokenizer.byte_level_decoder else None
    if cacheable:
        _TABLES[tokenizer] = tables
        _last_tables = (weakref.ref(tokenizer), tables)
    return tables


def prefill(tokenizer: Tokenizer, slice_size: int = 2048) -> Iterator[None]:
    """Fill a byte-level tokenizer's tables ahead of use, ``slice_size`` ids per step.

    A generator: each ``next()`` does one slice (2-4 ms for 2048 ids; the first also sets the
    tables up, ~10 ms in all), so a server can run it between requests: a request that comes
    meanwhile, ``/health`` included, waits for at most one slice. Without it every id's first
    use costs ~7x a table hit, which a fresh server pays for most tokens of its first requests
    (Llama 3: 128k ids; ~15 MB). Does nothing for tokenizers on the DecodeStream path.
    """
    tables = _byte_tables(tokenizer)
    if tables is None:
        return
    size = len(tables.skip.text)
    for start in range(0, size, slice_size):
        tables.prefill(start, min(start + slice_size, size))
        yield


# The table a detokenizer looks tokens up in while bytes are pending: every lookup misses.
_NOTHING: tuple[str | None, ...] = ()


class _ByteLevelDetokenizer(IncrementalDetokenizer):
    """Byte-level BPE tokenizers: DecodeStream's output from a table of token bytes."""

    __slots__ = ("_lookup", "_pending", "_table")

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        request_id: str = "",
    ) -> None:
        tables = _byte_tables(tokenizer)
        assert tables is not None
        table = tables.skip if skip_special_tokens else tables.keep
        self._table = table
        self._pending = _pending_prompt_bytes(table, prompt_token_ids)
        self._lookup: Sequence[str | None] = _NOTHING if self._pending else table.text

    def decode_next(self, token_id: int) -> str:
        """The text this token adds (possibly empty while a character is incomplete)."""
        try:
            text = self._lookup[token_id]
        except (IndexError, TypeError):  # TypeError: not an index, reported below
            text = None
        if text is not None and token_id >= 0:  # a negative index would find another token
            return text
        return self._decode_pending(token_id)

    def _decode_pending(self, token_id: int) -> str:
        table = self._table
        try:
            pending = self._pending + table.token_bytes(token_id)
        except (OverflowError, TypeError):
            _log_invalid_id(token_id)
            return ""
        if pending:
            text = pending.decode("utf-8", "replace")
            if not text.endswith(_REPLACEMENT):
                self._pending = b""
                self._lookup = table.text
                return text
            self._lookup = _NOTHING
        self._pending = pending
        return ""


class _SpacingByteLevelDetokenizer(_ByteLevelDetokenizer):
    """The byte-level path with spaces_between_special_tokens=False (special tokens kept)."""

    __slots__ = ("_added_tokens", "_last_added")

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        request_id: str = "",
    ) -> None:
        super().__init__(tokenizer, prompt_token_ids, skip_special_tokens=skip_special_tokens)
        self._added_tokens = tokenizer.added_tokens
        self._last_added = False

    def decode_next(self, token_id: int) -> str:
        """The text this token adds (possibly empty while a character is incomplete)."""
        text = super().decode_next(token_id)
        content = self._added_tokens.get(token_id)
        if content is not None and self._last_added:
            # As vLLM: the raw added token, whatever the decoder made of it.
            text = content
        self._last_added = content is not None
        return text


def _pending_prompt_bytes(table: _ByteTable, prompt: Sequence[int]) -> bytes:
    """The prompt bytes DecodeStream still holds before the first generated token.

    None, unless the prompt's text ends with U+FFFD: then all of them (DecodeStream never took
    the prompt as its emitted prefix). Whether it does depends only on the last 4 bytes' worth of
    tokens: UTF-8 resynchronises at any non-continuation byte, and 4 trailing continuation
    bytes cannot end a valid character.
    """
    if prompt:
        last = prompt[-1]
        if type(last) is int and 0 <= last < len(table.text) and table.text[last]:
            # The last token's bytes are complete UTF-8 of their own, not ending with U+FFFD,
            # and start a character: whatever comes before, the decoding ends with their text.
            return b""
    return _scanned_prompt_bytes(table, prompt)


def _scanned_prompt_bytes(table: _ByteTable, prompt: Sequence[int]) -> bytes:
    """:func:`_pending_prompt_bytes` from the bytes of the prompt's last tokens."""
    try:
        tail = b""
        i = len(prompt)
        while i and len(tail) < 4:
            i -= 1
            tail = table.token_bytes(prompt[i]) + tail
        if not tail.decode("utf-8", "replace").endswith(_REPLACEMENT):
            return b""
        return b"".join([table.token_bytes(t) for t in prompt])
    except (OverflowError, TypeError):
        # An id no tokenizer has: the engine client refuses the request with a clear error.
        return b""

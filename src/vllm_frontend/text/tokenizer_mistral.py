"""A Mistral-format tokenizer (``tekken.json`` or a versioned SentencePiece file), read with
``mistral_common`` as vLLM 0.32's ``--tokenizer-mode mistral`` reads it.

vLLM wraps ``mistral_common``'s ``MistralTokenizer`` (in validation mode ``test``) through
transformers' ``MistralCommonBackend``; this class gives the same answers with
``mistral_common`` alone: text is encoded with a BOS and never an EOS, special tokens are
never parsed out of text, decoding keeps special tokens unless asked to skip them (then also a
Voxtral ``lang:xx`` prefix goes), and the vocabulary (``get_vocab``) maps each piece to its
lowest id. ``mistral_common`` is an optional dependency (the ``mistral`` extra), imported only
when such a tokenizer is loaded.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_frontend.text.tokenizer import Tokenizer, TokenizerError

__all__ = [
    "MISSING_EXTRA_MESSAGE",
    "MistralTokenizer",
    "find_tokenizer_file",
    "is_mistral_repo",
]

MISSING_EXTRA_MESSAGE = (
    "--tokenizer-mode mistral needs the mistral_common package: "
    "pip install 'vllm-frontend-py[mistral]'"
)
"""Startup's message when ``mistral_common`` is not installed."""

_SPM_FILE = re.compile(r"tokenizer\.model\.v\d+(m\d+)?$")
_LANG_PREFIX = re.compile(r"^lang:[a-z]{2}")

# Special tokens whose text a tool or reasoning parser reads: vLLM's MistralTokenizer keeps
# them when converting ids to pieces with skip_special_tokens.
_KEPT_SPECIALS = ("[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]")


def find_tokenizer_file(directory: Path) -> Path | None:
    """The tokenizer file mistral_common picks in ``directory``: ``tekken.json``, else the last
    versioned SentencePiece model (``tokenizer.model.v3``, ``…v7m1``) in name order."""
    if (directory / "tekken.json").is_file():
        return directory / "tekken.json"
    spm = sorted(p.name for p in directory.iterdir() if p.is_file() and _SPM_FILE.match(p.name))
    return directory / spm[-1] if spm else None


def is_mistral_repo(directory: Path) -> bool:
    """vLLM 0.32's ``--tokenizer-mode auto`` rule: a directory holding (at any depth, by file
    name) ``consolidated*.safetensors`` weights and a ``tekken.json`` or ``tokenizer.model.v*``
    file is read in mistral mode."""
    if not directory.is_dir():
        return False
    names = [p.name for p in directory.rglob("*") if p.is_file()]
    consolidated = any(fnmatch.fnmatch(n, "consolidated*.safetensors") for n in names)
    tokenizer = any(n == "tekken.json" or fnmatch.fnmatch(n, "tokenizer.model.v*") for n in names)
    return consolidated and tokenizer


def _import_mistral_common() -> Any:
    try:
        import mistral_common.tokens.tokenizers.mistral as mistral_module
    except ImportError:
        raise TokenizerError(MISSING_EXTRA_MESSAGE) from None
    return mistral_module


class MistralTokenizer(Tokenizer):
    """Encode, decode and render chat requests with ``mistral_common``, as vLLM does."""

    is_mistral = True

    def __init__(self, mistral: Any) -> None:
        """Wrap ``mistral``, a ``mistral_common`` ``MistralTokenizer`` in ``test`` mode."""
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
        from mistral_common.tokens.tokenizers.tekken import Tekkenizer

        self.mistral = mistral
        self.raw = mistral.instruct_tokenizer.tokenizer
        self._policy_keep = SpecialTokenPolicy.KEEP
        self._policy_ignore = SpecialTokenPolicy.IGNORE
        self.is_tekken = isinstance(self.raw, Tekkenizer)
        self.version = int(str(self.raw.version.value).split("v")[-1])
        raw = self.raw
        self._vocab_size = int(raw.n_words)
        pieces: list[str] = list(raw.vocab())
        self._pieces_by_id = pieces
        self._max_chars = max((len(p) for p in pieces), default=0)
        vocab: dict[str, int] = {}
        for token_id in range(self._vocab_size - 1, -1, -1):
            vocab[raw.id_to_piece(token_id)] = token_id
        self._vocab = vocab
        self._special_ids = [i for i in range(len(pieces)) if raw.is_special(i)]
        self._special_id_set = frozenset(self._special_ids)
        self._special_texts = {
            i: raw.decode([i], special_token_policy=SpecialTokenPolicy.KEEP)
            for i in self._special_ids
        }
        kept: set[int] = set()
        for text in _KEPT_SPECIALS:
            if text == "[TOOL_CALLS]" or _is_special_text(raw, text):
                kept_id = _special_id(raw, text)
                if kept_id is not None:
                    kept.add(kept_id)
        self._kept_specials = frozenset(kept)
        self._grammar_factory: Any = None

    @property
    def holds_backend(self) -> bool:
        """Always: ``mistral_common`` serves everything, nothing is let go."""
        return True

    async def ensure_backend(self) -> None:
        """Nothing to load (see :attr:`holds_backend`)."""

    @classmethod
    def from_dir(
        cls,
        model_dir: str | Path,
        **_: Any,
    ) -> MistralTokenizer:
        """Load the directory's ``tekken.json`` (or versioned SentencePiece model)."""
        directory = Path(model_dir)
        path = find_tokenizer_file(directory) if directory.is_dir() else None
        if path is None:
            raise TokenizerError(
                f"no Mistral tokenizer file (tekken.json or tokenizer.model.v*) in {directory}"
            )
        module = _import_mistral_common()
        from mistral_common.protocol.instruct.validator import ValidationMode

        try:
            mistral = module.MistralTokenizer.from_file(str(path), mode=ValidationMode.test)
        except Exception as e:  # mistral_common raises assorted errors on bad files
            raise TokenizerError(f"cannot load {path}: {e}") from e
        return cls(mistral)

    def grammar_factory(self) -> Any:
        """mistral_common's ``GrammarFactory`` for this tokenizer (built on first use),
        without the llguidance tokenizer it builds to validate grammars: rendering them does
        not use it."""
        factory = self._grammar_factory
        if factory is None:
            from mistral_common.guidance.grammar_factory import GrammarFactory

            factory = GrammarFactory.__new__(GrammarFactory)
            factory._tokenizer = self.raw
            factory._special_token_map = factory._build_special_token_map()
            self._grammar_factory = factory
        return factory

    @property
    def supports_grammar(self) -> bool:
        """mistral_common has grammars for it (a tekken tokenizer of version 11 on)."""
        return self.is_tekken and self.version >= 11

    # -- what the text layer asks of a tokenizer ------------------------------------------------

    @property
    def uses_fastokens(self) -> bool:
        """Never: mistral_common encodes."""
        return False

    def start_fast_encoder(self) -> None:
        """Nothing to start."""

    def wait_for_fast_encoder(self, timeout: float | None = None) -> bool:
        """Nothing to wait for."""
        return True

    @property
    def backend(self) -> Any:
        """There is no ``tokenizers`` backend."""
        raise TypeError("a Mistral tokenizer has no tokenizers backend")

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``: BOS first with ``add_special_tokens``, never an EOS."""
        return list(self.raw.encode(text, bos=add_special_tokens, eos=False))

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> list[list[int]]:
        """Token ids of several texts."""
        return [self.encode(t, add_special_tokens) for t in texts]

    @property
    def num_special_tokens_to_add(self) -> int:
        """Tokens ``add_special_tokens`` adds (the BOS)."""
        return len(self.raw.encode("", bos=True, eos=False))

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of ``token_ids`` (special tokens kept unless skipped)."""
        policy = self._policy_ignore if skip_special_tokens else self._policy_keep
        text = str(self.raw.decode(list(token_ids), special_token_policy=policy))
        return _LANG_PREFIX.sub("", text) if skip_special_tokens else text

    def decode_verbatim(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids`` with special tokens."""
        return self.decode(token_ids)

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary piece of one id (None when out of range)."""
        if 0 <= token_id < self._vocab_size:
            return str(self.raw.id_to_piece(token_id))
        return None

    def convert_ids_to_tokens(self, token_ids: Sequence[int]) -> list[str | None]:
        """Vocabulary pieces of several ids."""
        return [self.id_to_token(i) for i in token_ids]

    def token_to_id(self, token: str) -> int | None:
        """The lowest id whose piece is ``token`` (vLLM's ``get_vocab``), if any."""
        return self._vocab.get(token)

    def get_vocab(self) -> Mapping[str, int]:
        """Piece → lowest id, in id order."""
        return self._vocab

    @property
    def all_special_tokens(self) -> dict[str, int]:
        """The special tokens with their ids, in id order."""
        out: dict[str, int] = {}
        for token_id, text in self._special_texts.items():
            out.setdefault(text, token_id)
        return out

    def special_token(self, slot: str) -> str | None:
        """The text of ``bos_token``, ``eos_token``, ``unk_token`` or ``pad_token``."""
        token_id = self.special_token_id(slot)
        return None if token_id is None else self._special_texts.get(token_id)

    def special_token_id(self, slot: str) -> int | None:
        """The id of ``bos_token``, ``eos_token``, ``unk_token`` or ``pad_token``."""
        attr = {
            "bos_token": "bos_id",
            "eos_token": "eos_id",
            "unk_token": "unk_id",
            "pad_token": "pad_id",
        }.get(slot)
        if attr is None:
            return None
        try:
            return int(getattr(self.raw, attr))
        except Exception:
            return None

    @property
    def added_tokens(self) -> Mapping[int, str]:
        """None: mistral_common has no added vocabulary."""
        return {}

    @property
    def special_added_token_ids(self) -> frozenset[int]:
        """The special tokens' ids (what ``skip_special_tokens`` removes)."""
        return self._special_id_set

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        return self._vocab_size

    @property
    def max_token_id(self) -> int:
        """The largest token id."""
        return self._vocab_size - 1

    @property
    def max_chars_per_token(self) -> int:
        """Length of the longest vocabulary piece."""
        return self._max_chars

    # -- incremental detokenization (vLLM's slow path for this tokenizer) -----------------------

    def is_special_id(self, token_id: int) -> bool:
        """Whether ``token_id`` is a special (control) token."""
        return token_id in self._special_id_set

    def pieces_for_detokenizer(
        self, token_ids: Sequence[int], skip_special_tokens: bool
    ) -> list[str | bytes]:
        """vLLM's ``MistralTokenizer.convert_ids_to_tokens``: pieces of ``token_ids``; when
        skipping special tokens, those other than the tool-call and thinking markers are dropped
        and tekken pieces become raw bytes if one of them is an incomplete character."""
        raw = self.raw
        ids = list(token_ids)
        if not skip_special_tokens:
            return [raw.id_to_piece(i) for i in ids]
        ids = [i for i in ids if i in self._kept_specials or i not in self._special_id_set]
        pieces: list[str | bytes] = [raw.id_to_piece(i) for i in ids]
        if self.is_tekken and any("\ufffd" in p for p in pieces):
            pieces = [
                raw.decode([i], self._policy_keep)
                if i in self._special_id_set
                else raw.id_to_byte_piece(i, self._policy_keep)
                for i in ids
            ]
        return pieces

    def pieces_to_text(self, pieces: Sequence[str | bytes]) -> str:
        """vLLM's ``MistralTokenizer.convert_tokens_to_string``: the text of some pieces,
        special tokens other than the tool-call and thinking markers left out."""
        raw = self.raw
        if self.is_tekken:
            specials = self._special_texts_set()
            kept = [p for p in pieces if p in _KEPT_SPECIALS or p not in specials]
            if any(isinstance(p, bytes) for p in kept):
                ids = [self._tekken_piece_id(p) for p in kept]
                return str(raw.decode(ids, self._policy_keep))
            return "".join(kept)  # type: ignore[arg-type]
        out: list[str] = []
        regular: list[Any] = []
        for piece in pieces:
            if piece in _KEPT_SPECIALS:
                if regular:
                    out.append(raw.decode(regular, self._policy_ignore))
                    regular = []
                out.append(str(piece))
            else:
                regular.append(piece)
        if regular:
            out.append(raw.decode(regular, self._policy_ignore))
        return "".join(out)

    def _special_texts_set(self) -> frozenset[str]:
        texts = getattr(self, "_special_set_cache", None)
        if texts is None:
            texts = frozenset(self._special_texts.values())
            self._special_set_cache = texts
        return texts

    def _tekken_piece_id(self, piece: str | bytes) -> int:
        raw = self.raw
        data = piece.encode() if isinstance(piece, str) else piece
        try:
            return int(raw.num_special_tokens + raw._tekken_token2id_nospecial[data])
        except KeyError:
            text = data.decode("utf-8")
            reverse = raw._special_tokens_reverse_vocab
            return int(reverse[text]) if text in reverse else int(raw.unk_id)


def _is_special_text(raw: Any, text: str) -> bool:
    try:
        return bool(raw.is_special(text))
    except Exception:
        return False


def _special_id(raw: Any, text: str) -> int | None:
    try:
        return int(raw.get_special_token(text))
    except Exception:
        return None

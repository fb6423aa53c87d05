"""Small real tokenizers built offline with the `tokenizers` library, saved as HF model dirs.

Two families vLLM meets in practice: a GPT-2/Llama-3 style byte-level BPE, and a Llama-2 style
SentencePiece BPE with byte fallback (`<0xNN>` pieces) whose vocabulary lacks most non-Latin
characters, so multi-byte characters are split across tokens.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "hello",
    "world",
    "stop",
    "here",
    "there",
    "where",
    "when",
    "streaming",
    "text",
    "token",
    "model",
    "vllm",
    "frontend",
    "café",
    "naïve",
    "résumé",
    "Ünïcödé",
    "señor",
    "garçon",
    "ab",
    "abc",
    "abcd",
    "STOP",
    "END",
    "done",
    "finish",
    "12",
    "345",
    "6789",
    ",",
    ".",
    "!",
    "?",
    ":",
    ";",
    "'",
    '"',
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "-",
    "_",
    "=",
    "+",
    "def",
    "return",
    "import",
    "class",
    "self",
    "None",
    "True",
    "False",
    "if",
    "else",
    "for",
    "while",
]
_RARE = [*"日本語中文字한국어😀🎉🚀∑∂√€£¥", "👨‍👩‍👧", "e\u0301", "Z\u0308"]


def corpus(seed: int = 0, lines: int = 400) -> list[str]:
    """Deterministic training text mixing words, punctuation, newlines and rare characters."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 14))]
        if rng.random() < 0.3:
            words.insert(rng.randint(0, len(words)), rng.choice(_RARE))
        out.append(" ".join(words) + rng.choice(["", "\n", "\n\n", "  "]))
    return out


def build_byte_level(directory: Path) -> Path:
    """A Llama-3-like byte-level BPE with special and non-special added tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(1), trainer=trainer)
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|pad|>"])
    tok.add_tokens(["<tool>", "</tool>"])
    from tokenizers import processors

    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))],
    )
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": "<|begin_of_text|>",
                "eos_token": "<|eot_id|>",
                "pad_token": "<|pad|>",
                "tokenizer_class": "PreTrainedTokenizerFast",
                "clean_up_tokenization_spaces": True,
                "model_max_length": 1000000,
            }
        )
    )
    return directory


def build_byte_fallback(directory: Path) -> Path:
    """A Llama-2-like SentencePiece BPE with `<0xNN>` byte-fallback pieces."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        limit_alphabet=60,
        special_tokens=["<unk>", "<s>", "</s>"],
        show_progress=False,
    )
    tok.train_from_iterator(corpus(2), trainer=trainer)
    spec = json.loads(tok.to_str())
    model = spec["model"]
    trained = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    vocab: dict[str, int] = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in trained:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    model["vocab"] = vocab
    model["byte_fallback"] = True
    for added in spec["added_tokens"]:
        added["id"] = vocab[added["content"]]
    spec["pre_tokenizer"] = None
    spec["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    spec["post_processor"] = None
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    rebuilt = Tokenizer.from_file(str(directory / "tokenizer.json"))
    rebuilt.add_tokens(["<tool>"])
    rebuilt.add_special_tokens(["<|im_end|>"])
    rebuilt.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "add_bos_token": True,
                "add_eos_token": False,
                "tokenizer_class": "PreTrainedTokenizerFast",
                "clean_up_tokenization_spaces": False,
                "additional_special_tokens": ["<|im_end|>"],
            }
        )
    )
    return directory


def build_unigram_metaspace(directory: Path) -> Path:
    """A T5-like Unigram model with a Metaspace pre-tokenizer and WordPiece-era space clean-up."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "</s>", "<unk>"],
        unk_token="<unk>",
        show_progress=False,
    )
    tok.train_from_iterator(corpus(3), trainer=trainer)
    tok.add_tokens(["<extra_id_0>"])
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "unk_token": "<unk>",
                "tokenizer_class": "PreTrainedTokenizerFast",
                "clean_up_tokenization_spaces": True,
            }
        )
    )
    return directory

"""A tiny, reproducible Qwen2-Audio checkpoint (the audio family's test model).

Text side: the tiny Llama 3's tokenizer (tests/support/tiny_model.py) with Qwen2-Audio's special
tokens appended under their real names (``<|im_start|>``, ``<|im_end|>``, ``<|AUDIO|>``,
``<|audio_bos|>``, ``<|audio_eos|>``: ids 128256..128260), no BOS added, and the chat template
transformers' ``Qwen2AudioProcessor`` falls back to (tests/fixtures/chat-templates/
qwen2_audio.jinja). Network: a two-layer Qwen2 text model (hidden 128) and a two-layer Whisper
style audio encoder (width 64, 128 mel bins), random weights seeded as the tiny Qwen2-VL's. The
feature extractor is Whisper's with Qwen2-Audio's settings (128 mel bins, 16 kHz, 30 s chunks).

The builder runs in a subprocess (it needs torch and transformers), once; the checkpoint is
cached under ``$VLLM_FRONTEND_TEST_CACHE`` like the tiny Llama.

    python -m tests.support.tiny_qwen2_audio      # build (if needed) and print the directory
"""

from __future__ import annotations

import json
import pathlib
import sys

from tests.support import tiny_vlm
from tests.support.fixtures import CHAT_TEMPLATES
from tests.support.tiny_model import cached_build, inputs_hash, run_builder, tiny_model_dir

CHAT_TEMPLATE_PATH = CHAT_TEMPLATES / "qwen2_audio.jinja"
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")
"""Qwen2-Audio's special tokens in its order (151644.. there), appended to Llama 3's 128256."""
LLAMA3_VOCAB = 128256
IM_END = LLAMA3_VOCAB + 1
AUDIO = LLAMA3_VOCAB + SPECIALS.index("<|AUDIO|>")
AUDIO_BOS = LLAMA3_VOCAB + SPECIALS.index("<|audio_bos|>")
AUDIO_EOS = LLAMA3_VOCAB + SPECIALS.index("<|audio_eos|>")
SAMPLING_RATE = 16000

BUILDER_VERSION = 2
"""Bump when the output changes in a way the hashed inputs do not capture."""


def _input_hash(llama: pathlib.Path) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        CHAT_TEMPLATE_PATH.read_bytes(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_qwen2_audio_dir() -> pathlib.Path:
    """The tiny Qwen2-Audio checkpoint's directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()

    def build(staging: pathlib.Path) -> None:
        run_builder("tests.support.tiny_qwen2_audio", staging, str(llama))

    return cached_build(f"tiny-qwen2-audio-{_input_hash(llama)}", build)


def _build_tokenizer(llama: pathlib.Path, out: pathlib.Path, template: str) -> None:
    from tokenizers import AddedToken, Tokenizer, processors

    tokenizer = Tokenizer.from_file(str(llama / "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=True) == LLAMA3_VOCAB
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIALS])
    ids = [tokenizer.token_to_id(t) for t in SPECIALS]
    assert ids == list(range(LLAMA3_VOCAB, LLAMA3_VOCAB + len(SPECIALS))), ids
    tokenizer.post_processor = processors.ByteLevel(
        add_prefix_space=True, trim_offsets=False, use_regex=True
    )
    tokenizer.save(str(out / "tokenizer.json"))
    added = {
        str(t["id"]): {
            k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
        }
        for t in json.loads((out / "tokenizer.json").read_text())["added_tokens"]
    }
    tiny_vlm.write_json(
        out / "tokenizer_config.json",
        {
            "added_tokens_decoder": added,
            "additional_special_tokens": list(SPECIALS),
            "bos_token": None,
            "chat_template": template,
            "clean_up_tokenization_spaces": False,
            "eos_token": "<|im_end|>",
            "errors": "replace",
            "model_max_length": 8192,
            "pad_token": "<|end_of_text|>",
            "padding_side": "left",
            "split_special_tokens": False,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": None,
        },
    )
    tiny_vlm.write_json(
        out / "special_tokens_map.json",
        {
            "additional_special_tokens": list(SPECIALS),
            "eos_token": "<|im_end|>",
            "pad_token": "<|end_of_text|>",
        },
    )
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")


def _checkpoint_name(name: str) -> str:
    # transformers 5 parameter names -> the names that seed each tensor's generator.
    for new, old in (("model.language_model.", "language_model.model."),):
        if name.startswith(new):
            return old + name[len(new) :]
    return name


def _saved_name(name: str) -> str:
    # transformers 5 parameter names -> the original checkpoint's names, which vLLM loads.
    # (transformers 5.19's save_pretrained writes ``language_model.model.model.*``, which vLLM
    # 0.32's Qwen2-Audio refuses: "no module or parameter named 'model' in Qwen2Model".)
    for new, old in (
        ("model.language_model.", "language_model.model."),
        ("model.", ""),
        ("lm_head.", "language_model.lm_head."),
    ):
        if name.startswith(new):
            return old + name[len(new) :]
    return name


def _build(out: pathlib.Path, llama: pathlib.Path) -> None:
    """Write the checkpoint (runs in a subprocess: imports torch and transformers)."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    _build_tokenizer(llama, out, CHAT_TEMPLATE_PATH.read_text(encoding="utf-8"))
    text = {
        "model_type": "qwen2",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 8192,
        "vocab_size": LLAMA3_VOCAB + len(SPECIALS),
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": tiny_vlm.BOS,
        "eos_token_id": IM_END,
        "pad_token_id": tiny_vlm.END_OF_TEXT,
        "dtype": "bfloat16",
    }
    audio = {
        "num_mel_bins": 128,
        "encoder_layers": 2,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 128,
        "d_model": 64,
        "max_source_positions": 1500,
    }
    config = Qwen2AudioConfig(
        audio_config=audio, text_config=text, audio_token_index=AUDIO, dtype="bfloat16"
    )
    torch.manual_seed(tiny_vlm.SEED)
    model = Qwen2AudioForConditionalGeneration(config)
    tiny_vlm.randomize(model, _checkpoint_name)
    config.architectures = ["Qwen2AudioForConditionalGeneration"]
    config.save_pretrained(str(out))
    tensors = {
        _saved_name(name): param.detach().to(torch.bfloat16).contiguous()
        for name, param in model.named_parameters()
    }
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    tiny_vlm.write_json(
        out / "generation_config.json",
        {
            "bos_token_id": tiny_vlm.BOS,
            "do_sample": False,
            "eos_token_id": [IM_END, tiny_vlm.END_OF_TEXT],
            "pad_token_id": tiny_vlm.END_OF_TEXT,
        },
    )
    tiny_vlm.write_json(
        out / "preprocessor_config.json",
        {
            "chunk_length": 30,
            "dither": 0.0,
            "feature_extractor_type": "WhisperFeatureExtractor",
            "feature_size": 128,
            "hop_length": 160,
            "n_fft": 400,
            "n_samples": 480000,
            "nb_max_frames": 3000,
            "padding_side": "right",
            "padding_value": 0.0,
            "processor_class": "Qwen2AudioProcessor",
            "return_attention_mask": True,
            "sampling_rate": SAMPLING_RATE,
        },
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--build":
        _build(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]))
    else:
        print(tiny_qwen2_audio_dir())

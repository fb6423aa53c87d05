"""A tiny Qwen3-VL model directory for the frontends' tests (configs, tokenizer and processor
files; no weights: it is served in front of mock engines and read by vLLM's processor in
process). The tokenizer and chat template are the tiny Qwen2-VL's (tests/support/tiny_vlm.py:
Qwen3-VL has the same vision tokens); the image processor is Qwen3-VL's (16-pixel patches, 2x2
merge, mean and std 0.5) with a small pixel budget.

    python -m tests.support.tiny_qwen3_vl      # build (if needed) and print the directory
"""

from __future__ import annotations

import pathlib
import shutil

from tests.support import tiny_vlm
from tests.support.tiny_model import cached_build, inputs_hash, tiny_model_dir

BUILDER_VERSION = 1
"""Bump when the output changes in a way the hashed inputs do not capture."""
MIN_PIXELS = 32 * 32 * 4
MAX_PIXELS = 32 * 32 * 96
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "chat_template.jinja")  # fmt: skip


def _input_hash(llama: pathlib.Path) -> str:
    return inputs_hash(
        pathlib.Path(__file__).read_bytes(),
        pathlib.Path(tiny_vlm.__file__).read_bytes(),
        (llama / "tokenizer.json").read_bytes(),
        tiny_vlm.CHAT_TEMPLATE_PATH.read_bytes(),
        f"builder={BUILDER_VERSION}".encode(),
    )


def tiny_qwen3_vl_dir() -> pathlib.Path:
    """The tiny Qwen3-VL directory, building it first if the cache lacks it."""
    llama = tiny_model_dir()

    def build(staging: pathlib.Path) -> None:
        source = tiny_vlm.tiny_vlm_dir()
        for name in _TOKENIZER_FILES:
            shutil.copyfile(source / name, staging / name)
        _write_configs(staging)

    return cached_build(f"tiny-qwen3-vl-{_input_hash(llama)}", build)


def _write_configs(out: pathlib.Path) -> None:
    vocab = tiny_vlm.LLAMA3_VOCAB + len(tiny_vlm.QWEN2_VL_SPECIALS)
    text = {
        "model_type": "qwen3_vl_text",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 4096,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "mrope_section": [4, 6, 6],
            "mrope_interleaved": True,
            "rope_theta": 5000000.0,
        },
        "bos_token_id": tiny_vlm.BOS,
        "eos_token_id": tiny_vlm.IM_END,
        "dtype": "bfloat16",
    }
    vision = {
        "model_type": "qwen3_vl_vision",
        "depth": 2,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "out_hidden_size": 128,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [1],
        "in_channels": 3,
        "hidden_act": "gelu_pytorch_tanh",
    }
    tiny_vlm.write_json(
        out / "config.json",
        {
            "architectures": ["Qwen3VLForConditionalGeneration"],
            "model_type": "qwen3_vl",
            "text_config": text,
            "vision_config": vision,
            "image_token_id": tiny_vlm.IMAGE_PAD,
            "video_token_id": tiny_vlm.VIDEO_PAD,
            "vision_start_token_id": tiny_vlm.VISION_START,
            "vision_end_token_id": tiny_vlm.VISION_END,
            "tie_word_embeddings": False,
            "dtype": "bfloat16",
        },
    )
    processor = {
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "processor_class": "Qwen3VLProcessor",
    }
    tiny_vlm.write_json(
        out / "preprocessor_config.json",
        {**processor, "image_processor_type": "Qwen2VLImageProcessorFast"},
    )
    tiny_vlm.write_json(
        out / "video_preprocessor_config.json",
        {**processor, "video_processor_type": "Qwen3VLVideoProcessor", "fps": 2,
         "min_frames": 4, "max_frames": 768, "do_sample_frames": True},
    )  # fmt: skip


if __name__ == "__main__":
    print(tiny_qwen3_vl_dir())

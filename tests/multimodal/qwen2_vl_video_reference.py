"""Runs transformers' ``Qwen2VLVideoProcessor`` on videos from a file (a subprocess: it needs
the torchvision stand-in of tests/fixtures/torchvision_stub on ``sys.path``, which must not
leak into the test process's transformers).

    python -m tests.multimodal.qwen2_vl_video_reference IN.npz OUT.npz

``IN.npz`` holds ``settings`` (a JSON list) and ``video_<n>_<i>`` arrays (``uint8 [T, H, W, 3]``,
each processed alone with settings ``n``); ``OUT.npz`` gets ``pixel_values_videos_<n>_<i>`` and
``video_grid_thw_<n>_<i>``, or ``error_<n>_<i>`` when the processor refused the video.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def main(source: str, target: str) -> None:
    """Process every video of ``source`` into ``target``."""
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    data = np.load(source)
    processors = [Qwen2VLVideoProcessor(**s) for s in json.loads(str(data["settings"]))]
    out: dict[str, np.ndarray] = {}
    for key in sorted(k for k in data.files if k.startswith("video_")):
        index = key.removeprefix("video_")
        processor = processors[int(index.split("_")[0])]
        try:
            result = processor(videos=[data[key]], return_tensors="np")
        except Exception as error:
            out[f"error_{index}"] = np.array(repr(error))
            continue
        out[f"pixel_values_videos_{index}"] = result["pixel_values_videos"]
        out[f"video_grid_thw_{index}"] = result["video_grid_thw"]
    np.savez(target, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

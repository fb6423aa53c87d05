"""The model-name check every route shares (generation, tokenize), against vLLM's own."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from vllm_frontend.llm import LoraAdapters
from vllm_frontend.server import errors
from vllm_frontend.server.generation import ServingContext
from vllm_frontend.server.services import check_model

NAMES = ("tiny", "alias")


def _accepts(check: Callable[[], None]) -> bool:
    try:
        check()
    except errors.NotFound:
        return False
    return True


@pytest.mark.oracle
@pytest.mark.parametrize("name", [None, "", "tiny", "alias", "gpt-9", " tiny", "TINY"])
def test_model_names_are_accepted_as_vllm_accepts_them(
    monkeypatch: pytest.MonkeyPatch, name: str | None
) -> None:
    monkeypatch.delenv("VLLM_SKIP_MODEL_NAME_VALIDATION", raising=False)
    from vllm.entrypoints.serve.engine.serving import BaseServing

    served = SimpleNamespace(models=SimpleNamespace(is_base_model=lambda model: model in NAMES))
    theirs = BaseServing._is_model_supported(served, name)  # type: ignore[arg-type]
    assert _accepts(lambda: check_model(NAMES, name)) == theirs
    # the generation routes' check is the same one
    context = SimpleNamespace(
        served_model_names=list(NAMES),
        text=SimpleNamespace(adapters=LoraAdapters(None)),
        runtime_lora_updating=False,
    )
    assert _accepts(lambda: ServingContext.check_model(context, name)) == theirs  # type: ignore[arg-type]

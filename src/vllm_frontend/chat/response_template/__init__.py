"""``--reasoning-parser hf`` / ``--tool-call-parser hf``: a model's output read with the
``response_template`` its tokenizer configuration ships, as vLLM 0.32 reads it
(``vllm/parser/response_template.py`` over ``vllm/parser/chat_parsing/``, transformers'
``utils/chat_parsing``).

Modules, bottom-up: :mod:`.template` (loading and checking a template), :mod:`.content` (what a
closed region's text becomes), :mod:`.scanner` (the streaming region reader),
:mod:`.serving` (what vLLM's serving adapter accepts and the reasoning-end check),
:mod:`.output` (one choice's parser). The ``regex`` package (the ``hf-parser`` extra) compiles
the delimiters, as in vLLM; startup says so when it is missing.

Tool-call ids are vLLM's: random ``chatcmpl-tool-`` ids, or ``functions.NAME:N`` for a Kimi
model type (``get_tool_call_id_type``), N counting on from the conversation's calls. On the
Responses route those are counted on the chat messages its input maps to (vLLM counts the input
items; the two agree for function-call items and assistant messages).
"""

from vllm_frontend.chat.response_template.output import ResponseTemplateOutputParser
from vllm_frontend.chat.response_template.serving import (
    check_serving_template,
    reasoning_has_ended,
    request_refusal,
    serving_template,
    template_of,
)
from vllm_frontend.chat.response_template.template import (
    ResponseTemplate,
    load_response_template,
    regex_module,
)

__all__ = [
    "ResponseTemplate",
    "ResponseTemplateOutputParser",
    "check_serving_template",
    "load_response_template",
    "reasoning_has_ended",
    "regex_module",
    "request_refusal",
    "serving_template",
    "template_of",
]

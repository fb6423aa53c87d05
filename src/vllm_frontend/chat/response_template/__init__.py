"""``--reasoning-parser hf`` / ``--tool-call-parser hf``: a model's output read with the
``response_template`` its tokenizer configuration ships, as vLLM 0.32 reads it
(``vllm/parser/response_template.py`` over ``vllm/parser/chat_parsing/``, transformers'
``utils/chat_parsing``).

Modules, bottom-up: :mod:`.template` (loading and checking a template), :mod:`.content` (what a
closed region's text becomes), :mod:`.scanner` (the streaming region reader),
:mod:`.serving` (what vLLM's serving adapter accepts and the reasoning-end check),
:mod:`.output` (one choice's parser). The ``regex`` package (the ``hf-parser`` extra) compiles
the delimiters, as in vLLM; startup says so when it is missing.

Where this is not vLLM exactly: tool-call ids are always ``chatcmpl-tool-`` random ids, where
vLLM writes ``functions.<name>:<index>`` ids (counting the history's calls) for a Kimi model
type (``get_tool_call_id_type``); an ``hf`` template on a Kimi checkpoint would show it.
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

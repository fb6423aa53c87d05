"""Chat templates and chat message handling (vLLM 0.32 / transformers semantics).

The layer's facade is ``chat.llm.ChatLlm``: render, tokenize and generate over the text layer,
with the tool-call and reasoning output parsers. It holds the :class:`ChatRenderer` built once at
startup; every client mistake surfaces as :class:`ChatError` (HTTP 400).
"""

from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.messages import Conversation, normalize_messages, normalize_tools
from vllm_frontend.chat.renderer import (
    ChatRenderer,
    ChatTemplateOptions,
    ContentFormatOption,
    RenderedChat,
    special_tokens_map,
)
from vllm_frontend.chat.sources import (
    NO_TEMPLATE_MESSAGE,
    UNTRUSTED_TEMPLATE_MESSAGE,
    ModelChatTemplates,
    load_chat_template_option,
)
from vllm_frontend.chat.template import (
    CompiledTemplate,
    ContentFormat,
    compile_template,
    render_template,
)

__all__ = [
    "NO_TEMPLATE_MESSAGE",
    "UNTRUSTED_TEMPLATE_MESSAGE",
    "ChatError",
    "ChatRenderer",
    "ChatTemplateOptions",
    "CompiledTemplate",
    "ContentFormat",
    "ContentFormatOption",
    "Conversation",
    "ModelChatTemplates",
    "RenderedChat",
    "compile_template",
    "load_chat_template_option",
    "normalize_messages",
    "normalize_tools",
    "render_template",
    "special_tokens_map",
]

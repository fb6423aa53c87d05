"""Chat templates and chat message handling (vLLM 0.32 / transformers semantics).

The server builds one :class:`ChatRenderer` at startup and calls :meth:`ChatRenderer.render`
per request; every client mistake surfaces as :class:`ChatError` (HTTP 400).
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

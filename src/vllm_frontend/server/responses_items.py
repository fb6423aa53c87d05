"""The SDK's Responses input item union as vLLM's request model validates ``input`` items
(``openai.types.responses`` ``ResponseInputItemParam``, then the output item models of
``ResponseOutputItem``): its members in order, each with its fields in their order, as an
error-report schema. Written from the SDK's types; fields of nested types are not modelled
(they take any value, or only need to be iterable where the SDK says ``Iterable``).

pydantic reports every member's errors for an item no member takes (200-odd for a message with
an unknown role); :func:`item_errors` gives that list for an item ours refuses.
"""

from __future__ import annotations

from typing import Any

from .validation import (
    AnyValue,
    Bool,
    Int,
    Iterable,
    ListOf,
    Model,
    Optional,
    Str,
    TaggedUnion,
    TypedDict,
    Union,
)
from .validation import Literal as LiteralSpec

__all__ = ["item_errors"]

_INPUT_ITEM = TaggedUnion(
    TypedDict(
        "EasyInputMessageParam",
        {
            "content": Union(Str(), ListOf(AnyValue())),
            "role": LiteralSpec("user", "assistant", "system", "developer"),
            "phase": Optional(LiteralSpec("commentary", "final_answer")),
            "type": LiteralSpec("message"),
        },
        ["content", "role"],
    ),
    TypedDict(
        "Message",
        {
            "content": ListOf(AnyValue()),
            "role": LiteralSpec("user", "system", "developer"),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("message"),
        },
        ["content", "role"],
    ),
    TypedDict(
        "ResponseOutputMessageParam",
        {
            "id": Str(),
            "content": Iterable(),
            "role": LiteralSpec("assistant"),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("message"),
            "phase": Optional(LiteralSpec("commentary", "final_answer")),
        },
        ["id", "content", "role", "status", "type"],
    ),
    TypedDict(
        "ResponseFileSearchToolCallParam",
        {
            "id": Str(),
            "queries": AnyValue(),
            "status": LiteralSpec("in_progress", "searching", "completed", "incomplete", "failed"),
            "type": LiteralSpec("file_search_call"),
            "results": Optional(Iterable()),
        },
        ["id", "queries", "status", "type"],
    ),
    TypedDict(
        "ResponseComputerToolCallParam",
        {
            "id": Str(),
            "call_id": Str(),
            "pending_safety_checks": Iterable(),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("computer_call"),
            "action": AnyValue(),
            "actions": ListOf(AnyValue()),
        },
        ["id", "call_id", "pending_safety_checks", "status", "type"],
    ),
    TypedDict(
        "ComputerCallOutput",
        {
            "call_id": Str(),
            "output": AnyValue(),
            "type": LiteralSpec("computer_call_output"),
            "id": Optional(Str()),
            "acknowledged_safety_checks": Optional(Iterable()),
            "status": Optional(LiteralSpec("in_progress", "completed", "incomplete")),
        },
        ["call_id", "output", "type"],
    ),
    TypedDict(
        "ResponseFunctionWebSearchParam",
        {
            "id": Str(),
            "action": AnyValue(),
            "status": LiteralSpec("in_progress", "searching", "completed", "incomplete", "failed"),
            "type": LiteralSpec("web_search_call"),
        },
        ["id", "action", "status", "type"],
    ),
    TypedDict(
        "ResponseFunctionToolCallParam",
        {
            "async": Bool(),
            "arguments": Str(),
            "call_id": Str(),
            "name": Str(),
            "type": LiteralSpec("function_call"),
            "id": Str(),
            "caller": AnyValue(),
            "namespace": Str(),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
        },
        ["arguments", "call_id", "name", "type"],
    ),
    TypedDict(
        "FunctionCallOutput",
        {
            "output": Union(Str(), ListOf(AnyValue())),
            "type": LiteralSpec("function_call_output"),
            "id": Optional(Str()),
            "call_id": Optional(Str()),
            "caller": AnyValue(),
            "name": Optional(Str()),
            "namespace": Optional(Str()),
            "status": Optional(LiteralSpec("in_progress", "completed", "incomplete")),
        },
        ["output", "type"],
    ),
    TypedDict(
        "ToolSearchCall",
        {
            "arguments": AnyValue(),
            "type": LiteralSpec("tool_search_call"),
            "id": Optional(Str()),
            "call_id": Optional(Str()),
            "execution": LiteralSpec("server", "client"),
            "status": Optional(LiteralSpec("in_progress", "completed", "incomplete")),
        },
        ["arguments", "type"],
    ),
    TypedDict(
        "ResponseToolSearchOutputItemParamParam",
        {
            "tools": Iterable(),
            "type": LiteralSpec("tool_search_output"),
            "id": Optional(Str()),
            "call_id": Optional(Str()),
            "execution": LiteralSpec("server", "client"),
            "status": Optional(LiteralSpec("in_progress", "completed", "incomplete")),
        },
        ["tools", "type"],
    ),
    TypedDict(
        "AdditionalTools",
        {
            "role": LiteralSpec("developer"),
            "tools": Iterable(),
            "type": LiteralSpec("additional_tools"),
            "id": Optional(Str()),
        },
        ["role", "tools", "type"],
    ),
    TypedDict(
        "ResponseConfigurationUpdateItemParamParam",
        {
            "type": LiteralSpec("configuration_update"),
            "id": Optional(Str()),
            "reasoning": AnyValue(),
            "text": AnyValue(),
        },
        ["type"],
    ),
    TypedDict(
        "ResponseReasoningItemParam",
        {
            "id": Str(),
            "summary": Iterable(),
            "type": LiteralSpec("reasoning"),
            "content": Iterable(),
            "encrypted_content": Optional(Str()),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
        },
        ["id", "summary", "type"],
    ),
    TypedDict(
        "ResponseCompactionItemParamParam",
        {"encrypted_content": Str(), "type": LiteralSpec("compaction"), "id": Optional(Str())},
        ["encrypted_content", "type"],
    ),
    TypedDict(
        "ImageGenerationCall",
        {
            "id": Str(),
            "result": Optional(Str()),
            "status": LiteralSpec("in_progress", "completed", "generating", "failed"),
            "type": LiteralSpec("image_generation_call"),
            "action": Optional(LiteralSpec("generate", "edit", "auto")),
            "background": Optional(LiteralSpec("transparent", "opaque", "auto")),
            "error": AnyValue(),
            "output_format": Optional(LiteralSpec("png", "webp", "jpeg", "gif", "svg")),
            "quality": Optional(LiteralSpec("low", "medium", "high", "xhigh", "max", "auto")),
            "revised_prompt": Optional(Str()),
            "size": Optional(Union(Str(), LiteralSpec("1024x1024", "1024x1536", "1536x1024"))),
            "svg_usage": AnyValue(),
        },
        ["id", "result", "status", "type"],
    ),
    TypedDict(
        "ResponseCodeInterpreterToolCallParam",
        {
            "id": Str(),
            "code": Optional(Str()),
            "container_id": Str(),
            "outputs": Optional(Iterable()),
            "status": LiteralSpec(
                "in_progress", "completed", "incomplete", "interpreting", "failed"
            ),
            "type": LiteralSpec("code_interpreter_call"),
        },
        ["id", "code", "container_id", "outputs", "status", "type"],
    ),
    TypedDict(
        "LocalShellCall",
        {
            "id": Str(),
            "action": AnyValue(),
            "call_id": Str(),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("local_shell_call"),
        },
        ["id", "action", "call_id", "status", "type"],
    ),
    TypedDict(
        "LocalShellCallOutput",
        {
            "id": Str(),
            "output": Str(),
            "type": LiteralSpec("local_shell_call_output"),
            "status": Optional(LiteralSpec("in_progress", "completed", "incomplete")),
        },
        ["id", "output", "type"],
    ),
    TypedDict(
        "ShellCall",
        {
            "action": AnyValue(),
            "call_id": Str(),
            "type": LiteralSpec("shell_call"),
            "id": Optional(Str()),
            "caller": AnyValue(),
            "environment": AnyValue(),
            "status": Optional(LiteralSpec("in_progress", "completed", "incomplete")),
        },
        ["action", "call_id", "type"],
    ),
    TypedDict(
        "ShellCallOutput",
        {
            "call_id": Str(),
            "output": Iterable(),
            "type": LiteralSpec("shell_call_output"),
            "id": Optional(Str()),
            "caller": AnyValue(),
            "max_output_length": Optional(Int()),
            "status": Optional(LiteralSpec("in_progress", "completed", "incomplete")),
        },
        ["call_id", "output", "type"],
    ),
    TypedDict(
        "ApplyPatchCall",
        {
            "call_id": Str(),
            "operation": AnyValue(),
            "status": LiteralSpec("in_progress", "completed"),
            "type": LiteralSpec("apply_patch_call"),
            "id": Optional(Str()),
            "caller": AnyValue(),
        },
        ["call_id", "operation", "status", "type"],
    ),
    TypedDict(
        "ApplyPatchCallOutput",
        {
            "call_id": Str(),
            "status": LiteralSpec("completed", "failed"),
            "type": LiteralSpec("apply_patch_call_output"),
            "id": Optional(Str()),
            "caller": AnyValue(),
            "output": Optional(Str()),
        },
        ["call_id", "status", "type"],
    ),
    TypedDict(
        "McpListTools",
        {
            "id": Str(),
            "server_label": Str(),
            "tools": Iterable(),
            "type": LiteralSpec("mcp_list_tools"),
            "error": Optional(Str()),
        },
        ["id", "server_label", "tools", "type"],
    ),
    TypedDict(
        "McpApprovalRequest",
        {
            "id": Str(),
            "arguments": Str(),
            "name": Str(),
            "server_label": Str(),
            "type": LiteralSpec("mcp_approval_request"),
        },
        ["id", "arguments", "name", "server_label", "type"],
    ),
    TypedDict(
        "McpApprovalResponse",
        {
            "approval_request_id": Str(),
            "approve": Bool(),
            "type": LiteralSpec("mcp_approval_response"),
            "id": Optional(Str()),
            "reason": Optional(Str()),
        },
        ["approval_request_id", "approve", "type"],
    ),
    TypedDict(
        "McpCall",
        {
            "id": Str(),
            "arguments": Str(),
            "name": Str(),
            "server_label": Str(),
            "type": LiteralSpec("mcp_call"),
            "approval_request_id": Optional(Str()),
            "error": AnyValue(),
            "output": Optional(Str()),
            "status": LiteralSpec("in_progress", "completed", "incomplete", "calling", "failed"),
        },
        ["id", "arguments", "name", "server_label", "type"],
    ),
    TypedDict(
        "ResponseCustomToolCallOutputParam",
        {
            "call_id": Str(),
            "output": Union(Str(), Iterable()),
            "type": LiteralSpec("custom_tool_call_output"),
            "id": Str(),
            "caller": AnyValue(),
        },
        ["call_id", "output", "type"],
    ),
    TypedDict(
        "ResponseCustomToolCallParam",
        {
            "async": Bool(),
            "call_id": Str(),
            "input": Str(),
            "name": Str(),
            "type": LiteralSpec("custom_tool_call"),
            "id": Str(),
            "caller": AnyValue(),
            "namespace": Str(),
        },
        ["call_id", "input", "name", "type"],
    ),
    TypedDict(
        "CompactionTrigger",
        {"type": LiteralSpec("compaction_trigger"), "id": Optional(Str())},
        ["type"],
    ),
    TypedDict(
        "ItemReference", {"id": Str(), "type": Optional(LiteralSpec("item_reference"))}, ["id"]
    ),
    TypedDict(
        "Program",
        {
            "id": Str(),
            "call_id": Str(),
            "code": Str(),
            "fingerprint": Str(),
            "type": LiteralSpec("program"),
        },
        ["id", "call_id", "code", "fingerprint", "type"],
    ),
    TypedDict(
        "ProgramOutput",
        {
            "id": Str(),
            "call_id": Str(),
            "result": Str(),
            "status": LiteralSpec("completed", "incomplete"),
            "type": LiteralSpec("program_output"),
        },
        ["id", "call_id", "result", "status", "type"],
    ),
    Model(
        "ResponseOutputMessage",
        {
            "id": Str(),
            "content": ListOf(AnyValue()),
            "role": LiteralSpec("assistant"),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("message"),
            "phase": Optional(LiteralSpec("commentary", "final_answer")),
        },
        ["id", "content", "role", "status", "type"],
    ),
    Model(
        "ResponseFileSearchToolCall",
        {
            "id": Str(),
            "queries": ListOf(AnyValue()),
            "status": LiteralSpec("in_progress", "searching", "completed", "incomplete", "failed"),
            "type": LiteralSpec("file_search_call"),
            "results": Optional(ListOf(AnyValue())),
        },
        ["id", "queries", "status", "type"],
    ),
    Model(
        "ResponseFunctionToolCall",
        {
            "arguments": Str(),
            "call_id": Str(),
            "name": Str(),
            "type": LiteralSpec("function_call"),
            "id": Optional(Str()),
            "async": Optional(Bool()),
            "caller": AnyValue(),
            "namespace": Optional(Str()),
            "status": Optional(LiteralSpec("in_progress", "completed", "incomplete")),
        },
        ["arguments", "call_id", "name", "type"],
    ),
    Model(
        "ResponseFunctionToolCallOutputItem",
        {
            "id": Str(),
            "output": Union(Str(), ListOf(AnyValue())),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("function_call_output"),
            "call_id": Optional(Str()),
            "caller": AnyValue(),
            "created_by": Optional(Str()),
            "name": Optional(Str()),
            "namespace": Optional(Str()),
        },
        ["id", "output", "status", "type"],
    ),
    Model(
        "ResponseFunctionWebSearch",
        {
            "id": Str(),
            "action": AnyValue(),
            "status": LiteralSpec("in_progress", "searching", "completed", "failed", "incomplete"),
            "type": LiteralSpec("web_search_call"),
        },
        ["id", "action", "status", "type"],
    ),
    Model(
        "ResponseComputerToolCall",
        {
            "id": Str(),
            "call_id": Str(),
            "pending_safety_checks": ListOf(AnyValue()),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("computer_call"),
            "action": AnyValue(),
            "actions": Optional(ListOf(AnyValue())),
        },
        ["id", "call_id", "pending_safety_checks", "status", "type"],
    ),
    Model(
        "ResponseComputerToolCallOutputItem",
        {
            "id": Str(),
            "call_id": Str(),
            "output": AnyValue(),
            "status": LiteralSpec("completed", "incomplete", "failed", "in_progress"),
            "type": LiteralSpec("computer_call_output"),
            "acknowledged_safety_checks": Optional(ListOf(AnyValue())),
            "created_by": Optional(Str()),
        },
        ["id", "call_id", "output", "status", "type"],
    ),
    Model(
        "ResponseReasoningItem",
        {
            "id": Str(),
            "summary": ListOf(AnyValue()),
            "type": LiteralSpec("reasoning"),
            "content": Optional(ListOf(AnyValue())),
            "encrypted_content": Optional(Str()),
            "status": Optional(LiteralSpec("in_progress", "completed", "incomplete")),
        },
        ["id", "summary", "type"],
    ),
    Model(
        "Program",
        {
            "id": Str(),
            "call_id": Str(),
            "code": Str(),
            "fingerprint": Str(),
            "type": LiteralSpec("program"),
        },
        ["id", "call_id", "code", "fingerprint", "type"],
    ),
    Model(
        "ProgramOutput",
        {
            "id": Str(),
            "call_id": Str(),
            "result": Str(),
            "status": LiteralSpec("completed", "incomplete"),
            "type": LiteralSpec("program_output"),
        },
        ["id", "call_id", "result", "status", "type"],
    ),
    Model(
        "ResponseToolSearchCall",
        {
            "id": Str(),
            "arguments": AnyValue(),
            "call_id": Optional(Str()),
            "execution": LiteralSpec("server", "client"),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("tool_search_call"),
            "created_by": Optional(Str()),
        },
        ["id", "arguments", "execution", "status", "type"],
    ),
    Model(
        "ResponseToolSearchOutputItem",
        {
            "id": Str(),
            "call_id": Optional(Str()),
            "execution": LiteralSpec("server", "client"),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "tools": ListOf(AnyValue()),
            "type": LiteralSpec("tool_search_output"),
            "created_by": Optional(Str()),
        },
        ["id", "execution", "status", "tools", "type"],
    ),
    Model(
        "AdditionalTools",
        {
            "id": Str(),
            "role": LiteralSpec(
                "unknown",
                "user",
                "assistant",
                "system",
                "critic",
                "discriminator",
                "developer",
                "tool",
            ),
            "tools": ListOf(AnyValue()),
            "type": LiteralSpec("additional_tools"),
        },
        ["id", "role", "tools", "type"],
    ),
    Model(
        "ResponseCompactionItem",
        {
            "id": Str(),
            "encrypted_content": Str(),
            "type": LiteralSpec("compaction"),
            "created_by": Optional(Str()),
        },
        ["id", "encrypted_content", "type"],
    ),
    Model(
        "ImageGenerationCall",
        {
            "id": Str(),
            "result": Optional(Str()),
            "status": LiteralSpec("in_progress", "completed", "generating", "failed"),
            "type": LiteralSpec("image_generation_call"),
            "action": Optional(LiteralSpec("generate", "edit", "auto")),
            "background": Optional(LiteralSpec("transparent", "opaque", "auto")),
            "error": AnyValue(),
            "output_format": Optional(LiteralSpec("png", "webp", "jpeg", "gif", "svg")),
            "quality": Optional(LiteralSpec("low", "medium", "high", "xhigh", "max", "auto")),
            "revised_prompt": Optional(Str()),
            "size": Optional(Union(Str(), LiteralSpec("1024x1024", "1024x1536", "1536x1024"))),
            "svg_usage": AnyValue(),
        },
        ["id", "status", "type"],
    ),
    Model(
        "ResponseCodeInterpreterToolCall",
        {
            "id": Str(),
            "code": Optional(Str()),
            "container_id": Str(),
            "outputs": Optional(ListOf(AnyValue())),
            "status": LiteralSpec(
                "in_progress", "completed", "incomplete", "interpreting", "failed"
            ),
            "type": LiteralSpec("code_interpreter_call"),
        },
        ["id", "container_id", "status", "type"],
    ),
    Model(
        "LocalShellCall",
        {
            "id": Str(),
            "action": AnyValue(),
            "call_id": Str(),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("local_shell_call"),
        },
        ["id", "action", "call_id", "status", "type"],
    ),
    Model(
        "LocalShellCallOutput",
        {
            "id": Str(),
            "output": Str(),
            "type": LiteralSpec("local_shell_call_output"),
            "status": Optional(LiteralSpec("in_progress", "completed", "incomplete")),
        },
        ["id", "output", "type"],
    ),
    Model(
        "ResponseFunctionShellToolCall",
        {
            "id": Str(),
            "action": AnyValue(),
            "call_id": Str(),
            "environment": AnyValue(),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("shell_call"),
            "caller": AnyValue(),
            "created_by": Optional(Str()),
        },
        ["id", "action", "call_id", "status", "type"],
    ),
    Model(
        "ResponseFunctionShellToolCallOutput",
        {
            "id": Str(),
            "call_id": Str(),
            "max_output_length": Optional(Int()),
            "output": ListOf(AnyValue()),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "type": LiteralSpec("shell_call_output"),
            "caller": AnyValue(),
            "created_by": Optional(Str()),
        },
        ["id", "call_id", "output", "status", "type"],
    ),
    Model(
        "ResponseApplyPatchToolCall",
        {
            "id": Str(),
            "call_id": Str(),
            "operation": AnyValue(),
            "status": LiteralSpec("in_progress", "completed"),
            "type": LiteralSpec("apply_patch_call"),
            "caller": AnyValue(),
            "created_by": Optional(Str()),
        },
        ["id", "call_id", "operation", "status", "type"],
    ),
    Model(
        "ResponseApplyPatchToolCallOutput",
        {
            "id": Str(),
            "call_id": Str(),
            "status": LiteralSpec("completed", "failed"),
            "type": LiteralSpec("apply_patch_call_output"),
            "caller": AnyValue(),
            "created_by": Optional(Str()),
            "output": Optional(Str()),
        },
        ["id", "call_id", "status", "type"],
    ),
    Model(
        "McpCall",
        {
            "id": Str(),
            "arguments": Str(),
            "name": Str(),
            "server_label": Str(),
            "type": LiteralSpec("mcp_call"),
            "approval_request_id": Optional(Str()),
            "error": AnyValue(),
            "output": Optional(Str()),
            "status": Optional(
                LiteralSpec("in_progress", "completed", "incomplete", "calling", "failed")
            ),
        },
        ["id", "arguments", "name", "server_label", "type"],
    ),
    Model(
        "McpListTools",
        {
            "id": Str(),
            "server_label": Str(),
            "tools": ListOf(AnyValue()),
            "type": LiteralSpec("mcp_list_tools"),
            "error": Optional(Str()),
        },
        ["id", "server_label", "tools", "type"],
    ),
    Model(
        "McpApprovalRequest",
        {
            "id": Str(),
            "arguments": Str(),
            "name": Str(),
            "server_label": Str(),
            "type": LiteralSpec("mcp_approval_request"),
        },
        ["id", "arguments", "name", "server_label", "type"],
    ),
    Model(
        "McpApprovalResponse",
        {
            "id": Str(),
            "approval_request_id": Str(),
            "approve": Bool(),
            "type": LiteralSpec("mcp_approval_response"),
            "reason": Optional(Str()),
        },
        ["id", "approval_request_id", "approve", "type"],
    ),
    Model(
        "ResponseCustomToolCall",
        {
            "call_id": Str(),
            "input": Str(),
            "name": Str(),
            "type": LiteralSpec("custom_tool_call"),
            "id": Optional(Str()),
            "async": Optional(Bool()),
            "caller": AnyValue(),
            "namespace": Optional(Str()),
        },
        ["call_id", "input", "name", "type"],
    ),
    Model(
        "ResponseCustomToolCallOutputItem",
        {
            "call_id": Str(),
            "output": Union(Str(), ListOf(AnyValue())),
            "type": LiteralSpec("custom_tool_call_output"),
            "id": Str(),
            "caller": AnyValue(),
            "status": LiteralSpec("in_progress", "completed", "incomplete"),
            "created_by": Optional(Str()),
        },
        ["call_id", "output", "type", "id", "status"],
    ),
)


def item_errors(item: Any, index: int) -> list[dict[str, Any]]:
    """pydantic's errors for ``input[index]`` (none when some member takes it)."""
    return _INPUT_ITEM.errors(item, ("body", "input", index))

"""Hugging Face chat templates: compiled once, rendered exactly as ``transformers`` renders them.

The Jinja environment reproduces the one in transformers' ``utils/chat_template_utils.py``
(a sandboxed, immutable environment with ``trim_blocks``/``lstrip_blocks``, loop controls, a
``{% generation %}`` tag, HF's ``tojson``, ``raise_exception`` and ``strftime_now``), and
:func:`render_template` follows ``apply_chat_template(tokenize=False)`` step by step, including
its ``continue_final_message`` trimming. Content-format detection follows vLLM's
``renderers/hf.py``.
"""

from __future__ import annotations

import copy
import json
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from threading import Lock
from types import CodeType
from typing import TYPE_CHECKING, Any, Literal

from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.template_cache import TemplateCodeCache
from vllm_frontend.lazy import LazyModule

if TYPE_CHECKING:
    import jinja2
    import jinja2.compiler
    import jinja2.ext
    import jinja2.meta
    import jinja2.nodes
    import jinja2.parser
    import jinja2.sandbox
else:
    # Imported by the first template compiled (~50 ms that startup does not need).
    jinja2 = LazyModule(
        "jinja2", globals(), "jinja2", ("jinja2.ext", "jinja2.meta", "jinja2.sandbox")
    )

ContentFormat = Literal["string", "openai"]
"""How message content reaches the template: one string, or a list of OpenAI-style parts."""

# transformers appends this marker to the message being continued, renders, and cuts the
# prompt at the marker (render_jinja_template in chat_template_utils.py).
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


# A module-level hook so tests can freeze the clock seen by strftime_now: nanoseconds since
# the epoch (``datetime.now()`` reads the same clock, floored to the microsecond).
_time_ns = time.time_ns


def _raise_exception(message: Any) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # HF replaces Jinja's tojson: no HTML escaping, non-ASCII kept, and json.dumps' options
    # exposed in this positional order.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


# strftime_now's last result per format, with the second it was made in: chat templates ask
# for the date on every render, and a second's formats are the same (bar ``%f``).
_strftime_cache: dict[str, tuple[int, str]] = {}
_STRFTIME_CACHE_SIZE = 64


def _strftime_now(format: str) -> str:
    now_ns = _time_ns()
    second = now_ns // 1_000_000_000  # local time changes its second (and offset) with it
    if "f" in format:  # %f (microseconds) changes within a second: never kept
        now = datetime.fromtimestamp(second).replace(microsecond=now_ns // 1000 % 1_000_000)
        return now.strftime(format)
    hit = _strftime_cache.get(format)
    if hit is not None and hit[0] == second:
        return hit[1]
    text = datetime.fromtimestamp(second).strftime(format)
    if len(_strftime_cache) >= _STRFTIME_CACHE_SIZE:
        _strftime_cache.clear()
    _strftime_cache[format] = (second, text)
    return text


def _generation_tag() -> type[jinja2.ext.Extension]:
    class _GenerationTag(jinja2.ext.Extension):
        """``{% generation %}…{% endgeneration %}`` marks assistant text for training masks; a
        prompt renderer only needs its body."""

        tags = {"generation"}  # noqa: RUF012 (jinja's extension protocol)

        def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            block = jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body)
            return block.set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    # Compiled code (cached code too) finds the extension by its identifier, its module and
    # class name: the same for every environment and process.
    return _GenerationTag


def _code_generator_class() -> type[jinja2.compiler.CodeGenerator]:
    tests = jinja2.tests
    # Stock tests whose whole body is one expression on the value, written in its place.
    inlined = {
        "none": (tests.test_none, "({} is None)"),
        "string": (tests.test_string, "isinstance({}, str)"),
    }

    class _ChatTemplateCodeGenerator(jinja2.compiler.CodeGenerator):
        """Jinja's code generator, with ``name is defined`` written as the test's own check on
        the name's variable (Jinja otherwise makes an Undefined object for every undefined
        name it tests: templates test their optional variables on every render), and the
        ``none`` and ``string`` tests as their one expression (no call per test)."""

        def visit_Test(self, node: jinja2.nodes.Test, frame: jinja2.compiler.Frame) -> None:
            target = node.node
            if (
                node.args
                or node.kwargs
                or node.dyn_args is not None
                or node.dyn_kwargs is not None
                or self.environment.is_async
                or isinstance(target, jinja2.nodes.Const)  # (Jinja folds those)
            ):
                super().visit_Test(node, frame)
                return
            if (
                node.name == "defined"
                and isinstance(target, jinja2.nodes.Name)
                and target.ctx == "load"
                and self.environment.tests.get("defined") is tests.test_defined
            ):
                # test_defined(value) is "not an Undefined"; the name's variable holds
                # `missing` where the stock code would pass a fresh Undefined.
                ref = frame.symbols.ref(target.name)
                self.write(f"({ref} is not missing and not isinstance({ref}, Undefined))")
                return
            stock, expression = inlined.get(node.name, (None, ""))
            if stock is not None and self.environment.tests.get(node.name) is stock:
                before, after = expression.split("{}")
                self.write(before)
                self.visit(target, frame)
                self.write(after)
                return
            super().visit_Test(node, frame)

    return _ChatTemplateCodeGenerator


def _environment_class() -> type[jinja2.sandbox.ImmutableSandboxedEnvironment]:
    # The names a dict has as attributes (its type's and object's): ``message.role`` on a
    # dict without them is the sandbox's item lookup after a failed getattr.
    dict_attributes = frozenset(dir(dict))
    own_functions = (_strftime_now, _raise_exception)

    class _ChatTemplateEnvironment(jinja2.sandbox.ImmutableSandboxedEnvironment):
        """transformers' sandbox, with two of its lookups made without their detours (the
        results are the sandbox's own: ``tests/chat/test_template_environment.py``), whose
        compiled code tests names for being defined without making Undefined objects."""

        # The generator writes code against Jinja 3.1's generated-code conventions (its
        # `missing` sentinel, `Undefined` in the module's namespace): other versions compile
        # with the stock one.
        code_generator_class = (
            _code_generator_class()
            if jinja2.__version__.startswith("3.1.")
            else jinja2.compiler.CodeGenerator
        )

        def getattr(self, obj: Any, attribute: str) -> Any:
            # A plain dict's key: the sandbox tries getattr first, which raises (an exception
            # per ``message.role``), then the item.
            if type(obj) is dict and attribute not in dict_attributes:
                try:
                    return obj[attribute]
                except KeyError:
                    return self.undefined(obj=obj, name=attribute)
            return super().getattr(obj, attribute)

        def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
            # Our own globals (strftime_now, raise_exception) are plain functions: safe to
            # call, given no context, and never raising StopIteration.
            if obj is own_functions[0] or obj is own_functions[1]:
                kwargs.pop("_block_vars", None)
                kwargs.pop("_loop_vars", None)
                return obj(*args, **kwargs)
            return super().call(context, obj, *args, **kwargs)

    return _ChatTemplateEnvironment


class _Environments:
    """The Jinja environments, made when the first template is compiled."""

    __slots__ = ("bare", "env")

    def __init__(self) -> None:
        extensions = [_generation_tag(), jinja2.ext.loopcontrols]
        options: dict[str, Any] = {"trim_blocks": True, "lstrip_blocks": True}
        env = _environment_class()(**options, extensions=extensions)
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self.env = env
        # vLLM finds a template's variables with an environment that lacks HF's globals, so
        # names like ``raise_exception`` count as variables a request kwarg may set
        # (renderers/hf.py).
        self.bare = jinja2.sandbox.ImmutableSandboxedEnvironment(**options, extensions=extensions)


_environments: _Environments | None = None


def _envs() -> _Environments:
    global _environments
    if _environments is None:
        _environments = _Environments()
    return _environments


class CompiledTemplate:
    """A chat template compiled once, with what vLLM derives from its source.

    ``variables`` are the names the template reads from its context (vLLM passes only those
    request kwargs through); ``content_format`` is vLLM's ``auto`` detection result;
    ``supports_developer_role`` says whether the source mentions the ``developer`` role. With a
    ``code_cache``, a compiled form stored there by an earlier process is used instead of
    compiling, and a fresh compilation is stored.
    """

    __slots__ = ("_template", "content_format", "source", "supports_developer_role", "variables")

    def __init__(self, source: str, code_cache: TemplateCodeCache | None = None) -> None:
        self.source = source
        self.supports_developer_role = '"developer"' in source or "'developer'" in source
        self.variables: frozenset[str]
        self.content_format: ContentFormat
        cached = code_cache.load(source) if code_cache is not None else None
        if cached is not None:
            code, self.variables, content_format = cached
            self.content_format = "openai" if content_format == "openai" else "string"
            self._template = _template_of(code)
            return
        envs = _envs()
        try:
            self.content_format = detect_content_format(envs.env.parse(source))
            code = envs.env.compile(source)
        except jinja2.TemplateError as exc:
            raise ChatError(str(exc)) from exc
        self._template = _template_of(code)
        self.variables = frozenset(jinja2.meta.find_undeclared_variables(envs.bare.parse(source)))
        if code_cache is not None:
            code_cache.store(source, code, self.variables, self.content_format)

    def render_raw(self, context: Mapping[str, Any]) -> str:
        """Render with exactly ``context`` (no chat semantics); Jinja errors propagate."""
        # jinja2's Template.render without its two copies of the context (keyword arguments,
        # then a dict of them) and new_context's third: one, into the render's own context
        # (the globals first, the context's values over them, as new_context merges them).
        template = self._template
        env = template.environment
        names = template.globals
        ctx = env.context_class(env, {**names, **context}, template.name, template.blocks, names)
        try:
            return env.concat(template.root_render_func(ctx))
        except Exception:
            env.handle_exception()


def _template_of(code: CodeType) -> jinja2.Template:
    # What Environment.from_string does with the code it compiles.
    env = _envs().env
    # Its globals as one flat dict rather than Jinja's ChainMap over the environment's (which
    # never change once it is made): each render copies them into its context and lists their
    # names, a ChainMap walk twice per render otherwise (~3 us of ~15).
    return env.template_class.from_code(env, code, dict(env.make_globals(None)), None)


ENVIRONMENT = "transformers-chat-template-env/3"
"""Describes how the environment (:class:`_Environments`) compiles, for the keys of
:class:`TemplateCodeCache`: change it whenever its options, extensions, filters or globals
change."""

_CACHE_SIZE = 64
_cache: OrderedDict[str, CompiledTemplate] = OrderedDict()
_cache_lock = Lock()


def compile_template(source: str, code_cache: TemplateCodeCache | None = None) -> CompiledTemplate:
    """Compile ``source`` (cached by source text; request templates share a bounded cache).
    ``code_cache``: see :class:`CompiledTemplate` (meant for the server's own templates, not
    for templates that come with requests).

    Raises :class:`ChatError` with Jinja's message when the template does not parse.
    """
    with _cache_lock:
        hit = _cache.get(source)
        if hit is not None:
            _cache.move_to_end(source)
            return hit
    compiled = CompiledTemplate(source, code_cache)
    with _cache_lock:
        _cache[source] = compiled
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return compiled


# --------------------------------------------------------------------------------------------
# Content format detection (vLLM renderers/hf.py, ``_detect_content_format``): a template is in
# "openai" format when it loops over a message's ``content`` (directly, through variables
# assigned from ``messages`` or its items, or through a macro parameter fed ``message.content``).


class _DetectionFailed(Exception):
    """The AST has a shape vLLM's detector rejects (it then falls back to "string")."""


def _loads_name(node: jinja2.nodes.Node, name: str) -> bool:
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name


def _reads_key(node: jinja2.nodes.Node, name: str, key: str) -> bool:
    if isinstance(node, jinja2.nodes.Getitem):
        return (
            _loads_name(node.node, name)
            and isinstance(node.arg, jinja2.nodes.Const)
            and node.arg.value == key
        )
    if isinstance(node, jinja2.nodes.Getattr):
        return _loads_name(node.node, name) and node.attr == key
    return False


def _reads(node: jinja2.nodes.Node, name: str, key: str | None = None) -> bool:
    """``name`` (or ``name[key]``), possibly through filters, tests or a slice."""
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _reads(node.node, name, key)
    if isinstance(node, jinja2.nodes.Test):
        return _reads(node.node, name, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _reads(node.node, name, key)
    return _reads_key(node, name, key) if key else _loads_name(node, name)


def _target_name(node: jinja2.nodes.Node) -> str:
    if not isinstance(node, jinja2.nodes.Name):
        raise _DetectionFailed
    return node.name


def _aliases_of_messages(root: jinja2.nodes.Template) -> list[str]:
    names = ["messages"]
    seen = {"messages"}
    pending = deque(["messages"])
    while pending:
        current = pending.popleft()
        for assign in root.find_all(jinja2.nodes.Assign):
            if _reads(assign.node, current):
                target = _target_name(assign.target)
                names.append(target)
                # vLLM only guards self-assignment; tracking visited names also stops cycles.
                if target not in seen:
                    seen.add(target)
                    pending.append(target)
    return names


def _message_loop_variables(root: jinja2.nodes.Template) -> list[str]:
    aliases = _aliases_of_messages(root)
    found: list[str] = []
    for loop in root.find_all(jinja2.nodes.For):
        if any(_reads(loop.iter, alias) for alias in aliases):
            found.append(_target_name(loop.target))
    return found


def _content_loops(root: jinja2.nodes.Template) -> Iterator[str]:
    message_vars = _message_loop_variables(root)

    def reads_content(node: jinja2.nodes.Node) -> bool:
        return any(_reads(node, var, "content") for var in message_vars)

    content_params_by_loop: dict[int, set[str]] = {}
    loops_in_macros: set[int] = set()
    for macro in root.find_all(jinja2.nodes.Macro):
        param_names = {arg.name for arg in macro.args}
        content_params: set[str] = set()
        for call in root.find_all(jinja2.nodes.Call):
            if not (isinstance(call.node, jinja2.nodes.Name) and call.node.name == macro.name):
                continue
            for i, arg in enumerate(call.args):
                if i < len(macro.args) and reads_content(arg):
                    content_params.add(macro.args[i].name)
            for kwarg in call.kwargs:
                if kwarg.key in param_names and reads_content(kwarg.value):
                    content_params.add(kwarg.key)
        for loop in macro.find_all(jinja2.nodes.For):
            loops_in_macros.add(id(loop))
            if content_params:
                content_params_by_loop[id(loop)] = content_params

    for loop in root.find_all(jinja2.nodes.For):
        if reads_content(loop.iter):
            yield _target_name(loop.target)
            continue
        params = content_params_by_loop.get(id(loop))
        if isinstance(loop.iter, jinja2.nodes.Name) and (
            (params is not None and loop.iter.name in params)
            or (id(loop) not in loops_in_macros and loop.iter.name == "content")
        ):
            yield _target_name(loop.target)


def detect_content_format(ast: jinja2.nodes.Template) -> ContentFormat:
    """vLLM's ``auto`` content-format detection on a parsed template."""
    try:
        next(_content_loops(ast))
    except StopIteration:
        return "string"
    except _DetectionFailed:
        return "string"
    return "openai"


# --------------------------------------------------------------------------------------------
# Rendering (transformers ``apply_chat_template(tokenize=False)`` + ``render_jinja_template``).


def render_template(
    template: CompiledTemplate,
    conversation: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Any] | None = None,
    documents: Sequence[Any] | None = None,
    add_generation_prompt: bool = False,
    continue_final_message: bool = False,
    extra_context: Mapping[str, Any] | None = None,
    special_tokens: Mapping[str, str] | None = None,
) -> str:
    """Render ``conversation`` as ``tokenizer.apply_chat_template(..., tokenize=False)`` does.

    ``extra_context`` holds the template kwargs (already filtered, see ``renderer``);
    ``special_tokens`` is the tokenizer's ``special_tokens_map`` (kwargs override it).
    Raises :class:`ChatError` with the message transformers or the template raised.
    """
    if len(conversation) == 0:
        raise ChatError(
            "Cannot apply chat template to an empty conversation. Provide at least one message."
        )
    if continue_final_message and add_generation_prompt:
        raise ChatError(
            "continue_final_message and add_generation_prompt are not compatible. Use "
            "continue_final_message when you want the model to continue the final message, and "
            "add_generation_prompt when you want to add a header that will prompt it to start a "
            "new assistant message instead."
        )
    context: dict[str, Any] = dict(special_tokens or {})
    context.update(extra_context or {})
    if "messages" in context:
        raise ChatError(
            "jinja2.environment.Template.render() got multiple values for keyword argument "
            "'messages'"
        )
    if tools is not None and not isinstance(tools, list | tuple):
        raise ChatError("tools must be a list of tool objects.", param="tools")
    if documents is not None and not isinstance(documents, list | tuple):
        raise ChatError("documents must be a list of objects.", param="documents")
    if tools is not None:
        for tool in tools:
            if not isinstance(tool, dict):
                raise ChatError(
                    "Tools should either be a JSON schema, or a callable function with type hints "
                    "and a docstring suitable for auto-conversion to a schema."
                )
    if documents is not None:
        for document in documents:
            if not isinstance(document, dict):
                raise ChatError("Documents should be a list of dicts with 'title' and 'text' keys!")

    chat: Sequence[Mapping[str, Any]] = conversation
    final_text = ""
    if continue_final_message:
        chat, final_text = _tag_final_message(conversation, template.source)

    context["messages"] = chat
    context["tools"] = None if tools is None else list(tools)
    context["documents"] = documents
    context["add_generation_prompt"] = add_generation_prompt
    try:
        rendered = template.render_raw(context)
    except jinja2.TemplateError as exc:
        raise ChatError(str(exc)) from exc
    except Exception as exc:
        # vLLM turns any failure inside the template into a 400 carrying its message
        # (safe_apply_chat_template in renderers/hf.py).
        raise ChatError(str(exc)) from exc

    if continue_final_message:
        rendered = _cut_at_tag(rendered, final_text)
    return rendered


def _tag_final_message(
    conversation: Sequence[Mapping[str, Any]], source: str
) -> tuple[list[dict[str, Any]], str]:
    chat = [copy.deepcopy(dict(message)) for message in conversation]
    final = chat[-1].get("content")
    if final is None:
        raise ChatError(
            'continue_final_message is set but the final message has no "content" to continue!'
        )
    if "content" not in source:
        raise ChatError(
            'continue_final_message is set to "content" but this is not an accepted field in '
            "the chat_template"
        )
    if isinstance(final, list | tuple):
        for block in reversed(final):
            if "text" in block:
                final_text = block["text"]
                block["text"] = block["text"] + _CONTINUE_TAG
                return chat, final_text
        raise ChatError(
            "continue_final_message is set but we could not find any text to continue in the "
            "final message!"
        )
    try:
        chat[-1]["content"] = final + _CONTINUE_TAG
    except TypeError as exc:
        raise ChatError(str(exc)) from exc
    return chat, final


def _cut_at_tag(rendered: str, final_text: str) -> str:
    tag = _CONTINUE_TAG.strip()
    if final_text.strip() not in rendered or tag not in rendered:
        raise ChatError(
            "continue_final_message is set but the final message does not appear in the chat after "
            "applying the chat template! This can happen if the chat template deletes portions of "
            "the final message. Please verify the chat template and final message in your chat to "
            "ensure they are compatible."
            f"Final message to continue: {final_text.strip()}\nRendered chat:\n{rendered}"
        )
    at = rendered.rindex(tag)
    if rendered[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return rendered[:at]
    # The template trimmed the space after the marker, so it trims trailing space too.
    return rendered[:at].rstrip()

"""The chat template environment's shortcuts (a plain dict's items, our own globals' calls, the
compiled ``name is defined``, ``none`` and ``string`` tests) give what transformers' sandbox
gives, for the common inputs and the edge cases around them."""

from __future__ import annotations

from typing import Any

import jinja2
import jinja2.ext
import jinja2.sandbox
import pytest

from vllm_frontend.chat import template as chat_template

ENV = chat_template._envs().env
# the sandbox as transformers makes it (chat_template_utils.py), same globals
SANDBOX = jinja2.sandbox.ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
)
SANDBOX.filters["tojson"] = chat_template._tojson
SANDBOX.globals["raise_exception"] = chat_template._raise_exception
SANDBOX.globals["strftime_now"] = chat_template._strftime_now


class _Dict(dict[str, Any]):
    role = "attribute"


class _Obj:
    role = "attribute"

    def __repr__(self) -> str:  # a test id the same in every xdist worker (not an address)
        return "_Obj()"


MESSAGE = {"role": "user", "content": "hi", "items": "an item", "keys": 3, "__class__": "x"}
OBJECTS: list[Any] = [MESSAGE, {}, _Dict(role="item"), _Obj(), "text", 3, None, [1, 2], (1,)]
ATTRIBUTES = [
    "role",
    "content",
    "missing",
    "items",
    "keys",
    "get",
    "update",
    "pop",
    "copy",
    "__class__",
    "__init__",
    "format",
    "upper",
    "mro",
    "",
]


def _shape(value: Any) -> Any:
    # an Undefined by what it would say; a method by its name and owner; a value as it is
    if isinstance(value, jinja2.Undefined):
        return (
            type(value),
            value._undefined_name,
            id(value._undefined_obj),
            value._undefined_hint,
            value._undefined_exception,
        )
    if callable(value):
        return ("callable", getattr(value, "__name__", None), id(getattr(value, "__self__", None)))
    return value


@pytest.mark.parametrize("attribute", ATTRIBUTES)
@pytest.mark.parametrize("obj", OBJECTS, ids=repr)
def test_getattr_is_the_sandboxes(obj: Any, attribute: str) -> None:
    assert _shape(ENV.getattr(obj, attribute)) == _shape(SANDBOX.getattr(obj, attribute))


def test_call_of_our_globals_is_the_sandboxes() -> None:
    ctx = ENV.from_string("").new_context({})
    sandbox_ctx = SANDBOX.from_string("").new_context({})
    fmt = "%d %b %Y"
    assert ENV.call(ctx, chat_template._strftime_now, fmt, _loop_vars={}) == SANDBOX.call(
        sandbox_ctx, chat_template._strftime_now, fmt, _loop_vars={}
    )
    for env, context in ((ENV, ctx), (SANDBOX, sandbox_ctx)):
        with pytest.raises(jinja2.TemplateError, match=r"^boom$"):
            env.call(context, chat_template._raise_exception, "boom", _block_vars={})
        with pytest.raises(TypeError, match="positional argument"):
            env.call(context, chat_template._strftime_now, fmt, fmt)
        with pytest.raises(jinja2.sandbox.SecurityError):
            env.call(context, jinja2.sandbox.unsafe(lambda: None))


TEMPLATES = [
    "{{ strftime_now('%Y') }}|{{ messages[0].role }}|{{ messages[0].items }}",
    "{% for m in messages %}{{ m.role }}:{{ m.content }}:{{ m.missing is defined }}{% endfor %}",
    "{% for m in messages %}{% if m.role == 'x' %}{{ raise_exception('no ' + m.role) }}"
    "{% endif %}{{ m.keys }}{% endfor %}",
    "{{ strftime_now }}",
    "{{ strftime_now('%d') }}",
    "{{ messages[0].get('role') }}",
    "{{ messages[0].update({'a': 1}) }}",
    "{{ messages[0].__class__ }}",
    "{{ raise_exception('stop') }}",
    "{{ messages[0].role.upper() }}{{ '{0}'.format(messages[0].content) }}",
    # `name is defined`, compiled without an Undefined per test
    "{{ x is defined }}|{{ x is not defined }}|{{ not x is defined }}|{{ x is defined and x }}",
    "{% if not x is defined %}{% set x = none %}{% endif %}{{ x }}|{{ x is defined }}",
    "{% set y = nothing %}{{ y is defined }}|{% set y = x %}{{ y is defined }}",
    "{% macro m(a, b=1) %}{{ a is defined }}{{ b is defined }}{{ x is defined }}{% endmacro %}"
    "{{ m() }}|{{ m(1) }}|{{ m(1, x) }}",
    "{% for i in messages %}{{ i is defined }}{{ loop is defined }}{{ z is defined }}"
    "{% set z = 1 %}{{ z is defined }}{% endfor %}{{ z is defined }}",
    "{% set ns = namespace(a=1) %}{{ ns is defined }}{{ ns.a is defined }}{{ ns.b is defined }}",
    "{{ messages[0].role is defined }}{{ messages[0].x is defined }}{{ (x or y) is defined }}",
    "{% filter upper %}{{ x is defined }}{% endfilter %}{% call m2() %}{{ x is defined }}"
    "{% endcall %}{% macro m2() %}{{ caller() }}{{ caller is defined }}{% endmacro %}",
    "{{ strftime_now is defined }}{{ raise_exception is defined }}{{ range is defined }}",
    "{{ x is defined(1) }}",
    "{{ x is undefined }}{{ x is none }}",
    # the `none` and `string` tests, compiled as their one expression
    "{{ x is none }}{{ x is not none }}{{ x is string }}{{ x is not string }}{{ y is string }}",
    "{{ messages[0].content is string }}{{ messages[0].missing is none }}{{ (x or y) is none }}",
    "{{ none is none }}{{ 'a' is string }}{{ 1 is string }}{% if x is none %}n{% endif %}",
    "{% for m in messages %}{{ m.content is string and m.content is not none }}{% endfor %}",
    "{{ x is none(1) }}",
    "{{ x is string('a') }}",
]
CONTEXTS = [
    {"messages": [{"role": "user", "content": "hi"}]},
    {"messages": [{"role": "x", "content": "hi", "items": 1, "keys": "k"}]},
    {"messages": [{"role": "user"}], "strftime_now": "a request's text"},
    {"messages": [{"role": "user"}], "raise_exception": "not callable"},
    {"messages": [{"role": "user"}], "x": None},
    {"messages": [{"role": "user"}], "x": "v", "y": ""},
]


def _render(env: jinja2.Environment, source: str, context: dict[str, Any]) -> str:
    try:
        return env.from_string(source).render(context)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("context", CONTEXTS, ids=range(len(CONTEXTS)))
@pytest.mark.parametrize("source", TEMPLATES)
def test_templates_render_as_in_the_sandbox(source: str, context: dict[str, Any]) -> None:
    assert _render(ENV, source, context) == _render(SANDBOX, source, context)

"""The frontend must stay lean: importing it never loads vllm, torch or transformers."""

import subprocess
import sys

HEAVY = ("vllm", "torch", "transformers")


def test_importing_the_frontend_and_its_cli_loads_no_heavy_framework() -> None:
    code = (
        "import sys, importlib, pkgutil, vllm_frontend, vllm_frontend.cli\n"
        "for m in pkgutil.walk_packages(vllm_frontend.__path__, 'vllm_frontend.'):\n"
        "    if m.name != 'vllm_frontend.__main__':\n"
        "        importlib.import_module(m.name)\n"
        f"print(sorted({{k.split('.')[0] for k in sys.modules}} & set({HEAVY!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_mistral_common_is_imported_only_by_the_mistral_tokenizer_mode() -> None:
    # `--tokenizer-mode mistral` alone needs it (its import costs ~1 s of CPU): no module of the
    # frontend imports it at module level.
    code = (
        "import sys, importlib, pkgutil, vllm_frontend, vllm_frontend.cli\n"
        "for m in pkgutil.walk_packages(vllm_frontend.__path__, 'vllm_frontend.'):\n"
        "    if m.name != 'vllm_frontend.__main__':\n"
        "        importlib.import_module(m.name)\n"
        "print('mistral_common' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout


def test_xgrammars_native_conversions_load_neither_torch_nor_xgrammars_python_package() -> None:
    # text/xgrammar_native.py loads xgrammar's library through tvm-ffi, refusing tvm-ffi's
    # optional torch import.
    code = (
        "import sys\n"
        "from vllm_frontend.text.xgrammar_native import lark_to_ebnf, unavailable_reason\n"
        "if unavailable_reason() is None:\n"
        "    assert lark_to_ebnf('start: \"a\"').startswith('root ::=')\n"
        "print(sorted({k.split('.')[0] for k in sys.modules} & {'torch', 'xgrammar'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_other_backends_checks_load_their_libraries_only_when_used_and_never_torch() -> None:
    # llguidance, outlines-core and interegular are imported by the first request checked with
    # guidance, outlines or lm-format-enforcer, never by importing the frontend; none pulls torch.
    code = (
        "import sys, importlib, pkgutil, vllm_frontend\n"
        "for m in pkgutil.walk_packages(vllm_frontend.__path__, 'vllm_frontend.'):\n"
        "    if m.name != 'vllm_frontend.__main__':\n"
        "        importlib.import_module(m.name)\n"
        "libs = {'llguidance', 'outlines_core', 'interegular'}\n"
        "print(sorted({k.split('.')[0] for k in sys.modules} & libs))\n"
        "from vllm_frontend.engine.protocol import StructuredOutputsParams as P\n"
        "from vllm_frontend.text.structured_outputs import resolve_structured_outputs as r\n"
        "r(P(regex='\\\\p{L}+'), 'auto'); r(P(json={'type': 'integer'}), 'outlines')\n"
        "r(P(regex='a+'), 'lm-format-enforcer')\n"
        "print(sorted({k.split('.')[0] for k in sys.modules} & (libs | {'torch'})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "['interegular',", "'llguidance',", "'outlines_core']"]

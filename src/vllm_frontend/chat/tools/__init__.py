"""Tool-call parser families beyond the JSON-in-tags ones of ``chat/tool_parsers.py``.

One module per output format family (``base`` holds the interface every parser implements);
``chat/parser_registry.py`` registers them under vLLM's ``--tool-call-parser`` names.
"""

"""Reasoning parser families behind ``--reasoning-parser`` (registered in
:mod:`vllm_frontend.chat.parser_registry`)."""

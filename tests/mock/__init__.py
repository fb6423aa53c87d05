"""Tests of the mock engine against vLLM's own structs, vLLM's frontend and vllm-rs."""

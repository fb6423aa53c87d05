"""vllm-frontend-py: a fast, lean Python frontend for vLLM EngineCore processes."""

__version__ = "0.1.0"

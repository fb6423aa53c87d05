"""The vllm-frontend-py test suite (a package, so `tests.support` imports from anywhere)."""

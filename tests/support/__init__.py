"""The test bed: a tiny Llama 3 checkpoint, real vLLM engines, a reference generator, vllm-rs."""

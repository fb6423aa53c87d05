"""Tokenizer, incremental detokenization, stop strings, logprobs and sampling-parameter lowering.

Modules (each follows the vLLM 0.32 file named in its docstring):

* `model_files` – find a model (directory or HF cache snapshot) and read its configs;
* `tokenizer` – the Rust `tokenizers` library configured like transformers' fast tokenizer;
* `detokenizer` – per-token incremental detokenization (`tokenizers` DecodeStream);
* `stop` – stop strings and hold-back of streamed text;
* `logprobs` – engine logprob rows to `{token_id: Logprob}` maps with token strings;
* `output` – one sequence's engine outputs to text deltas, finish/stop reasons and logprobs;
* `sampling` – request fields to the engine `SamplingParams` (defaults, max_tokens, EOS, n).
"""

"""Tokenizer, incremental detokenization, stop strings, logprobs and sampling-parameter lowering.

The layer's facade is `llm.TextLlm` (text in, text updates out, over `vllm_frontend.llm.LLM`).

Modules (each follows the vLLM 0.32 file named in its docstring):

* `llm` – the facade: a request's prompts, checks, `max_tokens` and lowering, then its streams;
* `prompts` – prompt preparation: tokenization (long texts off the loop), truncation, length
  checks;
* `sequence_stream` – one prompt's samples as text updates (detokenizer, stop strings, logprobs);
* `beam_search` – vLLM's frontend-side beam search over the llm layer;
* `errors` – the layer's client errors (HTTP 400);
* `model_files` – find a model (directory or HF cache snapshot) and read its configs;
* `tokenizer` – the Rust `tokenizers` library configured like transformers' fast tokenizer;
* `detokenizer` – per-token incremental detokenization (`tokenizers` DecodeStream);
* `stop` – stop strings and hold-back of streamed text;
* `logprobs` – engine logprob rows to `{token_id: Logprob}` maps with token strings;
* `output` – one sequence's engine outputs to text deltas, finish/stop reasons and logprobs;
* `sampling` – request fields to the engine `SamplingParams` (defaults, max_tokens, EOS, n),
  checked there as vLLM's `SamplingParams` checks them;
* `structured_outputs` – `structured_outputs` / `response_format` to the engine's constraint.
"""

// Package model is morphlab's Llama-architecture model: the config and checkpoint types that every file format
// maps to (Config, Tensor with row-major shapes, Checkpoint under GGUF's tensor names), the loaders and writers
// (llama2.c v0/v1/v2, GGUF v2/v3, safetensors with an HF config.json; Load tells them apart), seeded synthetic
// checkpoints at named shapes (Synthesize), and the runnable Model: decoder layers that each hold several
// precision variants (F32, F16, Int8, Int4 RTN or AWQ, Q8_0, Q4_0) with one active, switched between forward passes
// (SetPrecision), and a batched forward pass over a paged KV cache (Forward) that serves decode and chunked
// prefill of many sequences at once. Sequence is the one-sequence path that generation and perplexity use.
package model

#!/usr/bin/env python3
"""Write a tiny llama-architecture GGUF with random weights for tests.

Usage: tiny-gguf.py OUT.gguf VOCAB.gguf

The tokenizer comes from VOCAB.gguf (one of llama.cpp's models/ggml-vocab-*.gguf).
Its byte tokens are retyped as normal tokens so that random output stays valid
UTF-8 and the server streams every token it decodes. Run with the gguf package
of the same llama.cpp source on PYTHONPATH.
"""
import sys

import numpy as np
import gguf

N_EMBD, N_LAYER, N_HEAD, N_FF, N_CTX = 256, 4, 4, 768, 4096
TOKEN_TYPE_NORMAL, TOKEN_TYPE_BYTE = 1, 6


def main(out_path: str, vocab_path: str) -> None:
    vocab = gguf.GGUFReader(vocab_path)
    w = gguf.GGUFWriter(out_path, "llama")
    w.add_name("tpsmon-tiny")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    n_vocab = 0
    for name, field in vocab.fields.items():
        if not name.startswith("tokenizer."):
            continue
        value = field.contents()
        if name == "tokenizer.ggml.token_type":
            value = [TOKEN_TYPE_NORMAL if t == TOKEN_TYPE_BYTE else t for t in value]
        if name == "tokenizer.ggml.tokens":
            n_vocab = len(value)
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, value, field.types[0], sub_type=sub)
    if n_vocab == 0:
        raise SystemExit(f"{vocab_path}: no tokenizer.ggml.tokens")

    rng = np.random.default_rng(13)

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    # numpy shapes are ggml's ne reversed.
    w.add_tensor("token_embd.weight", rand(n_vocab, N_EMBD))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output.weight", rand(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + t + ".weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", rand(N_EMBD, N_FF))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: tiny-gguf.py OUT.gguf VOCAB.gguf")
    main(sys.argv[1], sys.argv[2])

#!/usr/bin/env python3
"""A Qwen3-Reranker-0.6B-shaped reranker as llama.cpp's converter writes it,
for benchmarks/rerank_serving.py: Qwen3-0.6B's shapes (28 layers, 1024 wide,
16 heads of 128 over 8, MLP 3072, tied embeddings) with seeded random weights
(normal, std 0.02; norms 1), the tiny reranker fixture's tokenizer
(tests/golden/qwen3_reranker_tiny: 501 tokens, "yes" and "no" one each, the
chat special tokens), saved by transformers, then converted by llama.cpp's
convert_hf_to_gguf.py (pooling_type 4, cls.output from the tied embedding's
yes and no rows; "qwen2" forced as the pre-tokenizer, as make_rerank_gguf.py
does). Quantize the BF16 file with llama-quantize for the benchmark.

    /work/venvs/oracle/bin/python benchmarks/make_reranker_gguf.py OUT_DIR [LLAMA_CPP_DIR]
"""
import os
import shutil
import sys

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = sys.argv[1]
LLAMA = sys.argv[2] if len(sys.argv) > 2 else "/work/peers/llama.cpp"
TINY = os.path.join(ROOT, "tests/golden/qwen3_reranker_tiny")


def main():
    d = os.path.join(OUT, "qwen3-reranker-0.6b-random")
    os.makedirs(d, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "README.md", "generation_config.json"):
        shutil.copy(os.path.join(TINY, f), d)
    config = Qwen3Config(vocab_size=501, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                         num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=4096,
                         rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=496,
                         eos_token_id=498, pad_token_id=496, architectures=["Qwen3ForCausalLM"])
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    model.save_pretrained(d)
    sys.path.insert(0, LLAMA)
    sys.path.insert(1, os.path.join(LLAMA, "gguf-py"))
    import conversion.base as base
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    import convert_hf_to_gguf as conv
    sys.argv = ["convert_hf_to_gguf.py", d, "--outtype", "bf16",
                "--outfile", os.path.join(OUT, "qwen3-reranker-0.6b-random-bf16.gguf")]
    conv.main()


if __name__ == "__main__":
    main()

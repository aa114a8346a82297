#!/usr/bin/env python3
"""gguf_qwen3_reranker/model.gguf: qwen3_reranker_tiny/ converted by llama.cpp's
own converter (convert_hf_to_gguf.py, built outside the repository; see
../shared/peers/), as a llama.cpp user would convert Qwen3-Reranker. The
converter sees the README's '# Qwen3-Reranker' heading and writes a reranker:
pooling_type 4 (rank), classifier.output_labels ["yes", "no"], the rerank
template, and cls.output.weight (lm_head's yes and no rows); the untied
lm_head itself is dropped. The tiny tokenizer's BPE is custom, so its
pre-tokenizer hash is unknown to the converter: "qwen2" (the same regex) is
forced; everything else is the converter as it is.

    python3 tests/golden/make_rerank_gguf.py [LLAMA_CPP_DIR]   # gguf-py, torch, transformers in a venv
"""
import os
import sys

LLAMA = sys.argv[1] if len(sys.argv) > 1 else "/work/peers/llama.cpp"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, LLAMA)
sys.path.insert(1, os.path.join(LLAMA, "gguf-py"))
import conversion.base as base  # noqa: E402

base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
import convert_hf_to_gguf as conv  # noqa: E402

os.makedirs(os.path.join(HERE, "gguf_qwen3_reranker"), exist_ok=True)
sys.argv = ["convert_hf_to_gguf.py", os.path.join(HERE, "qwen3_reranker_tiny"), "--outtype", "f32",
            "--outfile", os.path.join(HERE, "gguf_qwen3_reranker", "model.gguf")]
conv.main()

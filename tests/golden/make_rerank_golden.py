#!/usr/bin/env python3
"""Build a tiny random Qwen3-Reranker-style checkpoint and a rerank golden.

Usage:  python3 tests/golden/make_rerank_golden.py [--out DIR]   # torch 2.15 + transformers 5.23 + tokenizers,
        in a venv outside the repository

Writes (under DIR, default = directory of this script; the checkpoint and its
golden are kept as the artifact, since other transformers versions may
initialise the random weights differently):
  qwen3_reranker_tiny/        HF checkpoint (Qwen3ForCausalLM, random, float32)
                              + tokenizer.json (byte-level BPE, Qwen2 pre-tokenizer regex)
                              + README.md whose '# Qwen3-Reranker' heading makes
                                llama.cpp's converter treat it as a reranker
  qwen3_reranker_tiny/golden.json  2 queries x 5 documents: formatted text, token ids,
                              last-position yes/no logits (float64), scores.

Deterministic: fixed seeds, BPE trained on a fixed corpus.
Reference formula (Qwen3-Embedding README, "Transformers Usage"):
  logits = model(prefix + body + suffix).logits[-1]
  score  = softmax([logit_no, logit_yes])[1] = sigmoid(logit_yes - logit_no)
"""
import argparse
import json
import math
import os
import sys

import torch
from tokenizers import Tokenizer, Regex, models, pre_tokenizers, decoders, normalizers, trainers
from tokenizers import AddedToken

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- template (verbatim from QwenLM/Qwen3-Embedding README.md @ f4ad0c4, and
#      llama.cpp/conversion/qwen.py Qwen3Model.set_gguf_parameters) ----------
SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the '
          'Instruct provided. Note that the answer can only be "yes" or "no".')
PREFIX = "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\n"
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def format_instruction(instruction, query, doc):
    if instruction is None:
        instruction = DEFAULT_INSTRUCTION
    return "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}".format(
        instruction=instruction, query=query, doc=doc)


QUERIES = [
    "What is the capital of China?",
    "Explain gravity",
]
DOCUMENTS = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other. It gives weight to physical objects.",
    "Paris, capitale de la France, est une grande ville européenne.",
    "yes no yes",
    "Machine learning models can rank 3 documents in 0.5 seconds!",
]

# Qwen2/Qwen3 tokenizer.json pre-tokenizer regex (same as llama.cpp's "qwen2" pre-type).
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Special/added tokens used by the template, in Qwen3 order (ids follow the trained vocab).
ADDED = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),   # Qwen3 marks <think>/</think> as added but special=false
    ("</think>", False),
]


def build_tokenizer(vocab_size=600):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    corpus = []
    for _ in range(20):
        corpus += [SYSTEM, DEFAULT_INSTRUCTION, "yes", "no", "yes no", "Document Query Instruct"]
        corpus += QUERIES + DOCUMENTS
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=s, normalized=False, single_word=False,
                               lstrip=False, rstrip=False) for t, s in ADDED])
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    out = args.out
    mdir = os.path.join(out, "qwen3_reranker_tiny")
    os.makedirs(mdir, exist_ok=True)

    torch.manual_seed(0)
    tok = build_tokenizer()
    tok.save(os.path.join(mdir, "tokenizer.json"))
    vocab = tok.get_vocab()
    for t in ["yes", "no"] + [t for t, _ in ADDED]:
        assert t in vocab, t
    ids = {t: vocab[t] for t in ["yes", "no"] + [t for t, _ in ADDED]}
    n_vocab = tok.get_vocab_size(with_added_tokens=True)

    tok_cfg = {
        "tokenizer_class": "Qwen2Tokenizer",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 8192,
        "errors": "replace",
        "split_special_tokens": False,
    }
    with open(os.path.join(mdir, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
    with open(os.path.join(mdir, "README.md"), "w") as f:
        f.write("# Qwen3-Reranker tiny random test checkpoint\n\n"
                "Random weights; only for testing the rerank code path (template, yes/no logits).\n"
                "The '# Qwen3-Reranker' heading is what llama.cpp's convert_hf_to_gguf.py "
                "(llama.cpp/conversion/qwen.py, Qwen3Model._is_qwen3_reranker) looks for.\n")

    from transformers import Qwen3Config, Qwen3ForCausalLM, AutoTokenizer
    cfg = Qwen3Config(
        vocab_size=n_vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, initializer_range=0.2,
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
        attention_bias=False, hidden_act="silu", use_sliding_window=False,
    )
    cfg.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(1234)
    model = Qwen3ForCausalLM(cfg)
    # Give RMSNorm weights and lm_head rows some spread so yes/no logits differ noticeably.
    with torch.no_grad():
        g = torch.Generator().manual_seed(99)
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
    model = model.float().eval()
    model.save_pretrained(mdir, safe_serialization=True)

    # ---- golden ----
    hf_tok = AutoTokenizer.from_pretrained(mdir)
    assert hf_tok.convert_tokens_to_ids("yes") == ids["yes"]
    assert hf_tok.convert_tokens_to_ids("no") == ids["no"]
    prefix_tokens = hf_tok.encode(PREFIX, add_special_tokens=False)
    suffix_tokens = hf_tok.encode(SUFFIX, add_special_tokens=False)

    m64 = Qwen3ForCausalLM.from_pretrained(mdir, torch_dtype=torch.float64).eval()
    m32 = Qwen3ForCausalLM.from_pretrained(mdir, torch_dtype=torch.float32).eval()
    tid, fid = ids["yes"], ids["no"]

    pairs_out = []
    per_query = []
    for qi, q in enumerate(QUERIES):
        results = []
        for di, d in enumerate(DOCUMENTS):
            body = format_instruction(None, q, d)
            # model-card path: prefix/body/suffix tokenized separately then concatenated
            body_ids = hf_tok(body, add_special_tokens=False)["input_ids"]
            input_ids = prefix_tokens + body_ids + suffix_tokens
            full_text = PREFIX + body + SUFFIX
            # llama.cpp / vLLM-template path: tokenize the whole rendered string (special tokens parsed)
            whole_ids = hf_tok(full_text, add_special_tokens=False)["input_ids"]
            x = torch.tensor([input_ids])
            with torch.no_grad():
                l64 = m64(input_ids=x).logits[0, -1]
                l32 = m32(input_ids=x).logits[0, -1]
            ly, ln = float(l64[tid]), float(l64[fid])
            pair2 = torch.stack([l64[fid], l64[tid]])
            score_softmax = float(torch.softmax(pair2, 0)[1])
            score_logsoftmax_exp = float(torch.log_softmax(pair2, 0)[1].exp())
            score_sigmoid = 1.0 / (1.0 + math.exp(-(ly - ln)))
            assert abs(score_softmax - score_sigmoid) < 1e-12
            rec = {
                "query_index": qi, "document_index": di,
                "query": q, "document": d,
                "text": full_text,
                "input_ids": input_ids,
                "n_tokens": len(input_ids),
                "whole_string_tokenization_matches": whole_ids == input_ids,
                "logit_yes": ly, "logit_no": ln,
                "logit_yes_minus_no": ly - ln,
                "logit_yes_f32": float(l32[tid]), "logit_no_f32": float(l32[fid]),
                "score": score_softmax,
                "score_sigmoid_of_diff": score_sigmoid,
                "score_log_softmax_exp": score_logsoftmax_exp,
                "argmax_token_id_last_pos": int(torch.argmax(l64)),
            }
            pairs_out.append(rec)
            results.append({"index": di, "relevance_score": score_softmax})
        ranked = sorted(results, key=lambda r: -r["relevance_score"])
        per_query.append({
            "request": {"model": "qwen3_reranker_tiny", "query": q, "documents": DOCUMENTS,
                        "top_n": len(DOCUMENTS)},
            "expected_results_sorted": ranked,
        })

    golden = {
        "generator": "make_rerank_golden.py",
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                     "tokenizers": __import__("tokenizers").__version__},
        "model_dir": "qwen3_reranker_tiny",
        "model_config": {k: getattr(cfg, k) for k in [
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
            "rope_theta", "tie_word_embeddings"] if hasattr(cfg, k)},
        "template": {
            "prefix": PREFIX, "suffix": SUFFIX,
            "body_format": "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}",
            "default_instruction": DEFAULT_INSTRUCTION,
            "prefix_ids": prefix_tokens, "suffix_ids": suffix_tokens,
        },
        "token_ids": ids,
        "score_formula": "softmax([logit_no, logit_yes])[1] == sigmoid(logit_yes - logit_no), "
                         "logits at the last position (no padding; one sequence per pair)",
        "queries": QUERIES, "documents": DOCUMENTS,
        "pairs": pairs_out,
        "rerank_requests": per_query,
    }
    with open(os.path.join(mdir, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
    for r in pairs_out:
        print(r["query_index"], r["document_index"], r["n_tokens"], r["whole_string_tokenization_matches"],
              "yes=%.6f no=%.6f score=%.9f" % (r["logit_yes"], r["logit_no"], r["score"]))
    print("ids", ids, "n_vocab", n_vocab)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden fixtures for an OpenAI-style /v1/embeddings endpoint, modelled on
Qwen/Qwen3-Embedding-0.6B (Qwen3 decoder, last-token pooling, L2 normalise).

Writes, next to this script:
  qwen3_embedding_tiny/   tiny random Qwen3 checkpoint laid out like the real
                          Qwen3-Embedding repo (sentence-transformers files too)
  golden.json             inputs, the token ids sentence-transformers feeds,
                          float64 embeddings from SentenceTransformer.encode,
                          Matryoshka-truncated (renormalised) variants
Then (stage "gguf", "llama") the GGUF twin via llama.cpp's converter and the
llama-server comparison; see README.md.

Usage:
  python3 make_embedding_golden.py          # all stages (transformers 5.23 + sentence-transformers in a venv outside the repository)
  python3 make_embedding_golden.py model golden
"""
import json
import os
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_DIR = HERE  # this fixture directory (tests/golden/qwen3_embedding_tiny)
GGUF_PATH = os.path.join(HERE, "..", "gguf_qwen3_embedding", "model.gguf")
FLOVER_GOLDEN = os.environ.get("FLOVER_GOLDEN", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LLAMA_CPP = os.environ.get("LLAMA_CPP", "")  # llama.cpp's checkout, for the gguf and llama stages
SEED = 20250605

# The real model's config_sentence_transformers.json prompt (note: no space
# after "Query:"; the README's get_detailed_instruct is
# f"Instruct: {task_description}\nQuery:{query}").
QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
OTHER_TASK = "Given a question, retrieve Wikipedia passages that answer the question"

LONG = ("Embedding models map a piece of text to a single vector so that texts with "
        "similar meaning land close together. A decoder-only model such as Qwen3 reads "
        "the text left to right, so only the final position has attended to every token; "
        "that is why Qwen3-Embedding takes the hidden state of the last token, an appended "
        "end-of-text marker, and scales it to unit length. Retrieval systems then compare "
        "vectors with a dot product, which equals cosine similarity for unit vectors. "
        "Matryoshka training lets callers keep only the first 32, 64 or 128 dimensions.")

# (name, text, how): how = "document" (no prompt), "query" (prompt_name="query"),
# or ("prompt", str) for an explicit instruction prefix.
INPUTS = [
    ("hello", "Hello world", "document"),
    ("fox", "The quick brown fox jumps over the lazy dog.", "document"),
    ("long", LONG, "document"),
    ("query_web", "What is the capital of China?", "query"),
    ("query_custom", "Explain gravity", ("prompt", f"Instruct: {OTHER_TASK}\nQuery:")),
    ("short", "a", "document"),
    ("empty", "", "document"),
    ("unicode", "Caf\u00e9 na\u00efve \u2014 \u6771\u4eac\u30bf\u30ef\u30fc \U0001F680 e\u0301", "document"),
    ("whitespace", "line one\nline two\n\n   indented\ttab  ", "document"),
    ("digits_punct", "Version 3.14159 costs $42,000 (approx.)!", "document"),
    ("special_literal", "<|im_start|>user hi<|im_end|>", "document"),
]
MATRYOSHKA = {"hello": 32, "query_web": 32}


def build_model():
    import torch
    from transformers import Qwen3Config, Qwen3Model

    os.makedirs(MODEL_DIR, exist_ok=True)
    os.makedirs(os.path.join(MODEL_DIR, "1_Pooling"), exist_ok=True)

    # --- tokenizer: Flover's qwen_nfc fixture (Qwen2/Qwen3 split regex, NFC,
    # byte-level BPE, 900 tokens, 644 merges) with its Llama-3 style added
    # tokens replaced by Qwen3's three, and the post-processor Qwen3-Embedding
    # ships (TemplateProcessing appending <|endoftext|>).
    src = json.load(open(os.path.join(FLOVER_GOLDEN, "hf_tokenizers/qwen_nfc/tokenizer.json")))
    base = len(src["model"]["vocab"])
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    src["added_tokens"] = [
        {"id": base + i, "content": s, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
        for i, s in enumerate(specials)
    ]
    eot = base  # <|endoftext|>
    src["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}},
                 {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [eot],
                                             "tokens": ["<|endoftext|>"]}},
    }
    src["truncation"] = None
    src["padding"] = None
    with open(os.path.join(MODEL_DIR, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(src, f, ensure_ascii=False, indent=2)
    tok_cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(base + i): {"content": s, "lstrip": False, "normalized": False,
                            "rstrip": False, "single_word": False, "special": True}
            for i, s in enumerate(specials)
        },
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "padding_side": "left",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    json.dump(tok_cfg, open(os.path.join(MODEL_DIR, "tokenizer_config.json"), "w"), indent=2)

    # --- model
    vocab_size = base + len(specials)
    cfg = Qwen3Config(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True, attention_bias=False,
        bos_token_id=eot, eos_token_id=eot, hidden_act="silu",
        initializer_range=0.2, use_sliding_window=False, sliding_window=None,
        max_window_layers=2,
    )
    torch.manual_seed(SEED)
    model = Qwen3Model(cfg).to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    model.save_pretrained(MODEL_DIR, safe_serialization=True)
    # config.json in the key style of the real repo (transformers 4.51 era:
    # top-level rope_theta / rope_scaling, torch_dtype, Qwen3ForCausalLM); both
    # transformers 5 and llama.cpp's converter read it.
    c = json.load(open(os.path.join(MODEL_DIR, "config.json")))
    c["architectures"] = ["Qwen3ForCausalLM"]
    c["rope_theta"] = c.pop("rope_parameters")["rope_theta"]
    c["rope_scaling"] = None
    c["torch_dtype"] = c.pop("dtype")
    c.pop("layer_types", None)
    c.pop("pad_token_id", None)
    json.dump(dict(sorted(c.items())), open(os.path.join(MODEL_DIR, "config.json"), "w"), indent=2)

    # --- sentence-transformers files, as Qwen/Qwen3-Embedding-0.6B ships them
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    json.dump(modules, open(os.path.join(MODEL_DIR, "modules.json"), "w"), indent=2)
    pooling = {
        "word_embedding_dimension": 64,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": True,
        "include_prompt": True,
    }
    json.dump(pooling, open(os.path.join(MODEL_DIR, "1_Pooling/config.json"), "w"), indent=2)
    st_cfg = {
        "prompts": {"query": QUERY_PROMPT, "document": ""},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    }
    json.dump(st_cfg, open(os.path.join(MODEL_DIR, "config_sentence_transformers.json"), "w"), indent=2)
    json.dump({"max_seq_length": 512, "do_lower_case": False},
              open(os.path.join(MODEL_DIR, "sentence_bert_config.json"), "w"), indent=2)
    print("model written:", MODEL_DIR)


def _prompt_kw(how):
    if how == "document":
        return {}
    if how == "query":
        return {"prompt_name": "query"}
    return {"prompt": how[1]}


def _prompt_str(how, st):
    if how == "document":
        return ""
    if how == "query":
        return st.prompts["query"]
    return how[1]


def make_golden():
    import numpy as np
    import sentence_transformers
    import tokenizers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    st = SentenceTransformer(MODEL_DIR, device="cpu")
    st.double()
    st.eval()
    tok = st.tokenizer
    cases = []
    for name, text, how in INPUTS:
        kw = _prompt_kw(how)
        full = _prompt_str(how, st) + text
        feats = st.tokenize([full])
        ids = feats["input_ids"][0][feats["attention_mask"][0].bool()].tolist()
        emb = st.encode([text], convert_to_numpy=True, batch_size=1, **kw)[0]
        assert emb.dtype == np.float64, emb.dtype
        # independent check: last-token hidden state of the raw Qwen3Model, L2-normalised
        with torch.no_grad():
            h = st[0].auto_model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
        ref = (h / h.norm()).numpy()
        assert np.max(np.abs(ref - emb)) < 1e-12, (name, np.max(np.abs(ref - emb)))
        case = {
            "name": name,
            "text": text,
            "prompt_name": "query" if how == "query" else None,
            "prompt": _prompt_str(how, st),
            "model_input": full,
            "input_ids": ids,
            "num_tokens": len(ids),
            "embedding": emb.tolist(),
        }
        if name in MATRYOSHKA:
            d = MATRYOSHKA[name]
            t = st.encode([text], convert_to_numpy=True, truncate_dim=d,
                          normalize_embeddings=True, **kw)[0]
            man = emb[:d] / np.linalg.norm(emb[:d])
            assert np.max(np.abs(man - t)) < 1e-12
            case["dimensions"] = d
            case["embedding_truncated_renormalized"] = t.tolist()
        cases.append(case)

    # batched encode (left padding in one batch) must agree with one-at-a-time
    by_how = {}
    for i, (name, text, how) in enumerate(INPUTS):
        by_how.setdefault(json.dumps(how), []).append(i)
    max_batch_diff = 0.0
    for key, idx in by_how.items():
        how = json.loads(key)
        how = tuple(how) if isinstance(how, list) else how
        embs = st.encode([INPUTS[i][1] for i in idx], convert_to_numpy=True,
                         batch_size=64, **_prompt_kw(how))
        for j, i in enumerate(idx):
            max_batch_diff = max(max_batch_diff,
                                 float(np.max(np.abs(embs[j] - np.array(cases[i]["embedding"])))))
    batch = st.tokenize([cases[0]["model_input"], cases[1]["model_input"]])

    # transformers computes RoPE cos/sin in float32 even for a float64 model
    # (Qwen3RotaryEmbedding.forward casts inv_freq/positions with .float()).
    # Measure how far a fully float64 RoPE moves the golden vectors.
    from transformers.models.qwen3 import modeling_qwen3 as mq
    orig = mq.Qwen3RotaryEmbedding.forward

    def fwd64(self, x, position_ids):
        inv = self.inv_freq.to(torch.float64)
        freqs = position_ids.to(torch.float64)[:, :, None] * inv[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)

    rope64 = 0.0
    try:
        mq.Qwen3RotaryEmbedding.forward = fwd64
        st[0].auto_model.rotary_emb.inv_freq = (1.0 / (st[0].auto_model.config.rope_parameters["rope_theta"] ** (
            torch.arange(0, 16, 2, dtype=torch.float64) / 16)))
        for i, (name, text, how) in enumerate(INPUTS):
            e = st.encode([text], convert_to_numpy=True, **_prompt_kw(how))[0]
            rope64 = max(rope64, float(np.max(np.abs(e - np.array(cases[i]["embedding"])))))
    finally:
        mq.Qwen3RotaryEmbedding.forward = orig

    out = {
        "description": "Qwen3-Embedding-style golden: SentenceTransformer(qwen3_embedding_tiny).double().encode(...)",
        "model_dir": "qwen3_embedding_tiny",
        "pooling": "lasttoken",
        "normalize": "l2",
        "embedding_dim": 64,
        "eos_token_appended": "<|endoftext|>",
        "eos_token_id": tok.convert_tokens_to_ids("<|endoftext|>"),
        "pad_token_id": tok.pad_token_id,
        "padding_side": tok.padding_side,
        "query_prompt": QUERY_PROMPT,
        "dtype": "float64",
        "batched_vs_single_max_abs_diff": max_batch_diff,
        "rope_note": "transformers computes RoPE cos/sin in float32 even for a float64 model; the vectors here include that rounding",
        "max_abs_diff_vs_float64_rope": rope64,
        "left_padded_batch_example": {
            "inputs": [cases[0]["name"], cases[1]["name"]],
            "input_ids_row0": batch["input_ids"][0].tolist(),
            "attention_mask_row0": batch["attention_mask"][0].tolist(),
        },
        "versions": {
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
            "numpy": np.__version__,
            "python": sys.version.split()[0],
        },
        "seed": SEED,
        "cases": cases,
    }
    with open(os.path.join(HERE, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print("golden.json: %d cases, batched-vs-single max diff %.3g" % (len(cases), max_batch_diff))
    print(st)


def make_gguf():
    """llama.cpp's own converter. The only override: our tiny tokenizer's
    pre-tokenizer hash is unknown to it, so get_vocab_base_pre is answered with
    "qwen2" (the regex is Qwen2/Qwen3's)."""
    code = f"""
import sys
sys.path.insert(0, {os.path.join(LLAMA_CPP, 'gguf-py')!r})
sys.path.insert(0, {LLAMA_CPP!r})
sys.argv = ['convert_hf_to_gguf.py', {MODEL_DIR!r}, '--outtype', 'f32', '--outfile', {GGUF_PATH!r}]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'qwen2'
import runpy
runpy.run_path({os.path.join(LLAMA_CPP, 'convert_hf_to_gguf.py')!r}, run_name='__main__')
"""
    subprocess.run([sys.executable, "-c", code], check=True)
    sys.path.insert(0, os.path.join(LLAMA_CPP, "gguf-py"))
    import gguf
    r = gguf.GGUFReader(GGUF_PATH)
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("tokenizer.ggml.") and k.split(".")[-1] in ("tokens", "token_type", "merges"):
            continue
        try:
            v = f.contents()
        except Exception:
            v = "?"
        meta[k] = v
    json.dump(meta, open(os.path.join(HERE, "gguf_metadata.json"), "w"), indent=1, default=str)
    print("gguf written:", GGUF_PATH)
    for k in ("qwen3.pooling_type", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_bos_token",
              "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.pre"):
        print(" ", k, "=", meta.get(k))


def _post(url, payload):
    req = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def run_llama(tag="exact"):
    flags = {"exact": ["-ctk", "f32", "-ctv", "f32", "-fa", "off"], "default": []}[tag]
    import numpy as np
    golden = json.load(open(os.path.join(HERE, "golden.json")))
    port = 18931
    exe = os.path.join(LLAMA_CPP, "build/bin/llama-server")
    # no --pooling: the GGUF's qwen3.pooling_type (LAST) is used; /v1/embeddings
    # L2-normalises (embd_normalize 2) by default.
    cmd = [exe, "-m", GGUF_PATH, "--embeddings", "--port", str(port), "-c", "512",
           "-b", "512", "-ub", "512", "-t", "2", "--no-warmup"] + flags
    log = open(os.path.join(HERE, "llama_server.log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except Exception:
                time.sleep(0.5)
        rows = []
        for c in golden["cases"]:
            toks = _post(base + "/tokenize", {"content": c["model_input"], "add_special": True,
                                              "parse_special": True})["tokens"]
            by_text = _post(base + "/v1/embeddings", {"input": c["model_input"],
                                                      "encoding_format": "float"})["data"][0]["embedding"]
            by_ids = _post(base + "/v1/embeddings", {"input": c["input_ids"],
                                                     "encoding_format": "float"})["data"][0]["embedding"]
            ref = np.array(c["embedding"])
            row = {"name": c["name"], "tokens_match": toks == c["input_ids"],
                   "llama_tokens": toks}
            for label, e in (("text", by_text), ("ids", by_ids)):
                e = np.array(e, dtype=np.float64)
                row[f"{label}_max_abs_diff"] = float(np.max(np.abs(e - ref)))
                row[f"{label}_cosine"] = float(e @ ref / (np.linalg.norm(e) * np.linalg.norm(ref)))
                row[f"{label}_norm"] = float(np.linalg.norm(e))
            rows.append(row)
            print("%-16s tokens_match=%-5s text: maxdiff=%.2e cos=%.9f | ids: maxdiff=%.2e cos=%.9f"
                  % (c["name"], row["tokens_match"], row["text_max_abs_diff"], row["text_cosine"],
                     row["ids_max_abs_diff"], row["ids_cosine"]))
        json.dump({"command": cmd, "endpoint": "/v1/embeddings (OpenAI-compatible)",
                   "rows": rows}, open(os.path.join(HERE, f"llama_cpp_compare_{tag}.json"), "w"), indent=1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    stages = sys.argv[1:] or ["model", "golden", "gguf", "llama", "llama_default"]
    for s in stages:
        {"model": build_model, "golden": make_golden, "gguf": make_gguf, "llama": run_llama,
         "llama_default": lambda: run_llama("default")}[s]()

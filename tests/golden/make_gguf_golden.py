#!/usr/bin/env python3
"""Writes the GGUF fixtures Flover's GGUF tests compare against.

gguf/quants.gguf — every tensor type Flover dequantizes, each as tensor
  "<TYPE>.random" beside "<TYPE>.random.expected" (F32): what gguf-py's
  gguf.quants.dequantize makes of those blocks (the oracle, not a copy).
  Types gguf-py can quantize (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, F16, BF16,
  MXFP4: gpt-oss's experts, 32 e2m1 values on an e8m0 scale) are
  quantized from normal data ("<TYPE>.quantized" beside
  "<TYPE>.quantized.expected"); every type also gets random blocks — all bit
  patterns of the packed values, with finite random f16 scales — so every
  bit of the layout is exercised.

gguf/vocab_*.gguf — tokenizers as GGUF metadata (with a tiny model's
  hyper-parameters, no tensors), and vocab_cases.json: texts and the ids
  llama.cpp's own tokenizer (llama-tokenize, --parse-special) gives for them,
  the reference for how a GGUF file tokenizes (special tokens parsed, its
  default):
    vocab_spm          "llama": a SentencePiece BPE model trained here with
                       the sentencepiece package (Llama 2's trainer options,
                       byte fallback, control symbols), written as llama.cpp's
                       converter writes one; sentencepiece's own encode is
                       checked to agree on text without control tokens
    vocab_spm_noprefix the same with add_space_prefix false
    vocab_llama_bpe,   "gpt2" with pre llama-bpe / qwen2 / gpt-2 / smollm: the
    vocab_qwen2,       byte-level BPE fixtures of hf_tokenizers/ (and gpt2's
    vocab_gpt2,        vocabulary under SmolLM's Digits + ByteLevel), written
    vocab_smollm       as llama.cpp's converter writes them; the tokenizers
                       library is checked to agree where llama.cpp should
  smollm2_cases.json: the same for the real SmolLM2-135M-Instruct GGUF that
  tools/setup.sh fetches (not committed: 98 MB).

gguf_spm_q4km/, gguf_bpe_mixed/ — tiny random LlamaForCausalLM models as
  GGUF files (model.gguf) with golden.json and golden_logits.safetensors in
  make_llama_golden.py's format. Each reference runs transformers on the
  weights the file holds: gguf-py dequantizes every tensor and Q and K are
  put back from llama.cpp's row order. spm_q4km: vocab_spm's tokenizer, an
  untied head, weights quantized by llama.cpp's llama-quantize to Q4_K_M
  (Q4_K and Q6_K blocks; LLAMA_QUANTIZE). bpe_mixed: vocab_llama_bpe's
  tokenizer, grouped-query attention, llama3 rope scaling (as the
  rope_freqs.weight factors llama.cpp's converter writes), a tied head, and
  each matrix in a different type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, F16, BF16).
qwen2_tiny/, gguf_qwen2/ — a tiny random Qwen2ForCausalLM (q/k/v biases,
  grouped-query attention, tied head, rope_theta 1e6, hf_tokenizers/qwen's
  tokenizer) as a Hugging Face directory (F32 safetensors) and as a qwen2
  GGUF file (F16 and Q8_0 matrices, F32 biases, rows as transformers has
  them: llama.cpp permutes Q and K for llama only), each with its golden
  files; bf16 is emulated with the KV cache in f32 only (the emulation
  patches Llama's rotary function, not Qwen2's).
gguf_smollm2/ — the real SmolLM2 file: transformers' last-position logits for
  two chat prompts and a greedy continuation, on the dequantized weights.

Run once after changing it; the outputs are committed, so tests and CI never
need Python packages (a venv with --system-site-packages over Debian's
python3-torch), with llama.cpp's llama-tokenize built outside the repository
(benchmarks/README.md says how):
    pip install "transformers==4.44.2" "tokenizers>=0.19,<0.20" gguf sentencepiece
    LLAMA_TOKENIZE=/path/to/llama-tokenize python3 tests/golden/make_gguf_golden.py
"""
import io
import json
import os
import subprocess
import sys
import tempfile

import gguf
import numpy as np
import sentencepiece as spm
import torch
from gguf import GGMLQuantizationType as T
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from make_llama_golden import emulated_logits

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "gguf")

# Byte offsets of each block's f16 scale fields, kept finite in random blocks.
SCALE_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0],
    T.MXFP4: [],  # its e8m0 scale byte is finite whatever its bits
}
QUANTIZABLE = [T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.MXFP4]
ROWS, COLS = 3, 512  # two 256-value super-blocks per row


def random_blocks(rng, qtype):
    """ROWS x COLS values' worth of random blocks of `qtype`, as raw bytes."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = ROWS * COLS // block
    if qtype == T.F16:
        return rng.standard_normal(ROWS * COLS).astype(np.float16).view(np.uint8).reshape(ROWS, -1)
    if qtype == T.BF16:
        # Every bit pattern, NaNs and infinities included: widening keeps bits.
        return rng.integers(0, 256, size=(ROWS, COLS * 2), dtype=np.uint8)
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in SCALE_FIELDS[qtype]:
        scale = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(ROWS, -1)


def write_quants():
    rng = np.random.default_rng(20261124)
    w = gguf.GGUFWriter(os.path.join(OUT, "quants.gguf"), arch="flover-quants-test")
    # (Types added later go last, so the earlier tensors keep their bytes.)
    types = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1,
             T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS, T.MXFP4]
    for qtype in types:
        name = qtype.name
        if qtype == T.F32:
            data = rng.standard_normal((ROWS, COLS)).astype(np.float32)
            w.add_tensor(f"{name}.random", data)
            w.add_tensor(f"{name}.random.expected", data.copy())
            continue
        raw = random_blocks(rng, qtype)
        w.add_tensor(f"{name}.random", raw, raw_dtype=qtype)
        w.add_tensor(f"{name}.random.expected", gguf.quants.dequantize(raw, qtype).astype(np.float32))
        if qtype in QUANTIZABLE:
            x = (rng.standard_normal((ROWS, COLS)) * 0.1).astype(np.float32)
            q = gguf.quants.quantize(x, qtype)
            if qtype == T.F16:
                q = q.view(np.uint8)
            w.add_tensor(f"{name}.quantized", q, raw_dtype=qtype)
            w.add_tensor(f"{name}.quantized.expected",
                         gguf.quants.dequantize(q, qtype).astype(np.float32))
    finish(w)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------- vocabularies

SMOLLM2 = os.path.join(HERE, "..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

TEXTS = [
    "Hello world",
    "Hello  world   ",
    " leading space",
    "  two leading spaces",
    "numbers 1234567 and 3.14159, the 42nd",
    "tabs\tand\nnewlines\n\n  indented\r\n",
    "it's I'LL we're they'VE 'd",
    "punctuation!!! ... ?!? --- (parens) [brackets] {braces} $5 +=",
    "unicode: caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \u041f\u0440\u0438\u0432\u0435\u0442 emoji \U0001f999\U0001f680",
    "mixed \u4f60\u597dworld123 \u00a0nbsp",
    "trailing spaces   ",
    "a",
    "The quick brown fox jumps over the lazy dog.",
]


def tiny_hparams(w, n_vocab):
    """A Llama model's hyper-parameters: llama.cpp loads them even for
    vocab_only, so a vocabulary file carries a tiny model's."""
    w.add_context_length(64)
    w.add_embedding_length(16)
    w.add_block_count(1)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(8)
    w.add_vocab_size(n_vocab)


def add_vocab(w, v):
    w.add_tokenizer_model(v["model"])
    if "pre" in v:
        w.add_tokenizer_pre(v["pre"])
    w.add_token_list(v["tokens"])
    w.add_token_types(v["types"])
    if "scores" in v:
        w.add_token_scores(v["scores"])
    if "merges" in v:
        w.add_token_merges(v["merges"])
    for key, add in [("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id),
                     ("unk", w.add_unk_token_id), ("eot", w.add_eot_token_id)]:
        if key in v:
            add(v[key])
    for key, add in [("add_bos", w.add_add_bos_token), ("add_eos", w.add_add_eos_token),
                     ("add_space_prefix", w.add_add_space_prefix)]:
        if key in v:
            add(v[key])
    if "chat_template" in v:
        w.add_chat_template(v["chat_template"])


def write_vocab(name, v):
    path = os.path.join(OUT, f"{name}.gguf")
    w = gguf.GGUFWriter(path, arch="llama")
    tiny_hparams(w, len(v["tokens"]))
    add_vocab(w, v)
    finish(w)
    return path


def llama_tokenize(path, text):
    """llama.cpp's ids for `text` (its BOS if the vocabulary adds one),
    special tokens parsed."""
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
    try:
        out = subprocess.run([os.environ["LLAMA_TOKENIZE"], "-m", path, "-f", f.name, "--ids",
                              "--no-escape", "--log-disable"],
                             check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    return json.loads(out.strip().splitlines()[-1])


def train_spm():
    """A SentencePiece BPE model with Llama 2's trainer options."""
    words = ("the quick brown fox jumps over lazy dog hello world token model server "
             "request stream fusion cache tensor parallel inference chat template "
             "caf\u00e9 na\u00efve \u00fcber stra\u00dfe \u65e5\u672c \u8a9e "
             "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 it's we're "
             "1 2 3 42 2026 3.14 ! ? , . : ; ( ) [ ]").split()
    rng = np.random.default_rng(7)
    lines = [" ".join(rng.choice(words, size=rng.integers(3, 14))) for _ in range(4000)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=700,
        byte_fallback=True, normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, split_digits=True, allow_whitespace_only_pieces=True,
        character_coverage=1.0, control_symbols=["<|user|>", "<|assistant|>", "<|end|>"],
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, hard_vocab_limit=False, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def spm_vocab(sp):
    """As llama.cpp's converter writes a tokenizer.model (_create_vocab_sentencepiece)."""
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else
                     5 if sp.is_unused(i) else 6 if sp.is_byte(i) else 1)
    return {"model": "llama", "tokens": tokens, "scores": scores, "types": types,
            "bos": 1, "eos": 2, "unk": 0}


def hf_vocab(hf_json, pre):
    """A tokenizer.json's vocabulary as llama.cpp's converter writes it
    (get_vocab_base): added tokens are control tokens when special, user
    defined otherwise; holes are unused [PADn]."""
    tj = json.loads(hf_json)
    vocab = dict(tj["model"]["vocab"])
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    for i, a in added.items():
        vocab[a["content"]] = i
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(max(by_id) + 1):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(5)
        else:
            tokens.append(by_id[i])
            types.append((3 if added[i]["special"] else 4) if i in added else 1)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    v = {"model": "gpt2", "pre": pre, "tokens": tokens, "types": types, "merges": merges}
    for key, content in [("bos", "<|begin_of_text|>"), ("eos", "<|end_of_text|>"),
                         ("eot", "<|eot_id|>"), ("bos", "<|endoftext|>"), ("eos", "<|endoftext|>")]:
        if content in vocab and key not in v:
            v[key] = vocab[content]
    return v


def check_agrees(name, text, want, got, what):
    if want != got:
        print(f"  {name}: {what} differs from llama.cpp on {text!r}:\n    llama.cpp {want}\n    {what} {got}")
        return False
    return True


def write_vocabs():
    cases = {}
    sp = train_spm()
    specials = ["<|user|>\nHi there<|end|>\n<|assistant|>\n", "<s>Hello</s> world<unk>",
                "x<|end|>y", "<|user|><|end|>"]
    for name, extra in [("vocab_spm", {}), ("vocab_spm_noprefix", {"add_space_prefix": False})]:
        v = dict(spm_vocab(sp), **extra)
        path = write_vocab(name, v)
        rows = []
        for text in TEXTS + specials:
            ids = llama_tokenize(path, text)
            if text in TEXTS and not extra:
                check_agrees(name, text, ids, [1] + sp.encode(text), "sentencepiece")
            rows.append({"text": text, "ids": ids})
        cases[name] = rows

    golden = os.path.join(HERE, "hf_tokenizers")
    smollm = json.load(open(os.path.join(golden, "gpt2", "tokenizer.json")))
    smollm["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    for name, hf_json, pre in [
            ("vocab_llama_bpe", open(os.path.join(golden, "llama3", "tokenizer.json")).read(), "llama-bpe"),
            ("vocab_qwen2", open(os.path.join(golden, "qwen", "tokenizer.json")).read(), "qwen2"),
            ("vocab_gpt2", open(os.path.join(golden, "gpt2", "tokenizer.json")).read(), "gpt-2"),
            ("vocab_smollm", json.dumps(smollm), "smollm")]:
        v = hf_vocab(hf_json, pre)
        if pre == "qwen2":
            v["add_bos"] = False  # as Qwen's converter writes
        path = write_vocab(name, v)
        hf = Tokenizer.from_str(hf_json)
        rows = []
        for text in TEXTS + ["<|begin_of_text|>Hi<|eot_id|>flo", "x<|endoftext|>y"]:
            ids = llama_tokenize(path, text)
            hf_ids = hf.encode(text).ids
            if pre == "llama-bpe" and (not hf_ids or hf_ids[0] != v["bos"]):
                hf_ids = [v["bos"]] + hf_ids
            if pre == "qwen2" and hf_ids and hf_ids[0] == v.get("bos"):
                hf_ids = hf_ids[1:]  # the fixture's template adds one; the GGUF does not
            check_agrees(name, text, ids, hf_ids, "tokenizers")
            rows.append({"text": text, "ids": ids})
        cases[name] = rows
    with open(os.path.join(OUT, "vocab_cases.json"), "w") as f:
        json.dump(cases, f, indent=1, ensure_ascii=False)

    if os.path.exists(SMOLLM2):
        chat = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 12*34?<|im_end|>\n"
                "<|im_start|>assistant\n")
        rows = [{"text": t, "ids": llama_tokenize(SMOLLM2, t)} for t in TEXTS + [chat]]
        with open(os.path.join(OUT, "smollm2_cases.json"), "w") as f:
            json.dump(rows, f, indent=1, ensure_ascii=False)
    else:
        print("skipped smollm2_cases.json: run tools/setup.sh to fetch", SMOLLM2)


# ------------------------------------------------------------------- models

# transformers' names -> llama.cpp's, per layer.
LAYER_NAMES = {
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    return f"blk.{parts[2]}." + LAYER_NAMES[".".join(parts[3:])]


def permute(w, n_head):
    """llama.cpp's converter: each head's rows from halves to interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg):
    """rope_freqs.weight as llama.cpp's converter writes it for llama3 scaling."""
    r = cfg["rope_scaling"]
    dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    low = r["original_max_position_embeddings"] / r["low_freq_factor"]
    high = r["original_max_position_embeddings"] / r["high_freq_factor"]
    out = []
    for f in freqs.tolist():
        wavelen = 2 * np.pi / f
        if wavelen < high:
            out.append(1.0)
        elif wavelen > low:
            out.append(r["factor"])
        else:
            smooth = (r["original_max_position_embeddings"] / wavelen - r["low_freq_factor"]) / (
                r["high_freq_factor"] - r["low_freq_factor"])
            out.append(1 / ((1 - smooth) / r["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def write_model_gguf(path, cfg, state, vocab, types, extra_tensors=(), arch="llama"):
    """A Llama-family model as llama.cpp's converter writes it: Q and K
    permuted (llama only), each tensor in types.get(gguf name, F32)."""
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
    w.add_vocab_size(cfg["vocab_size"])
    add_vocab(w, vocab)
    for hf, t in state.items():
        a = t.detach().to(torch.float32).numpy()
        if arch == "llama" and hf.endswith("q_proj.weight"):
            a = permute(a, cfg["num_attention_heads"])
        if arch == "llama" and hf.endswith("k_proj.weight"):
            a = permute(a, cfg["num_key_value_heads"])
        name = gguf_name(hf)
        qtype = types.get(name, T.F32)
        if qtype == T.F32:
            w.add_tensor(name, np.ascontiguousarray(a))
        else:
            data = gguf.quants.quantize(a, qtype)
            w.add_tensor(name, data.view(np.uint8) if qtype == T.F16 else data, raw_dtype=qtype)
    for name, a in extra_tensors:
        w.add_tensor(name, a)
    finish(w)


def read_back(path, cfg, arch="llama"):
    """The file's weights as transformers' state dict: dequantized by gguf-py,
    Q and K put back in transformers' row order (llama)."""
    r = gguf.GGUFReader(path)
    by_gguf = {}
    for t in r.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        by_gguf[t.name] = torch.from_numpy(
            gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float64))
    state = {}
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if "output.weight" in by_gguf:
        names.append("lm_head.weight")
    for l in range(cfg["num_hidden_layers"]):
        names += [f"model.layers.{l}.{k}" for k in LAYER_NAMES if gguf_name(f"model.layers.{l}.{k}") in by_gguf]
    for hf in names:
        t = by_gguf[gguf_name(hf)]
        if arch == "llama" and hf.endswith("q_proj.weight"):
            t = torch.from_numpy(unpermute(t.numpy(), cfg["num_attention_heads"]))
        if arch == "llama" and hf.endswith("k_proj.weight"):
            t = torch.from_numpy(unpermute(t.numpy(), cfg["num_key_value_heads"]))
        state[hf] = t
    types = sorted({t.tensor_type.name for t in r.tensors})
    return state, types


def reference_model(cfg, state, qwen2=False):
    config = (Qwen2Config if qwen2 else LlamaConfig)(**cfg, bos_token_id=1, eos_token_id=2)
    model = (Qwen2ForCausalLM if qwen2 else LlamaForCausalLM)(config).eval().double()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m or (m == "lm_head.weight" and cfg["tie_word_embeddings"])
                                  for m in missing), (missing, unexpected)
    if cfg["tie_word_embeddings"]:
        model.tie_weights()
    return model


def golden_for(out_dir, cfg, model, seed, types, kinds=(("bf16", False), ("bf16kv", True))):
    """make_llama_golden.py's files for `model` (float64 reference logits, and
    transformers' bf16 emulations in float32: `kinds`)."""
    V, P = cfg["vocab_size"], cfg["max_position_embeddings"]
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (1, 7, 20, P - 2)]
    logits = {}
    with torch.no_grad():
        for i, p in enumerate(prompts):
            logits[f"logits.{i}"] = model(torch.tensor([p])).logits[0].float().contiguous()
        greedy_prompt = prompts[1]
        seq = list(greedy_prompt)
        for _ in range(32):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    f32 = model.float()
    if cfg["tie_word_embeddings"]:
        # The emulation rounds each Linear's weight in place: a tied head would
        # round the embedding table with it, which Flover keeps in f32.
        f32.lm_head.weight = torch.nn.Parameter(f32.model.embed_tokens.weight.detach().clone())
    for kind, kv in kinds:
        for i, l in enumerate(emulated_logits(f32, prompts, kv)):
            logits[f"logits_{kind}.{i}"] = l
    save_file(logits, os.path.join(out_dir, "golden_logits.safetensors"))
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy_prompt": greedy_prompt,
                   "greedy_output": seq[len(greedy_prompt):], "stored_dtype": "+".join(types)}, f)


def random_state(cfg, seed, qwen2=False):
    torch.manual_seed(seed)
    config = (Qwen2Config if qwen2 else LlamaConfig)(**cfg, initializer_range=0.2)
    model = (Qwen2ForCausalLM if qwen2 else LlamaForCausalLM)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_(0.3 * torch.randn_like(p))
    state = {k: v for k, v in model.state_dict().items() if "rotary" not in k}
    if cfg["tie_word_embeddings"]:
        state.pop("lm_head.weight", None)
    return state


def write_models():
    sp_vocab = spm_vocab(train_spm())
    cfg = dict(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=512, vocab_size=len(sp_vocab["tokens"]), max_position_embeddings=48,
               rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    out_dir = os.path.join(HERE, "gguf_spm_q4km")
    os.makedirs(out_dir, exist_ok=True)
    f32_path = os.path.join(tempfile.mkdtemp(), "f32.gguf")
    write_model_gguf(f32_path, cfg, random_state(cfg, 31), sp_vocab, {})
    path = os.path.join(out_dir, "model.gguf")
    subprocess.run([os.environ["LLAMA_QUANTIZE"], f32_path, path, "Q4_K_M"], check=True,
                   capture_output=True)
    state, types = read_back(path, cfg)
    golden_for(out_dir, cfg, reference_model(cfg, state), 32, types)

    bpe_vocab = hf_vocab(open(os.path.join(HERE, "hf_tokenizers", "llama3", "tokenizer.json")).read(),
                         "llama-bpe")
    cfg = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=96, vocab_size=len(bpe_vocab["tokens"]), max_position_embeddings=48,
               rms_norm_eps=1e-5, rope_theta=500000.0,
               rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
               tie_word_embeddings=True)
    types = {"token_embd.weight": T.Q8_0,
             "blk.0.attn_q.weight": T.Q4_0, "blk.0.attn_k.weight": T.Q4_1, "blk.0.attn_v.weight": T.Q5_0,
             "blk.0.attn_output.weight": T.Q5_1, "blk.0.ffn_gate.weight": T.F16,
             "blk.0.ffn_up.weight": T.BF16, "blk.0.ffn_down.weight": T.Q8_0,
             "blk.1.attn_q.weight": T.BF16, "blk.1.attn_k.weight": T.F16, "blk.1.attn_v.weight": T.Q8_0,
             "blk.1.attn_output.weight": T.Q4_0, "blk.1.ffn_gate.weight": T.Q5_1,
             "blk.1.ffn_up.weight": T.Q4_1, "blk.1.ffn_down.weight": T.Q5_0}
    out_dir = os.path.join(HERE, "gguf_bpe_mixed")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.gguf")
    write_model_gguf(path, cfg, random_state(cfg, 41), bpe_vocab, types,
                     [("rope_freqs.weight", llama3_rope_factors(cfg))])
    state, types = read_back(path, cfg)
    golden_for(out_dir, cfg, reference_model(cfg, state), 42, types)


def write_qwen2():
    qwen_json = open(os.path.join(HERE, "hf_tokenizers", "qwen", "tokenizer.json")).read()
    vocab = hf_vocab(qwen_json, "qwen2")
    vocab["add_bos"] = False
    # One embedding row more than the tokenizer has tokens, as checkpoints
    # pad them (and an odd vocabulary for the tensor-parallel test's uneven split).
    cfg = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=96, vocab_size=len(vocab["tokens"]) + 1, max_position_embeddings=48,
               rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)
    state = random_state(cfg, 51, qwen2=True)
    f32_only = (("bf16", False),)
    # The Hugging Face directory, F32.
    out_dir = os.path.join(HERE, "qwen2_tiny")
    os.makedirs(out_dir, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(out_dir, "model.safetensors"))
    config = Qwen2Config(**cfg, bos_token_id=vocab["bos"], eos_token_id=vocab["eos"])
    config.to_json_file(os.path.join(out_dir, "config.json"))
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        f.write(qwen_json)
    model = reference_model(cfg, {k: v.double() for k, v in state.items()}, qwen2=True)
    golden_for(out_dir, cfg, model, 52, ["F32"], f32_only)
    # The same weights as a qwen2 GGUF file: matrices F16 or Q8_0.
    types = {"token_embd.weight": T.Q8_0}
    for l in range(cfg["num_hidden_layers"]):
        for i, name in enumerate(["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                                  "ffn_down"]):
            types[f"blk.{l}.{name}.weight"] = T.F16 if (i + l) % 2 == 0 else T.Q8_0
    out_dir = os.path.join(HERE, "gguf_qwen2")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.gguf")
    write_model_gguf(path, cfg, state, vocab, types, arch="qwen2")
    back, types = read_back(path, cfg, arch="qwen2")
    golden_for(out_dir, cfg, reference_model(cfg, back, qwen2=True), 53, types, f32_only)


SMOLLM2_CONFIG = dict(num_hidden_layers=30, hidden_size=576, num_attention_heads=9,
                      num_key_value_heads=3, intermediate_size=1536, vocab_size=49152,
                      max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
                      tie_word_embeddings=True)


def write_smollm2():
    if not os.path.exists(SMOLLM2):
        print("skipped gguf_smollm2: run tools/setup.sh to fetch", SMOLLM2)
        return
    cfg = SMOLLM2_CONFIG
    state, types = read_back(SMOLLM2, cfg)
    model = reference_model(cfg, state)
    chats = [("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
              "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
              "<|im_start|>assistant\n"),
             "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n"]
    out_dir = os.path.join(HERE, "gguf_smollm2")
    os.makedirs(out_dir, exist_ok=True)
    prompts, logits, greedy = [], {}, []
    with torch.no_grad():
        for i, text in enumerate(chats):
            ids = llama_tokenize(SMOLLM2, text)
            prompts.append({"text": text, "ids": ids})
            logits[f"last.{i}"] = model(torch.tensor([ids])).logits[0, -1].float().contiguous()
        seq = list(prompts[0]["ids"])
        for _ in range(24):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    save_file(logits, os.path.join(out_dir, "golden_logits.safetensors"))
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump({"prompts": prompts, "greedy_output": seq[len(prompts[0]["ids"]):],
                   "stored_dtype": "+".join(types)}, f, indent=1)


def main(only=None):
    os.makedirs(OUT, exist_ok=True)
    write_quants()
    if only == "quants":
        return
    write_vocabs()
    write_models()
    write_qwen2()
    write_smollm2()


if __name__ == "__main__":
    # "quants": gguf/quants.gguf alone (no sentencepiece, llama.cpp or models).
    main(sys.argv[1] if len(sys.argv) > 1 else None)

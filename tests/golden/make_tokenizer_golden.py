#!/usr/bin/env python3
"""Writes the tokenizer.json fixtures Flover's HfTokenizer is tested against.

The reference is the Hugging Face `tokenizers` library itself (and, for the
SentencePiece kinds, transformers' converter from a `sentencepiece` model, as
Llama 2 / TinyLlama repositories were made). Each directory gets the
tokenizer.json and cases.json: ids and decoded text for a list of texts, and
decoded text for arbitrary id lists (byte tokens cut mid-character, special
tokens, continuations).

    python3 -m venv --system-site-packages /tmp/hfvenv   # Debian python3-torch
    /tmp/hfvenv/bin/pip install "transformers==4.44.2" "tokenizers>=0.19,<0.20" \\
        sentencepiece protobuf
    /tmp/hfvenv/bin/python tests/golden/make_tokenizer_golden.py

Kinds written under tests/golden/hf_tokenizers/:
  llama3      byte-level BPE, Llama 3's split regex, ignore_merges, a BOS
              template, special and added tokens (lstrip/rstrip/single_word)
  qwen        byte-level BPE with Qwen 2's split regex (single digits)
  gpt2        the GPT-2 fixture vocabulary (tests/golden/tokenizer) converted
              by GPT2TokenizerFast: ByteLevel pre-tokenizer with its regex
  spm_legacy  SentencePiece BPE with byte fallback, converted by
              LlamaTokenizerFast(legacy=True): Prepend + Replace normalizer
  spm_metaspace  the same model with legacy=False: Metaspace pre-tokenizer
  spm_split   the same vocabulary with Metaspace (always, split) and the
              Metaspace decoder
  gpt2_openai GPT-2's own vocabulary (third_party/gpt2_vocab, fetched by
              tools/fetch_gpt2_vocab.py; not committed): cases.json only,
              from transformers' (slow) GPT2Tokenizer
  edge        a hand-written vocabulary: ignore_merges reaching a token merges
              cannot, an unknown-token fallback with fuse_unk, Split with
              behavior Removed
  qwen35      Qwen3.5's pipeline (transformers 5's Qwen3_5Tokenizer: NFC,
              Split with its pattern, which keeps combining marks \p{M} in
              letter runs, ByteLevel without its regex, BPE without byte
              fallback, ByteLevel decoder) over a vocabulary trained here on
              text with marks (Devanagari, Thai, Vietnamese, Hebrew points,
              Arabic harakat, emoji with variation selectors); ChatML's
              special tokens. Checked to be the pipeline Qwen3_5Tokenizer
              builds when transformers has it (5.x; written with
              tokenizers 0.23.3, transformers 5.23.0):
                  python3 tests/golden/make_tokenizer_golden.py qwen35
  o200k       o200k's pattern (gpt-oss, GPT-4o: upper- and lower-case runs by
              the letters' categories \p{Lu} \p{Ll} \p{Lt} \p{Lm} \p{Lo}),
              ignore_merges as its tokenizer.json has, over a vocabulary
              trained here (the real one's ranks are 28 MB)

  llama_cpp   cases.json: llama.cpp's ids (llama-tokenize, special tokens
              parsed) for the GGUF pre-tokenizers of the hybrid families on
              these vocabularies, written as llama.cpp's converter writes a
              tokenizer.json (gpt2 model, special added tokens as control
              tokens): "qwen35" on qwen35's (no NFC: llama.cpp has none) and
              "lfm2" (llama3's) on llama3's, "gpt-4o" (o200k's) on o200k's. Needs gguf and llama.cpp's
              llama-tokenize built outside the repository:
                  LLAMA_TOKENIZE=/path/to/llama-tokenize \\
                      python3 tests/golden/make_tokenizer_golden.py llama_cpp

  llama_cpp_gemma4  cases.json: llama.cpp's ids for its "gemma4" tokenizer
              model (Gemma 4's GGUF files) on spm_legacy's vocabulary and
              merges, the vocabulary itself in the file (the same way:
              LLAMA_TOKENIZE=... ... llama_cpp_gemma4)

Naming kinds on the command line writes only those.
"""
import json
import os
import random
import re
import shutil
import sys
import tempfile

import sentencepiece as spm
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
from transformers import GPT2Tokenizer, GPT2TokenizerFast, LlamaTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "hf_tokenizers")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5's (transformers' tokenization_qwen3_5.PRETOKENIZE_REGEX).
# o200k's (gpt-oss, GPT-4o): by the letters' categories.
O200K_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                 r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
                 r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                  r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = """
The quick brown fox jumps over the lazy dog. It's what they'd said: we're here,
you've seen it, I'm sure they'll agree. Don't stop; the server isn't down.
Flover fuses every in-flight sequence into one forward pass at each token step.
Requests arrive at random times, and the engine reshuffles the KV cache so the
live sequences stay dense. In 2023 the paper reported 11.2x at 20 ms, 10.2x at
100 ms and 6.5x at 500 ms. Numbers: 0 1 2 3 42 1024 50257 3.14159 1e-5 -7.
def forward(self, x):  # x: [T, C]
    return self.norm(x) @ self.embed.T
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
Café naïve résumé façade — “quotes” and ‘single’ … ellipsis.
Москва, Київ, Ελληνικά, עברית, العربية, हिन्दी, 日本語のテキスト, 中文文本, 한국어.
Emoji: 🙂🚀✨ and symbols ©®™ °C ±√∞ ≠ ≤ ≥.
Tabs\tand\tnewlines\n\nand   several   spaces   here.
"""


def corpus_lines():
    # The licence texts Debian ships give the trainer ordinary English.
    lines = CORPUS.strip().split("\n")
    for name in ("Apache-2.0", "GPL-3", "MPL-2.0"):
        path = os.path.join("/usr/share/common-licenses", name)
        with open(path, encoding="utf-8") as f:
            lines += [l for l in f.read().split("\n") if l.strip()][:400]
    return lines * 3


CASES = [
    "Hello world",
    "Hello  world   ",
    " leading space",
    "  two leading spaces",
    "It's we're they'll I'M don't 'tis IT'S",
    "numbers 123 4567.89 and x2y3 1234567",
    "tabs\tand\nnewlines\n\n  indented\n",
    "line\r\nwindows\r\n\r\nend",
    "   ",
    "\n",
    "a",
    "",
    "Café naïve — “quotes” ½ Ⅻ ٣",
    "日本語のテキスト 中文 한국어",
    "rare characters: 龘 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ",
    "emoji 🙂🚀 mixed🙂text",
    "symbols ©®™ ±√∞ ≠≤≥ !!! ??? ...",
    "code: for (int i = 0; i < n; ++i) { x[i] = y[i]; }",
    "\u00a0nbsp and\u2003em space\u3000ideographic",
    "trailing newline and spaces  \n  ",
    "The server isn't down; it's fusing requests.",
    "▁ a literal metaspace ▁▁ and <0x41> text",
    "it'ſx we'REx a'LLb",
]


# Text with combining marks for the qwen35 fixture: its trainer's, repeated
# so that merges join letters and their marks (as a word the pattern keeps
# whole and Qwen 2's would cut), and its cases'.
MARKS_CORPUS = """
हिन्दी में लिखा गया पाठ, नमस्ते दुनिया। भारत की भाषाएँ।
ภาษาไทยที่นี่ น้ำ ไม้ ก็ได้ ครับ ค่ะ สวัสดีครับ
Tiếng Việt có dấu: người, được, những, Việt Nam, tiếng nói.
שָׁלוֹם עֲלֵיכֶם בְּרֵאשִׁית בָּרָא
السَّلَامُ عَلَيْكُمْ مُحَمَّد
❤️ ☺️ ✌️ ✔️ 1️⃣ #️⃣ ©️ and ✌🏽 👍🏿 👨‍👩‍👧
தமிழ் মাতৃভাষা বাংলা ಕನ್ನಡ
"""

MARK_CASES = [
    "हिन्दी में लिखा गया पाठ",
    "नमस्ते दुनिया। 12 बजे",
    "ภาษาไทยที่นี่ น้ำ ไม้",
    "Tiếng Việt có dấu: người được",
    "Vie\u0302\u0323t decomposed and Vi\u1ec7t composed",
    "שָׁלוֹם עֲלֵיכֶם",
    "السَّلَامُ عَلَيْكُمْ",
    "❤️ ☺️ ✌️ ✔\ufe0e text and emoji",
    "1️⃣ #️⃣ keycaps x\u20dd enclosed",
    "✌🏽 👍🏿 👨‍👩‍👧 family",
    "stray marks: \u0301a \u0301\u0302! x\u0300\u0300\u0300 \u0301",
    "Z\u0335\u0321a\u0337\u0322l\u0338g\u0334o text",
    "தமிழ் বাংলা ಕನ್ನಡ",
    "digits 12345 ٣٤٥ ١٢ ₂ ½ 9\u0301",
    "She'd've it's I'LL we'Re they'ꞌd",
    "a\n\n\n b \r\n\t\tc  \n  \u0301\n",
    "mixed: café\u0301 ñ n\u0303 \u212b \u0958",
    "<|im_start|>user\nनमस्ते<|im_end|>\n<|im_start|>assistant\n",
    "<|im_end|><|endoftext|> after",
]


def special_cases(specials, added):
    s = list(specials)
    a = list(added)
    return [
        f"{s[0]}Hello{s[1]}",
        f"text {s[1]} more",
        f"{s[1]}{s[1]}",
        f"say {a[0]} now",
        f"say{a[0]}now",
        f"x {a[1]}  y",
        f"{a[2]} alone and not{a[2]}",
        f"{s[0]} leading special",
    ]


def write_cases(dirname, tok_path, extra_texts, seed):
    tok = Tokenizer.from_file(tok_path)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    encode = []
    for text in CASES + extra_texts:
        ids = tok.encode(text).ids
        encode.append({"text": text, "ids": ids,
                       "decoded": tok.decode(ids, skip_special_tokens=False)})
    rng = random.Random(seed)
    decode = []
    for _ in range(40):
        ids = [rng.randrange(vocab) for _ in range(rng.randrange(1, 12))]
        decode.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    # Continuations: what a stream of generated ids adds to a prompt's text,
    # decoded the way servers do (whole sequence minus the prompt's text).
    continuations = []
    for text in CASES + extra_texts:
        ids = tok.encode(text).ids
        if len(ids) < 3:
            continue
        cut = len(ids) // 2
        head = tok.decode(ids[:cut], skip_special_tokens=False)
        whole = tok.decode(ids, skip_special_tokens=False)
        if "\ufffd" in head or "\ufffd" in whole or not whole.startswith(head):
            continue
        continuations.append({"prompt_ids": ids[:cut], "ids": ids[cut:],
                              "text": whole[len(head):]})
    with open(os.path.join(dirname, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"encode": encode, "decode": decode, "continue": continuations}, f,
                  ensure_ascii=False, indent=0)


def fresh(name):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def byte_level(name, pattern, ignore_merges, seed):
    d = fresh(name)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer)
    tok.add_special_tokens(specials)
    added = [AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False),
             AddedToken("[MASK]", lstrip=True, normalized=False),
             AddedToken("flo", single_word=True, normalized=False)]
    tok.add_tokens(added)
    bos = tok.token_to_id(specials[0])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{specials[0]} $A",
                                      pair=f"{specials[0]} $A {specials[0]} $B",
                                      special_tokens=[(specials[0], bos)])])
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    write_cases(d, path, special_cases(specials, [a.content for a in added]), seed)


def gpt2():
    d = fresh("gpt2")
    src = os.path.join(HERE, "tokenizer")
    tok = GPT2TokenizerFast(vocab_file=os.path.join(src, "vocab.json"),
                            merges_file=os.path.join(src, "merges.txt"))
    tok.backend_tokenizer.save(os.path.join(d, "tokenizer.json"))
    write_cases(d, os.path.join(d, "tokenizer.json"),
                ["The quick brown fox<|endoftext|>jumps over", "<|endoftext|>"], seed=3)


def gpt2_openai(seed=4):
    """GPT-2's real vocabulary through transformers' slow GPT2Tokenizer (its
    own byte-level BPE in Python, independent of the tokenizers library)."""
    src = os.path.join(HERE, "..", "..", "third_party", "gpt2_vocab")
    tok = GPT2Tokenizer(os.path.join(src, "vocab.json"), os.path.join(src, "merges.txt"))
    d = fresh("gpt2_openai")

    def decode(ids):
        return tok.decode(ids, clean_up_tokenization_spaces=False)
    texts = CASES + ["The quick brown fox<|endoftext|>jumps over", "<|endoftext|>",
                     "Flover fuses every in-flight sequence into one forward pass."]
    encode = [{"text": t, "ids": tok.encode(t), "decoded": decode(tok.encode(t))} for t in texts]
    rng = random.Random(seed)
    decodes = []
    for _ in range(40):
        ids = [rng.randrange(len(tok)) for _ in range(rng.randrange(1, 12))]
        decodes.append({"ids": ids, "decoded": decode(ids)})
    continuations = []
    for t in texts:
        ids = tok.encode(t)
        if len(ids) < 3:
            continue
        cut = len(ids) // 2
        head, whole = decode(ids[:cut]), decode(ids)
        if "\ufffd" in head or "\ufffd" in whole or not whole.startswith(head):
            continue
        continuations.append({"prompt_ids": ids[:cut], "ids": ids[cut:], "text": whole[len(head):]})
    with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"encode": encode, "decode": decodes, "continue": continuations}, f,
                  ensure_ascii=False, indent=0)


def sentencepiece_kinds():
    tmp = tempfile.mkdtemp()
    prefix = os.path.join(tmp, "spm")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines()), model_prefix=prefix, vocab_size=700,
        model_type="bpe", byte_fallback=True, character_coverage=0.995,
        normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, split_digits=True,
        allow_whitespace_only_pieces=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2)
    specials = ["<s>", "</s>"]
    for name, legacy in (("spm_legacy", True), ("spm_metaspace", False)):
        d = fresh(name)
        tok = LlamaTokenizerFast(vocab_file=prefix + ".model", legacy=legacy, from_slow=True,
                                 add_prefix_space=True)
        tok.backend_tokenizer.save(os.path.join(d, "tokenizer.json"))
        write_cases(d, os.path.join(d, "tokenizer.json"),
                    [f"{specials[0]}Hello{specials[1]}", f"text {specials[1]} more",
                     f"{specials[1]}{specials[1]}", "<unk> stays text"], seed=5)
    # Metaspace with prepend_scheme "always" and split on, decoded by the
    # Metaspace decoder (Mistral-style files) on the same vocabulary.
    d = fresh("spm_split")
    tok = Tokenizer.from_file(os.path.join(OUT, "spm_metaspace", "tokenizer.json"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                                 split=True)
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(
        replacement="\u2581", prepend_scheme="always", split=True)])
    tok.save(os.path.join(d, "tokenizer.json"))
    write_cases(d, os.path.join(d, "tokenizer.json"),
                [f"{specials[0]}Hello{specials[1]}", "text </s>  more", "\u2581\u2581x y"], seed=6)
    shutil.rmtree(tmp)


def edge():
    d = fresh("edge")
    chars = list("abcdefghij ")
    vocab = {"<unk>": 0}
    for c in chars:
        vocab[c] = len(vocab)
    for t in ("ab", "abc", "cd", "xyz"):
        vocab[t] = len(vocab)
    merges = [("a", "b"), ("c", "d")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\s+"), behavior="removed")
    tok.decoder = decoders.Fuse()
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    # "abc" only through ignore_merges (merges make "ab" + "c"); "xyz" too,
    # though x, y, z are unknown; "qq" fuses into one <unk>.
    write_cases(d, path, ["abc", "abcd", "xyz", "qqab", "abc cd  xyz qq"], seed=7)


def qwen35(seed=8):
    d = fresh("qwen35")
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B:1", special_tokens=[])
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus_lines() + MARKS_CORPUS.strip().split("\n") * 300, trainer)
    # Training leaves these None; Qwen3_5Tokenizer spells "no affix" as "".
    tok.model.continuing_subword_prefix = ""
    tok.model.end_of_word_suffix = ""
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    try:
        from transformers.models.qwen3_5 import tokenization_qwen3_5 as q35
    except ImportError:
        print("transformers has no Qwen3_5Tokenizer (needs 5.x): qwen35's pipeline not checked")
    else:
        # The same pipeline as the one transformers builds for Qwen3.5.
        assert q35.PRETOKENIZE_REGEX == QWEN35_PATTERN
        doc = json.load(open(path, encoding="utf-8"))
        merges = [tuple(m) for m in doc["model"]["merges"]]
        ref = json.loads(q35.Qwen3_5Tokenizer(vocab=doc["model"]["vocab"], merges=merges)
                         .backend_tokenizer.to_str())
        for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
            assert doc[key] == ref[key], (key, doc[key], ref[key])
        strip = ("vocab", "merges")
        assert ({k: v for k, v in doc["model"].items() if k not in strip} ==
                {k: v for k, v in ref["model"].items() if k not in strip})
    write_cases(d, path, MARK_CASES, seed)


def gguf_vocab_tools():
    """make_gguf_golden.py's GGUF vocabulary helpers (it needs gguf-py): a tiny
    model's hyper-parameters for a vocabulary file, finishing the file, and
    llama-tokenize's ids."""
    import make_gguf_golden as g
    return g.tiny_hparams, g.finish, g.llama_tokenize


def llama_cpp():
    import gguf

    tiny_hparams, finish, tokenize = gguf_vocab_tools()
    tmp = tempfile.mkdtemp()
    out = {}
    for name, kind, pre in [("qwen35", "qwen35", "qwen35"), ("lfm2", "llama3", "lfm2"), ("o200k", "o200k", "gpt-4o")]:
        doc = json.load(open(os.path.join(OUT, kind, "tokenizer.json"), encoding="utf-8"))
        by_id = {i: t for t, i in doc["model"]["vocab"].items()}
        special = {}
        for a in doc["added_tokens"]:
            by_id[a["id"]] = a["content"]
            special[a["id"]] = a["special"]
        assert sorted(by_id) == list(range(len(by_id)))
        path = os.path.join(tmp, name + ".gguf")
        w = gguf.GGUFWriter(path, arch="llama")
        tiny_hparams(w, len(by_id))
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list([by_id[i] for i in range(len(by_id))])
        w.add_token_types([(3 if special[i] else 4) if i in special else 1 for i in range(len(by_id))])
        w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]])
        bos = doc["model"]["vocab"].get("<|begin_of_text|>", next(
            (a["id"] for a in doc["added_tokens"] if a["content"] == "<|begin_of_text|>"), None))
        if bos is not None:
            w.add_bos_token_id(bos)
        finish(w)
        cases = json.load(open(os.path.join(OUT, kind, "cases.json"), encoding="utf-8"))["encode"]
        out[name] = {"vocabulary": kind, "pre": pre,
                     "cases": [{"text": c["text"], "ids": tokenize(path, c["text"])}
                               for c in cases if c["text"]]}
    shutil.rmtree(tmp)
    d = fresh("llama_cpp")
    with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)


def llama_cpp_gemma4():
    """llama.cpp's "gemma4" tokenizer (SentencePiece-style BPE: spaces as
    U+2581, merges from tokenizer.ggml.merges over raw UTF-8, no space
    prefix, byte tokens for what the vocabulary lacks, text split at runs of
    newlines) on spm_legacy's vocabulary and merges, as Gemma 4's converter
    writes it (byte tokens of type BYTE, special ones CONTROL), with two
    Gemma-style tokens of runs of newlines added as normal tokens."""
    import gguf

    tiny_hparams, finish, llama_tokenize = gguf_vocab_tools()
    doc = json.load(open(os.path.join(OUT, "spm_legacy", "tokenizer.json"), encoding="utf-8"))
    by_id = {i: t for t, i in doc["model"]["vocab"].items()}
    special = {a["id"] for a in doc["added_tokens"] if a["special"]}
    for a in doc["added_tokens"]:
        by_id[a["id"]] = a["content"]
    for extra in ("\n\n", "\n\n\n"):
        by_id[len(by_id)] = extra
    assert sorted(by_id) == list(range(len(by_id)))
    tokens = [by_id[i] for i in range(len(by_id))]
    types = [3 if i in special else 6 if re.fullmatch(r"<0x[0-9A-F]{2}>", t) else 1 for i, t in enumerate(tokens)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "gemma4.gguf")
    w = gguf.GGUFWriter(path, arch="llama")
    tiny_hparams(w, len(tokens))
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(doc["model"]["vocab"].get("<s>", 1))
    w.add_eos_token_id(doc["model"]["vocab"].get("</s>", 2))
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    finish(w)

    cases = json.load(open(os.path.join(OUT, "spm_legacy", "cases.json"), encoding="utf-8"))["encode"]
    texts = [c["text"] for c in cases if c["text"]] + [
        "a\n\nb", "line one\nline two\n\n\nthree", "\n", "\n\n\n\n", "  leading and trailing  ",
        "tab\there", "<s>hello</s> world", "ünïcödé ✓ 漢字 🙂", "x\n y\n\n z"]
    out = {"tokens": tokens, "types": types, "merges": merges,
           "bos": doc["model"]["vocab"].get("<s>", 1), "eos": doc["model"]["vocab"].get("</s>", 2),
           "cases": [{"text": t, "ids": llama_tokenize(path, t)} for t in texts]}
    shutil.rmtree(tmp)
    d = fresh("llama_cpp_gemma4")
    with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)


KINDS = {
    "llama3": lambda: byte_level("llama3", LLAMA3_PATTERN, ignore_merges=True, seed=1),
    "qwen": lambda: byte_level("qwen", QWEN_PATTERN, ignore_merges=False, seed=2),
    "gpt2": gpt2,
    "gpt2_openai": gpt2_openai,
    "spm": sentencepiece_kinds,
    "edge": edge,
    "qwen35": qwen35,
    "o200k": lambda: byte_level("o200k", O200K_PATTERN, ignore_merges=True, seed=9),
    "llama_cpp": llama_cpp,
    "llama_cpp_gemma4": llama_cpp_gemma4,
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in sys.argv[1:] or KINDS:
        KINDS[name]()


if __name__ == "__main__":
    main()

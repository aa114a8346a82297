#!/usr/bin/env python3
"""Writes tests/golden/tokenizer_config/: model directories whose
tokenizer.json has no post-processor (hf_tokenizers/spm_legacy's, with it
removed, as some Llama/SentencePiece repositories ship it) beside a
tokenizer_config.json, and cases.json: the ids transformers' AutoTokenizer
gives for texts in each. transformers' Llama (also CodeLlama, Gemma, Cohere,
GPT-NeoX) fast tokenizer rebuilds the post-processor from add_bos_token /
add_eos_token (defaults: BOS on, EOS off); a generic PreTrainedTokenizerFast
keeps tokenizer.json's. The directories also carry their chat template in
each of the places transformers reads one from.

    python3 tests/golden/make_tokenizer_config_golden.py   (transformers 4.44.2)
"""
import json
import os
import shutil

from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tokenizer_config")
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ eos_token }}{% endfor %}"

DIRS = {
    # (tokenizer_config.json, chat template location)
    "llama_add_bos": ({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True,
                       "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                       "chat_template": TEMPLATE}, None),
    "llama_add_eos": ({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": False,
                       "add_eos_token": True,
                       "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False,
                                     "rstrip": False, "single_word": False},
                       "eos_token": "</s>",
                       "chat_template": [{"name": "tool_use", "template": "tools!"},
                                         {"name": "default", "template": TEMPLATE}]}, None),
    "generic_class": ({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": True,
                       "bos_token": "<s>", "eos_token": "</s>"}, "jinja"),
    "model_type_default": ({"bos_token": "<s>", "eos_token": "</s>"}, None),
}
TEXTS = ["Hello world", " leading space", "two\nlines"]


def main():
    source = json.load(open(os.path.join(HERE, "hf_tokenizers", "spm_legacy", "tokenizer.json")))
    source["post_processor"] = None
    shutil.rmtree(OUT, ignore_errors=True)
    cases = {}
    for name, (config, template_file) in DIRS.items():
        d = os.path.join(OUT, name)
        os.makedirs(d)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(source, f, ensure_ascii=False)
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=1)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "llama"}, f)
        if template_file == "jinja":
            with open(os.path.join(d, "chat_template.jinja"), "w") as f:
                f.write(TEMPLATE)
        tok = AutoTokenizer.from_pretrained(d)
        cases[name] = {"class": type(tok).__name__,
                       "cases": [{"text": t, "ids": tok.encode(t)} for t in TEXTS],
                       "chat_template": tok.chat_template}
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
    for name, c in cases.items():
        print(name, c["class"], c["cases"][0]["ids"])


if __name__ == "__main__":
    main()

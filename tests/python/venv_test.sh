#!/usr/bin/env bash
# Runs the Python test named first with the clone's .venv-test (tools/setup.sh
# makes it: the `openai` package and matplotlib over Debian's python3,
# grpcio and protobuf). The clone is found through the test's runfiles link
# to its source.
set -euo pipefail
script="$1"
shift
root="$(dirname "$(readlink -f "$script")")/../.."
python="$root/.venv-test/bin/python"
if [ ! -x "$python" ]; then
  echo "$script: $python is missing: run tools/setup.sh" >&2
  exit 1
fi
exec "$python" "$script" "$@"

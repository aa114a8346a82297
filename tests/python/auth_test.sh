#!/usr/bin/env bash
# Runs the API key test with the clone's .venv-test (the `openai` package;
# tools/setup.sh makes it), found through this script's runfiles link.
set -euo pipefail
root="$(dirname "$(readlink -f tests/python/auth_test.py)")/../.."
python="$root/.venv-test/bin/python"
if [ ! -x "$python" ]; then
  echo "auth_test: $python is missing: run tools/setup.sh" >&2
  exit 1
fi
exec "$python" tests/python/auth_test.py "$@"

#!/usr/bin/env bash
# Runs icemerge's whole test suite. Sets up what the tests need first:
# a Python venv (.venv) with PyIceberg for the interop tests.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import pyiceberg, pyarrow, duckdb, duckdb_extension_avro, duckdb_extension_iceberg" 2>/dev/null; then
  echo "setting up .venv (PyIceberg, pyarrow) for the interop tests..."
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
fi
export ICEMERGE_PYTHON="$PWD/.venv/bin/python"

cargo test --workspace --no-fail-fast "$@"

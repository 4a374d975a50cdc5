#!/usr/bin/env bash
# Runs icemerge's whole test suite. Sets up what the tests need first:
# - a Python venv (.venv) with PyIceberg, DuckDB, moto (an S3-compatible
#   server) and the ADBC Flight SQL driver for the interop, s3:// warehouse
#   and Flight SQL client tests;
# - a throwaway PostgreSQL server on loopback for the Postgres catalog tests
#   (tests/postgres.sh: installs Debian's postgresql if missing, exports
#   ICEMERGE_TEST_POSTGRES_URI, stops and removes the server at exit; an
#   ICEMERGE_TEST_POSTGRES_URI already set is used instead).
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import pyiceberg, pyarrow, duckdb, duckdb_extension_avro, duckdb_extension_iceberg, moto.server, adbc_driver_flightsql, adbc_driver_manager" 2>/dev/null; then
  echo "setting up .venv (PyIceberg, pyarrow, DuckDB, moto, ADBC Flight SQL) for the interop, S3 and Flight SQL tests..."
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
fi
export ICEMERGE_PYTHON="$PWD/.venv/bin/python"

source tests/postgres.sh

cargo test --workspace --no-fail-fast "$@"

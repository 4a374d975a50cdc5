#!/usr/bin/env bash
# Runs icemerge's whole test suite. Sets up what the tests need first:
# - a Python venv (.venv) with PyIceberg, DuckDB, moto (an S3-compatible
#   server) and the ADBC Flight SQL driver for the interop, s3:// warehouse
#   and Flight SQL client tests;
# - a throwaway PostgreSQL server on loopback for the Postgres catalog tests
#   (tests/postgres.sh: installs Debian's postgresql if missing, exports
#   ICEMERGE_TEST_POSTGRES_URI, stops and removes the server at exit; an
#   ICEMERGE_TEST_POSTGRES_URI already set is used instead);
# - Spark 3.5 with Iceberg 1.10 for the Spark interop tests
#   (tests/spark/setup.sh: PySpark from PyPI, the Iceberg runtime jar,
#   Debian's SQLite JDBC driver; cached in $ICEMERGE_SPARK_CACHE, default
#   ${XDG_CACHE_HOME:-~/.cache}/icemerge-spark, so only the first run
#   downloads), exported as ICEMERGE_SPARK_PYTHON / ICEMERGE_SPARK_JARS (an
#   ICEMERGE_SPARK_PYTHON already set is used instead);
# - Debian's chromium for the live page's rendering test (tests/chromium.sh:
#   installed with apt-get when missing, as root; exports
#   ICEMERGE_REQUIRE_CHROMIUM=1 so that test fails rather than skips).
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import pyiceberg, pyarrow, duckdb, duckdb_extension_avro, duckdb_extension_iceberg, moto.server, adbc_driver_flightsql, adbc_driver_manager" 2>/dev/null; then
  echo "setting up .venv (PyIceberg, pyarrow, DuckDB, moto, ADBC Flight SQL) for the interop, S3 and Flight SQL tests..."
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
fi
export ICEMERGE_PYTHON="$PWD/.venv/bin/python"

source tests/postgres.sh
source tests/chromium.sh

if [ -z "${ICEMERGE_SPARK_PYTHON:-}" ]; then
  ICEMERGE_SPARK_CACHE="${ICEMERGE_SPARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/icemerge-spark}"
  tests/spark/setup.sh "$ICEMERGE_SPARK_CACHE"
  export ICEMERGE_SPARK_PYTHON="$ICEMERGE_SPARK_CACHE/venv/bin/python"
  export ICEMERGE_SPARK_JARS="$ICEMERGE_SPARK_CACHE/jars"
fi

cargo test --workspace --no-fail-fast "$@"

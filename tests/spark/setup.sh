#!/usr/bin/env bash
# Installs what icemerge's Spark interop tests run: Spark 3.5 (PySpark from
# PyPI) with Iceberg 1.10's Spark runtime and a SQLite JDBC driver, cached
# outside the clone so that later runs download nothing.
#
#   tests/spark/setup.sh [CACHE_DIR]
#
# CACHE_DIR (default $ICEMERGE_SPARK_CACHE, else
# ${XDG_CACHE_HOME:-~/.cache}/icemerge-spark) receives:
#   venv/   a Python venv with pyspark (Spark's jars and launcher included)
#   jars/   iceberg-spark-runtime-3.5_2.12-<v>.jar, the relocated Jackson that
#           jar refers to (built by relocate_jackson.py) and sqlite-jdbc
# Each step is skipped when its result is already there. Idempotent.
#
# Needs: python3 with venv, Java 17 (as root, Debian's openjdk-17-jre-headless
# is installed when `java` is missing), PyPI, and as root apt-get for Debian's
# libxerial-sqlite-jdbc-java.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${1:-${ICEMERGE_SPARK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/icemerge-spark}}"
venv="$cache/venv"
jars="$cache/jars"
pyspark_version=3.5.9
# The PyPI wheel snowpark-connect-deps-iceberg 1.0.3 carries Iceberg 1.10.2's
# Spark 3.5 runtime jar (nothing else of it is used).
iceberg_wheel="snowpark-connect-deps-iceberg==1.0.3"
iceberg_jar=iceberg-spark-runtime-3.5_2.12-1.10.2.jar

log() { echo "spark for tests: $*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null 2>&1 || {
    as_root apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
  }
}

if ! command -v java >/dev/null; then
  log "installing Debian's openjdk-17-jre-headless (no java on PATH)..."
  apt_install openjdk-17-jre-headless
fi

# 1. PySpark
if ! "$venv/bin/python" -c "import pyspark, sys; sys.exit(pyspark.__version__ != '$pyspark_version')" 2>/dev/null; then
  log "installing pyspark $pyspark_version into $venv..."
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "pyspark==$pyspark_version"
fi

mkdir -p "$jars"

# 2. Iceberg's Spark runtime, taken out of the wheel that carries it
if [ ! -s "$jars/$iceberg_jar" ]; then
  log "fetching $iceberg_jar ($iceberg_wheel)..."
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps -d "$tmp" "$iceberg_wheel"
  "$venv/bin/python" - "$tmp" "$jars" "$iceberg_jar" <<'EOF'
import glob, os, shutil, sys, zipfile
tmp, dest, name = sys.argv[1:]
(wheel,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(wheel) as z:
    (member,) = [m for m in z.namelist() if m.endswith("/" + name)]
    with z.open(member) as src, open(os.path.join(dest, name + ".part"), "wb") as out:
        shutil.copyfileobj(src, out)
os.replace(os.path.join(dest, name + ".part"), os.path.join(dest, name))
EOF
fi

# 3. That runtime jar refers to Jackson under Iceberg's relocated package
#    names without containing it: build those classes from Spark's own Jackson.
spark_jars="$("$venv/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
jackson="$(ls "$spark_jars" | sed -n 's/^jackson-databind-\(.*\)\.jar$/\1/p')"
if [ ! -s "$jars/iceberg-relocated-jackson-$jackson.jar" ]; then
  log "building the relocated Jackson $jackson jar..."
  "$venv/bin/python" "$here/relocate_jackson.py" "$jars/iceberg-relocated-jackson-$jackson.jar" \
    "$spark_jars/jackson-core-$jackson.jar" "$spark_jars/jackson-databind-$jackson.jar" \
    "$spark_jars/jackson-annotations-$jackson.jar" "$spark_jars/jackson-datatype-jsr310-$jackson.jar"
fi

# 4. SQLite JDBC driver (Debian's; its native library is on Java's default path)
if ! dpkg -s libxerial-sqlite-jdbc-java >/dev/null 2>&1; then
  log "installing Debian's libxerial-sqlite-jdbc-java..."
  apt_install libxerial-sqlite-jdbc-java
fi
sqlite_jar="$(dpkg -L libxerial-sqlite-jdbc-java | grep -E '/xerial-sqlite-jdbc-[0-9.]+\.jar$' | head -1)"
[ -n "$sqlite_jar" ] || { log "no sqlite-jdbc jar in libxerial-sqlite-jdbc-java"; exit 1; }
# A link, so that the cache follows the package's upgrades.
ln -sfn "$sqlite_jar" "$jars/sqlite-jdbc.jar"

log "ready in $cache (pyspark $pyspark_version, $iceberg_jar)"

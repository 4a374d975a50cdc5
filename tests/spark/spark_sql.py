#!/usr/bin/env python3
"""Runs Spark SQL statements (Spark 3.5 + Iceberg 1.10) against an Iceberg
JDBC catalog, for icemerge's interop tests, and exits.

  spark_sql.py --warehouse DIR --catalog-name NAME [--jars DIR] < statements.json

stdin: a JSON list of SQL statements, run in order in one Spark session whose
default catalog is NAME: Iceberg's JdbcCatalog on the SQLite database
DIR/catalog.db, warehouse file://DIR. stdout: one JSON line per
statement, {"columns": [...], "rows": [[...], ...]}, values as JSON (decimals,
dates and timestamps as strings). On the first failing statement: a line
{"error": "...", "statement": N} and exit status 1.

The JdbcCatalog runs with its default `jdbc.schema-version` (V0): it creates
the V0 layout in a database without the catalog tables and never alters
existing ones. The process exits after its statements: Iceberg's JdbcCatalog
keeps a read transaction open on SQLite for the life of the session, which
makes every other process's commit to the same file fail with "database is
locked" while it runs.

Jars (--jars, default $ICEMERGE_SPARK_JARS): the Iceberg Spark runtime, the
relocated Jackson it needs, and the SQLite JDBC driver: what tests/spark/setup.sh puts
in its cache.
"""
import argparse
import datetime
import decimal
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def to_json(value):
    if isinstance(value, (decimal.Decimal, datetime.date, datetime.datetime)):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if hasattr(value, "asDict"):
        return {k: to_json(v) for k, v in value.asDict().items()}
    return value


def session(args):
    from pyspark.sql import SparkSession

    jars = sorted(os.path.join(args.jars, j) for j in os.listdir(args.jars) if j.endswith(".jar"))
    for needed in ("iceberg-spark-runtime", "jackson", "sqlite-jdbc"):
        if not any(needed in os.path.basename(j) for j in jars):
            sys.exit(f"spark_sql.py: no {needed} jar in {args.jars}: run tests/spark/setup.sh")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cat = f"spark.sql.catalog.{args.catalog_name}"
    uri = f"jdbc:sqlite:{os.path.join(args.warehouse, 'catalog.db')}"
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("icemerge-interop")
        # On the driver's class path (local mode: one JVM), so that
        # java.sql.DriverManager finds the JDBC driver.
        .config("spark.driver.extraClassPath", ":".join(jars))
        # A short-lived JVM on small data: the C1 compiler alone and the
        # serial collector start Spark in about 60 % of the default's time.
        .config("spark.driver.extraJavaOptions",
                "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
                f"-Dlog4j2.configurationFile=file:{os.path.join(HERE, 'log4j2.properties')}")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", os.path.join(tempfile.gettempdir(), "icemerge-spark-session-catalog"))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(cat, "org.apache.iceberg.spark.SparkCatalog")
        .config(f"{cat}.catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog")
        .config(f"{cat}.uri", uri)
        .config(f"{cat}.warehouse", f"file://{args.warehouse}")
        # another process commits between this runner's calls
        .config(f"{cat}.cache-enabled", "false")
        .config("spark.sql.defaultCatalog", args.catalog_name)
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--catalog-name", required=True)
    ap.add_argument("--jars", default=os.environ.get("ICEMERGE_SPARK_JARS"))
    args = ap.parse_args()
    if not args.jars or not os.path.isdir(args.jars):
        sys.exit("spark_sql.py: no jar directory (--jars or ICEMERGE_SPARK_JARS): run tests/spark/setup.sh")
    args.warehouse = os.path.abspath(args.warehouse)
    statements = json.load(sys.stdin)
    spark = session(args)
    status = 0
    try:
        for index, statement in enumerate(statements):
            try:
                df = spark.sql(statement)
                rows = df.collect()
            except Exception as e:  # noqa: BLE001 - reported to the test
                message = str(e).split("\n\nJVM stacktrace:")[0].strip() or repr(e)
                print(json.dumps({"error": message[:4000], "statement": index}), flush=True)
                status = 1
                break
            print(json.dumps({"columns": df.columns,
                              "rows": [[to_json(v) for v in row] for row in rows]}), flush=True)
    finally:
        spark.stop()
    sys.exit(status)


if __name__ == "__main__":
    main()

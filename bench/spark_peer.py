#!/usr/bin/env python3
"""Spark peer of icemerge-bench: the same MERGE on Spark 3.5 + Iceberg 1.10
(local[2]) over the same data, in one warm session.

  spark_peer.py --jars DIR --target DIR --source FILE --mode cow|mor --sql SQL

The target Parquet files are loaded in name order, one INSERT each (so the
Iceberg table has one data file per target file, as icemerge's has), into a
table of a Hadoop catalog in a temporary directory: copy-on-write (Iceberg's
default) or merge-on-read ('write.merge.mode' = 'merge-on-read', format
version 2). The session is warmed first: the same MERGE runs once on a
table loaded from the first target file only. Then the MERGE (SQL into
`bench.db.t AS t`, source view `src`) and a `SELECT count(*)` of the result
are timed. Prints one JSON line, the shape of peers.py's:
{"peer", "case", "merge_seconds", "rows_after", "metrics"}.

Jars: the Iceberg Spark runtime and the relocated Jackson it needs (what
tests/spark/setup.sh caches).
"""
import argparse
import glob
import json
import os
import sys
import tempfile
import time

PROPERTIES = {
    "cow": "'format-version' = '2'",
    "mor": "'format-version' = '2', 'write.merge.mode' = 'merge-on-read'",
}


def session(jars, warehouse):
    from pyspark.sql import SparkSession

    paths = sorted(os.path.join(jars, j) for j in os.listdir(jars) if j.endswith(".jar"))
    for needed in ("iceberg-spark-runtime", "jackson"):
        if not any(needed in os.path.basename(j) for j in paths):
            sys.exit(f"spark_peer.py: no {needed} jar in {jars}: run tests/spark/setup.sh")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    cat = "spark.sql.catalog.bench"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("icemerge-bench-peer")
        .config("spark.driver.extraClassPath", ":".join(paths))
        .config("spark.driver.memory", "4g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", os.path.join(warehouse, "spark-warehouse"))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(cat, "org.apache.iceberg.spark.SparkCatalog")
        .config(f"{cat}.type", "hadoop")
        .config(f"{cat}.warehouse", f"file://{warehouse}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def load(spark, name, files, mode):
    spark.sql(f"DROP TABLE IF EXISTS bench.db.{name}")
    first = spark.read.parquet(files[0])
    first.createOrReplaceTempView("load_file")
    spark.sql(
        f"CREATE TABLE bench.db.{name} USING iceberg TBLPROPERTIES ({PROPERTIES[mode]}) "
        "AS SELECT * FROM load_file"
    )
    for f in files[1:]:
        spark.read.parquet(f).createOrReplaceTempView("load_file")
        spark.sql(f"INSERT INTO bench.db.{name} SELECT * FROM load_file")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jars", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--mode", required=True, choices=sorted(PROPERTIES))
    ap.add_argument("--sql", required=True, help="the MERGE into bench.db.t AS t USING src AS s")
    ap.add_argument("--case", default="")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.target, "*.parquet")))
    if not files:
        sys.exit(f"no .parquet files in {a.target}")
    warehouse = tempfile.mkdtemp(prefix="spark-peer-")
    spark = session(a.jars, warehouse)
    try:
        spark.sql("CREATE NAMESPACE IF NOT EXISTS bench.db")
        spark.read.parquet(a.source).createOrReplaceTempView("src")
        # Warm-up: the same statement on a one-file table.
        load(spark, "t", files[:1], a.mode)
        spark.sql(a.sql).collect()
        spark.sql("SELECT count(*) FROM bench.db.t").collect()
        load(spark, "t", files, a.mode)
        t0 = time.perf_counter()
        spark.sql(a.sql).collect()
        secs = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows = spark.sql("SELECT count(*) FROM bench.db.t").collect()[0][0]
        count_secs = time.perf_counter() - t0
        files_after = spark.sql(
            "SELECT content, count(*) FROM bench.db.t.files GROUP BY content"
        ).collect()
        metrics = {
            "mode": a.mode,
            "count_seconds": round(count_secs, 4),
            "files_by_content": {str(r[0]): r[1] for r in files_after},
        }
        print(json.dumps({"peer": f"spark_{a.mode}", "case": a.case, "merge_seconds": round(secs, 4),
                          "rows_after": rows, "metrics": metrics}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()

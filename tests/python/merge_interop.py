#!/usr/bin/env python3
"""Peers' view of a table icemerge MERGEd into, for icemerge's interop tests.

Both actions open the same SQLite catalog icemerge uses (catalog name
"icemerge", database <warehouse>/catalog.db, warehouse file://<warehouse>).

  pyiceberg --warehouse W --table ns.t   prints {"rows": [...sorted by id...],
                                          "operation": <current snapshot's operation>,
                                          "snapshot_id": <current snapshot id>,
                                          "entries": [{"status", "file_path",
                                                       "snapshot_id", "sequence_number"}...],
                                          "files": [live data file paths],
                                          "partitions": [{"partition", "record_count"}
                                                         of every live data file]}
  duckdb    --warehouse W --table ns.t   reads the table's current metadata JSON with
                                          DuckDB's iceberg_scan (extensions loaded
                                          offline from the installed PyPI packages)
                                          and prints {"rows": [...sorted by id...]}

Entry status is Iceberg's manifest entry status: 0 existing, 1 added, 2 deleted.
"""
import argparse
import glob
import importlib
import json
import os
import sqlite3

from pyiceberg_interop import catalog, jsonable

CATALOG = "icemerge"


def split_table(name):
    ns, _, table = name.rpartition(".")
    return ns, table


def pyiceberg_view(args):
    table = catalog(args.warehouse).load_table(args.table)
    rows = table.scan().to_arrow().to_pylist()
    rows = sorted(
        ({k: jsonable(v) for k, v in r.items()} for r in rows),
        key=lambda r: r["id"],
    )
    snapshot = table.current_snapshot()
    operation = snapshot.summary.operation.value if snapshot and snapshot.summary else None
    entries = [
        {
            "status": e["status"],
            "file_path": e["data_file"]["file_path"],
            "content": e["data_file"]["content"],
            "snapshot_id": e["snapshot_id"],
            "sequence_number": e["sequence_number"],
        }
        for e in table.inspect.entries().to_pylist()
    ]
    live = [f for f in table.inspect.files().to_pylist() if f["content"] == 0]
    files = sorted(f["file_path"] for f in live)
    partitions = sorted(
        (
            {
                "partition": {k: jsonable(v) for k, v in (f["partition"] or {}).items()},
                "record_count": f["record_count"],
            }
            for f in live
        ),
        key=lambda p: json.dumps(p, sort_keys=True),
    )
    print(
        json.dumps(
            {
                "rows": rows,
                "operation": operation,
                "snapshot_id": snapshot.snapshot_id if snapshot else None,
                "entries": entries,
                "files": files,
                "partitions": partitions,
            },
            sort_keys=True,
        )
    )


def extension_path(package, name, duckdb_version):
    """The `<name>.duckdb_extension` file a duckdb-extension-* wheel ships.

    The wheels carry no helper: the file sits at
    <package>/extensions/v<duckdb version>/<name>.duckdb_extension.
    """
    root = os.path.dirname(importlib.import_module(package).__file__)
    exact = os.path.join(root, "extensions", f"v{duckdb_version}", f"{name}.duckdb_extension")
    if os.path.exists(exact):
        return exact
    found = sorted(glob.glob(os.path.join(root, "extensions", "*", f"{name}.duckdb_extension")))
    if not found:
        raise SystemExit(f"{package}: no {name}.duckdb_extension under {root}")
    return found[-1]


def metadata_location(warehouse, table):
    ns, name = split_table(table)
    con = sqlite3.connect(os.path.join(warehouse, "catalog.db"))
    try:
        row = con.execute(
            "SELECT metadata_location FROM iceberg_tables "
            "WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
            (CATALOG, ns, name),
        ).fetchone()
    finally:
        con.close()
    if row is None:
        raise SystemExit(f"{table}: not in catalog {CATALOG}")
    loc = row[0]
    return loc[len("file://"):] if loc.startswith("file://") else loc


def duckdb_view(args):
    import duckdb

    warehouse = os.path.abspath(args.warehouse)
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    version = duckdb.__version__
    con.execute(f"LOAD '{extension_path('duckdb_extension_avro', 'avro', version)}'")
    con.execute(f"LOAD '{extension_path('duckdb_extension_iceberg', 'iceberg', version)}'")
    meta = metadata_location(warehouse, args.table)
    cur = con.execute("SELECT * FROM iceberg_scan(?) ORDER BY id", [meta])
    cols = [d[0] for d in cur.description]
    rows = [{c: jsonable(v) for c, v in zip(cols, r)} for r in cur.fetchall()]
    print(json.dumps({"rows": rows, "metadata": meta}, sort_keys=True))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["pyiceberg", "duckdb"])
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--table", required=True)
    a = ap.parse_args()
    {"pyiceberg": pyiceberg_view, "duckdb": duckdb_view}[a.action](a)

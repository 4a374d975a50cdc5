#!/usr/bin/env python3
"""PyIceberg side of icemerge's interop tests.

Opens the same SQLite catalog icemerge uses (catalog name "icemerge" unless
--catalog-name says otherwise, database <warehouse>/catalog.db) and either
reads a table back as JSON rows or creates and appends to a table for
icemerge to read.

  read   --warehouse W --table ns.t            prints {"rows": [...], "snapshots": N,
                                                "format_version": V, "sort_order":
                                                [{"column", "direction", "null_order"}]}
  create --warehouse W --table ns.t            creates ns.t (id long, name string,
                                                amount decimal(10,2), day date) and
                                                appends two batches
  set-property --warehouse W --table ns.t --key K --value V
                                               sets table property K to V (one commit)
"""
import argparse
import datetime
import decimal
import json
import os

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog


def catalog(warehouse, name="icemerge"):
    warehouse = os.path.abspath(warehouse)
    return SqlCatalog(
        name,
        uri=f"sqlite:///{warehouse}/catalog.db",
        warehouse=f"file://{warehouse}",
    )


def jsonable(v):
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


def read(args):
    table = catalog(args.warehouse, args.catalog_name).load_table(args.table)
    rows = table.scan().to_arrow().to_pylist()
    rows = [{k: jsonable(v) for k, v in r.items()} for r in rows]
    schema = table.schema()
    sort_order = [
        {"column": schema.find_column_name(f.source_id),
         "direction": str(f.direction.value), "null_order": str(f.null_order.value)}
        for f in table.sort_order().fields
    ]
    print(json.dumps({"rows": rows, "snapshots": len(table.metadata.snapshots),
                      "format_version": table.metadata.format_version,
                      "sort_order": sort_order}, sort_keys=True))


def create(args):
    cat = catalog(args.warehouse)
    ns = args.table.split(".")[0]
    if (ns,) not in cat.list_namespaces():
        cat.create_namespace(ns)
    schema = pa.schema([
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("day", pa.date32()),
    ])
    table = cat.create_table(args.table, schema=schema)
    table.append(pa.Table.from_pylist([
        {"id": 1, "name": "py-one", "amount": decimal.Decimal("1.50"), "day": datetime.date(2024, 1, 1)},
        {"id": 2, "name": None, "amount": None, "day": None},
    ], schema=schema))
    table.append(pa.Table.from_pylist([
        {"id": 3, "name": "py-three", "amount": decimal.Decimal("-3.25"), "day": datetime.date(2023, 12, 31)},
    ], schema=schema))
    print(json.dumps({"created": args.table}))


def set_property(args):
    table = catalog(args.warehouse, args.catalog_name).load_table(args.table)
    with table.transaction() as tx:
        tx.set_properties({args.key: args.value})
    print(json.dumps({"set": {args.key: args.value}}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["read", "create", "set-property"])
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--catalog-name", default="icemerge")
    ap.add_argument("--key")
    ap.add_argument("--value")
    a = ap.parse_args()
    {"read": read, "create": create, "set-property": set_property}[a.action](a)

"""Browses and queries an icemerge-scheduler's Flight SQL port the way BI
tools do, with the ADBC Flight SQL driver: the catalog's metadata calls
(adbc_get_objects, adbc_get_table_schema, adbc_get_table_types) and
prepared statements with parameters (a query, a MERGE, an INSERT run once
per row of values, a statement given the wrong number of values), and
what preparing reports before a run (parameter types, a query's result
schema).

usage: flight_sql_tools.py URI TOKEN
Prints one JSON object on the last line.
"""

import json
import sys
from decimal import Decimal

import adbc_driver_flightsql.dbapi as flight_sql
from adbc_driver_flightsql import DatabaseOptions


def tables_of(objects):
    """{schema: {table: (type, [columns])}} from adbc_get_objects."""
    found = {}
    for catalog in objects:
        for schema in catalog["catalog_db_schemas"] or []:
            tables = found.setdefault(schema["db_schema_name"], {})
            for table in schema["db_schema_tables"] or []:
                columns = [c["column_name"] for c in table["table_columns"] or []]
                tables[table["table_name"]] = [table["table_type"], columns]
    return found


def main():
    uri, token = sys.argv[1], sys.argv[2]
    result = {}
    with flight_sql.connect(
        uri,
        db_kwargs={DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {token}"},
    ) as conn, conn.cursor() as cur:
        cur.execute("CREATE SCHEMA tools")
        cur.execute(
            "CREATE TABLE tools.orders (id BIGINT, amount DECIMAL(10, 2), note VARCHAR)"
        )
        cur.execute("CREATE TABLE tools.order_lines (order_id BIGINT, qty INT)")

        objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
        result["catalogs"] = sorted(c["catalog_name"] for c in objects)
        result["objects"] = tables_of(objects)
        lines = conn.adbc_get_objects(
            depth="tables", db_schema_filter="tools", table_name_filter="%lines"
        )
        result["filtered"] = tables_of(lines.read_all().to_pylist())
        schema = conn.adbc_get_table_schema("orders", db_schema_filter="tools")
        result["orders_schema"] = [[f.name, str(f.type)] for f in schema]
        result["table_types"] = sorted(conn.adbc_get_table_types())

        cur.executemany(
            "INSERT INTO tools.orders VALUES (?, ?, ?)",
            [(1, Decimal("12.50"), "it's"), (2, Decimal("7.25"), "plain")],
        )
        result["insert_rowcount"] = cur.rowcount
        cur.execute(
            "SELECT id, note FROM tools.orders WHERE amount > $1 AND note <> $2",
            (Decimal("10.00"), "plain"),
        )
        result["query"] = cur.fetch_arrow_table().to_pylist()
        cur.execute(
            "MERGE INTO tools.orders USING (SELECT ? AS id, ? AS note) s "
            "ON orders.id = s.id WHEN MATCHED THEN UPDATE SET note = s.note "
            "WHEN NOT MATCHED THEN INSERT (id, amount, note) VALUES (s.id, 0, s.note)",
            (2, "merged"),
        )
        result["merge"] = cur.fetch_arrow_table().to_pylist()
        try:
            cur.execute("SELECT * FROM tools.orders WHERE id = ? AND note = ?", (1,))
            cur.fetchall()
            result["wrong_count"] = "accepted"
        except Exception as e:  # the driver's error type varies by version
            result["wrong_count"] = str(e)
        cur.execute(
            "SELECT id, CAST(amount AS VARCHAR) AS amount, note FROM tools.orders ORDER BY id"
        )
        result["rows"] = cur.fetch_arrow_table().to_pylist()

        # What preparing reports before a run: parameter types where the
        # statement implies them, a query's result schema.
        def fields(schema):
            return [[f.name, str(f.type)] for f in schema] if schema is not None else None

        result["described_query_parameters"] = fields(
            cur.adbc_prepare("SELECT id, note FROM tools.orders WHERE amount > ? AND note = ?")
        )
        doubled = "SELECT id, amount * 2 AS doubled FROM tools.orders WHERE id = ?"
        result["described_query_rows"] = fields(cur.adbc_execute_schema(doubled))
        cur.execute(doubled, (1,))
        result["ran_query_rows"] = fields(cur.fetch_arrow_table().schema)
        result["described_insert_parameters"] = fields(
            cur.adbc_prepare("INSERT INTO tools.order_lines VALUES ($2, $1)")
        )
        result["described_merge_parameters"] = fields(
            cur.adbc_prepare(
                "MERGE INTO tools.orders USING (SELECT ? AS id) s ON orders.id = s.id "
                "WHEN MATCHED THEN DELETE"
            )
        )
        cur.execute("SELECT count(*) AS n FROM tools.order_lines")
        result["order_lines_after_describe"] = cur.fetch_arrow_table().to_pylist()
    print(json.dumps(result))


if __name__ == "__main__":
    main()

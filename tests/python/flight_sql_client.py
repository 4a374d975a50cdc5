"""Talks to an icemerge-scheduler's Flight SQL port with the ADBC Flight SQL
driver (a real third-party client): DDL, INSERT and MERGE as queries, a MERGE
as an update (DoPut), a SELECT; and a call with a wrong token.

usage: flight_sql_client.py URI TOKEN
Prints one JSON object on the last line.
"""

import json
import sys

import adbc_driver_flightsql.dbapi as flight_sql
from adbc_driver_flightsql import DatabaseOptions


def connect(uri, token):
    return flight_sql.connect(
        uri,
        db_kwargs={DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {token}"},
    )


def main():
    uri, token = sys.argv[1], sys.argv[2]
    result = {}
    with connect(uri, token) as conn, conn.cursor() as cur:
        cur.execute("CREATE SCHEMA py")
        cur.execute("CREATE TABLE py.t (id BIGINT, v BIGINT)")
        cur.execute("INSERT INTO py.t SELECT value, 0 FROM generate_series(1, 100)")
        result["insert"] = cur.fetch_arrow_table().to_pylist()
        cur.execute(
            "MERGE INTO py.t USING (SELECT value AS id FROM generate_series(91, 110)) s "
            "ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = 1 "
            "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, 2)"
        )
        merge = cur.fetch_arrow_table()
        result["merge_columns"] = merge.column_names
        result["merge"] = merge.to_pylist()
        stmt = cur.adbc_statement
        stmt.set_sql_query(
            "MERGE INTO py.t USING (SELECT value AS id FROM generate_series(1, 5)) s "
            "ON t.id = s.id WHEN MATCHED THEN DELETE"
        )
        result["merge_update_count"] = stmt.execute_update()
        cur.execute("SELECT v, count(*) AS n FROM py.t GROUP BY v ORDER BY v")
        result["rows"] = cur.fetch_arrow_table().to_pylist()
    try:
        with connect(uri, token + "-wrong") as conn, conn.cursor() as cur:
            cur.execute("DROP TABLE py.t")
            cur.fetchall()
        result["wrong_token"] = "accepted"
    except Exception as e:  # the driver's error type varies by version
        result["wrong_token"] = str(e)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

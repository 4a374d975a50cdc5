-- icemerge quickstart: create an Iceberg table, load it, MERGE into it,
-- query it, and look at what each statement committed. Safe to run again:
-- it starts over.

CREATE SCHEMA IF NOT EXISTS demo;
DROP TABLE IF EXISTS demo.customers;

CREATE TABLE demo.customers (
  id        BIGINT NOT NULL,
  name      STRING,
  country   STRING,
  balance   DECIMAL(12, 2),
  signed_up DATE
) PARTITIONED BY (country);

INSERT INTO demo.customers VALUES
  (1, 'Ada',     'UK', 120.50, DATE '2024-01-15'),
  (2, 'Grace',   'US',  80.00, DATE '2024-02-01'),
  (3, 'Linus',   'FI', 310.25, DATE '2024-03-10'),
  (4, 'Barbara', 'US',  15.75, DATE '2024-03-22');

INSERT INTO demo.customers VALUES
  (5, 'Edsger',  'NL', 999.99, DATE '2024-04-01');

SELECT * FROM demo.customers ORDER BY id;

-- The stage graph of an upsert: target scan (row-id), source scan,
-- join/classify, copy-on-write writer, commit.
EXPLAIN MERGE INTO demo.customers AS c
USING (VALUES (2, 'Grace', 'US', 95.00), (4, NULL, NULL, NULL), (6, 'Alan', 'UK', 42.00))
      AS s(id, name, country, balance)
ON c.id = s.id
WHEN MATCHED AND s.name IS NULL THEN DELETE
WHEN MATCHED THEN UPDATE SET balance = s.balance
WHEN NOT MATCHED THEN INSERT (id, name, country, balance, signed_up)
  VALUES (s.id, s.name, s.country, s.balance, DATE '2024-05-01');

-- Update Grace, delete Barbara, insert Alan: one snapshot.
MERGE INTO demo.customers AS c
USING (VALUES (2, 'Grace', 'US', 95.00), (4, NULL, NULL, NULL), (6, 'Alan', 'UK', 42.00))
      AS s(id, name, country, balance)
ON c.id = s.id
WHEN MATCHED AND s.name IS NULL THEN DELETE
WHEN MATCHED THEN UPDATE SET balance = s.balance
WHEN NOT MATCHED THEN INSERT (id, name, country, balance, signed_up)
  VALUES (s.id, s.name, s.country, s.balance, DATE '2024-05-01');

SELECT * FROM demo.customers ORDER BY id;

SELECT country, count(*) AS customers, sum(balance) AS balance
FROM demo.customers GROUP BY country ORDER BY country;

-- One snapshot per INSERT, one for the MERGE.
SELECT snapshot_id, parent_id, operation, summary['added-records'] AS added_records
FROM demo."customers$snapshots" ORDER BY committed_at;

-- One data file per partition written.
SELECT partition, record_count, file_size_in_bytes
FROM demo."customers$files" ORDER BY partition;

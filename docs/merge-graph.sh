#!/usr/bin/env bash
# Draws docs/merge-graph.svg: the README quickstart's MERGE run on a
# cluster of processes (an icemerge-scheduler and two icemerge-executors on
# loopback) through `icemerge --scheduler`, as
# `EXPLAIN ANALYZE (FORMAT SVG) MERGE ...` draws it — the stage graph the
# scheduler's live page shows; with chromium installed, also
# docs/live-page.png, a screenshot of that statement's live page. Run from
# the repository root after `cargo build --workspace` (BIN defaults to
# target/debug).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-${CARGO_TARGET_DIR:-target}/debug}"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

"$BIN/icemerge-scheduler" --port 0 --flight-sql-port 0 --ui-port 0 --target-partitions 4 \
  --warehouse "$work/warehouse" >"$work/scheduler.out" 2>"$work/scheduler.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/scheduler.out" ] && break; sleep 0.1; done
read -r _ _ ballista _ flight _ ui <"$work/scheduler.out"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for i in 1 2; do
  "$BIN/icemerge-executor" --scheduler "$ballista" --port "$(free_port)" --grpc-port "$(free_port)" \
    --task-slots 2 --work-dir "$work/ex$i" 2>"$work/executor$i.log" &
  pids+=($!)
done
sleep 3

merge="$(sed -n '/^-- Update Grace/,/^  VALUES/p' examples/quickstart.sql | grep -v '^--')"
"$BIN/icemerge" --scheduler "$flight" -q -c "
CREATE SCHEMA IF NOT EXISTS demo;
$(sed -n '/^CREATE TABLE demo.customers/,/^  (5, /p' examples/quickstart.sql)" >/dev/null
"$BIN/icemerge" --scheduler "$flight" -q -c "EXPLAIN ANALYZE (FORMAT SVG) $merge" >docs/merge-graph.svg
echo "wrote docs/merge-graph.svg ($(grep -c '<g class="stage"' docs/merge-graph.svg) stages)"

if command -v chromium >/dev/null 2>&1; then
  id="$(python3 -c 'import json, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1]))["statements"][0]["id"])' "${ui}statements.json")"
  chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars \
    --user-data-dir="$work/chromium" --window-size=1400,1250 --screenshot="$work/live-page.png" \
    "${ui}statements/$id" 2>/dev/null
  cp "$work/live-page.png" docs/live-page.png
  echo "wrote docs/live-page.png (statement $id of the live page)"
fi

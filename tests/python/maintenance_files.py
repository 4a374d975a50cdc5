#!/usr/bin/env python3
"""PyIceberg's view of the files a table's snapshots reach, for icemerge's
maintenance tests.

  reach --warehouse W --table ns.t   prints {"snapshots": [ids], "manifest_lists": [...],
                                     "manifests": [...], "content_files": [...],
                                     "rows": {"<snapshot id>": row count}}

Content files are the live (added or existing) entries of every manifest of
every snapshot: what a reader of any retained snapshot may open.

  manifests --warehouse W --table ns.t
                                     prints {"operation": ..., "summary": {...},
                                     "manifests": [{"content": 0|1, "spec_id": ...,
                                     "length": bytes, "entries": [{"status": ...,
                                     "path": ..., "content": ..., "partition": [...],
                                     "snapshot_id": ..., "sequence_number": ...,
                                     "file_sequence_number": ...}]}]}
                                     of the current snapshot
"""
import argparse
import json
import os

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import ManifestEntryStatus


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["reach", "manifests"])
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--table", required=True)
    args = parser.parse_args()
    warehouse = os.path.abspath(args.warehouse)
    catalog = SqlCatalog(
        "icemerge",
        uri=f"sqlite:///{warehouse}/catalog.db",
        warehouse=f"file://{warehouse}",
    )
    table = catalog.load_table(args.table)
    io = table.io
    if args.command == "manifests":
        print(json.dumps(current_manifests(table), default=str))
        return
    lists, manifests, content, rows = set(), set(), set(), {}
    for snapshot in table.metadata.snapshots:
        lists.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                if entry.status != ManifestEntryStatus.DELETED:
                    content.add(entry.data_file.file_path)
        rows[str(snapshot.snapshot_id)] = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().num_rows
    print(json.dumps({
        "snapshots": [s.snapshot_id for s in table.metadata.snapshots],
        "manifest_lists": sorted(lists),
        "manifests": sorted(manifests),
        "content_files": sorted(content),
        "rows": rows,
    }))


def current_manifests(table):
    io = table.io
    snapshot = table.current_snapshot()
    out = []
    for manifest in snapshot.manifests(io):
        entries = []
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            entries.append({
                "status": entry.status.name,
                "path": entry.data_file.file_path,
                "content": int(entry.data_file.content),
                "partition": [str(v) for v in entry.data_file.partition],
                "snapshot_id": entry.snapshot_id,
                "sequence_number": entry.sequence_number,
                "file_sequence_number": entry.file_sequence_number,
            })
        out.append({
            "content": int(manifest.content),
            "spec_id": manifest.partition_spec_id,
            "length": manifest.manifest_length,
            "entries": entries,
        })
    summary = snapshot.summary
    return {
        "operation": summary.operation.value,
        "summary": {k: v for k, v in summary.additional_properties.items()},
        "manifests": out,
    }


if __name__ == "__main__":
    main()

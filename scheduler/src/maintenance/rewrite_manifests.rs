//! `rewrite_manifests(table, use_caching, spec_id)` and Trino's
//! `ALTER TABLE t EXECUTE optimize_manifests`: the current snapshot's
//! manifests regrouped, by content and partition spec and clustered by
//! partition, into manifests of the table's
//! `commit.manifest.target-size-bytes`, committed as one `replace`
//! snapshot by `commit/manifest_rewrite.rs` (which owns the rules). No data
//! file is read or written. `use_caching` has no effect (icemerge caches no
//! manifests). Output: `rewritten_manifests_count` (manifests replaced),
//! `added_manifests_count` (manifests written); both 0 when nothing was
//! worth rewriting and nothing was committed.

use datafusion::error::Result;
use iceberg::TableIdent;

use super::long_row;
use crate::commit::commit_manifest_rewrite;
use crate::session::{Session, StatementOutput};

/// Rewrites `ident`'s manifests (of partition spec `spec_id` only, when given).
pub async fn rewrite_manifests(
    session: &Session,
    ident: &TableIdent,
    spec_id: Option<i32>,
) -> Result<StatementOutput> {
    let pause_dir = session.icemerge_options().test_pause_before_commit;
    let catalog = session.open_catalog();
    let counts = commit_manifest_rewrite(catalog, ident, spec_id, pause_dir.as_deref()).await?;
    Ok(long_row(&[
        ("rewritten_manifests_count", Some(counts.replaced as i64)),
        ("added_manifests_count", Some(counts.added as i64)),
    ]))
}

//! The physical plan codec that ships icemerge operators between coordinator,
//! scheduler and executors. Our nodes are wrapped in `icemerge_proto`
//! messages behind a magic prefix; everything else is Ballista's (shuffle
//! reader / writer) or DataFusion's, through Ballista's codec. Our
//! expressions travel behind prefixes of their own, their children as the
//! expression's children: checked arithmetic as its operator, the writer
//! route as its writers and each data file's writer (JSON); our functions
//! (checked `sum`, the insert route) travel as markers.

use std::sync::Arc;

use arrow::datatypes::Schema;
use ballista_core::serde::BallistaPhysicalExtensionCodec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{AggregateUDF, ScalarUDF, WindowUDF};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::PhysicalExtensionCodec;
use std::collections::HashMap;

use iceberg::scan::{FileScanTask, FileScanTaskDeleteFile};
use icemerge_proto::{
    physical_node::Node, BatchSlicesNode, FileIoProps, PhysicalNode, ScanNode, ScanTaskGroup,
    SortChangesByFileNode, StageProbeNode, WriteNode,
};
use prost::Message;

use crate::batch_slices::BatchSlicesExec;
use crate::checked_arithmetic::CheckedArithmeticExpr;
use crate::checked_sum::{CheckedSum, CHECKED_SUM_MARK};
use crate::file_io::{secrets_of, without_secrets};
use crate::insert_route::{InsertRoute, INSERT_ROUTE_MARK};
use crate::merge_on_read::MergeOnReadWriterExec;
use crate::merge_writer::{
    CopyOnWriteWriterExec, FileOrdinals, SortChangesByFileExec, TargetFiles,
};
use crate::scan_exec::IcebergScanExec;
use crate::stage_probe::StageProbeExec;
use crate::write_exec::IcebergWriteExec;
use crate::writer_route::WriterRouteExpr;
use icemerge_proto::error::internal;

const MAGIC: &[u8] = b"ICEMERGE1";
const CHECKED_ARITHMETIC: &[u8] = b"ICEMERGE1-CHECKED:";
const WRITER_ROUTE: &[u8] = b"ICEMERGE1-WRITER-ROUTE:";

/// A writer route in a shipped plan.
#[derive(serde::Serialize, serde::Deserialize)]
struct WriterRouteNode {
    writers: usize,
    assigned: Vec<(String, usize)>,
}

/// Encodes icemerge operators; delegates all others to Ballista's codec.
/// Storage secrets are left out of every node it encodes; the credentials
/// it holds (this process's own) are added to every node it decodes.
#[derive(Default)]
pub struct IcemergePhysicalCodec {
    fallback: BallistaPhysicalExtensionCodec,
    credentials: HashMap<String, String>,
}

impl std::fmt::Debug for IcemergePhysicalCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut keys: Vec<_> = self.credentials.keys().collect();
        keys.sort();
        f.debug_struct("IcemergePhysicalCodec")
            .field("credentials", &keys)
            .finish()
    }
}

impl IcemergePhysicalCodec {
    /// A codec that gives decoded plans these storage credentials (the
    /// secret `FileIO` properties, `file_io::SECRET_PROPS`).
    pub fn with_credentials(credentials: HashMap<String, String>) -> Self {
        Self {
            fallback: BallistaPhysicalExtensionCodec::default(),
            credentials: secrets_of(&credentials),
        }
    }

    /// A plan's storage properties with this process's credentials.
    fn with_own_credentials(&self, props: Option<FileIoProps>) -> HashMap<String, String> {
        let mut props = props.map(|p| p.props).unwrap_or_default();
        props.extend(self.credentials.clone());
        props
    }
}

/// Storage properties as a plan carries them: no secrets.
fn shipped(props: &HashMap<String, String>) -> Option<FileIoProps> {
    Some(FileIoProps {
        props: without_secrets(props),
    })
}

fn encode_schema(schema: &Schema) -> Result<Vec<u8>> {
    let proto: datafusion_proto::protobuf::Schema = schema.try_into()?;
    Ok(proto.encode_to_vec())
}

fn decode_schema(bytes: &[u8]) -> Result<Schema> {
    let proto = datafusion_proto::protobuf::Schema::decode(bytes)
        .map_err(|e| internal(format!("bad schema in plan: {e}")))?;
    Ok((&proto).try_into()?)
}

fn json_err(e: serde_json::Error) -> DataFusionError {
    internal(format!("plan serialization: {e}"))
}

type WriterParts = (
    String,
    Arc<iceberg::spec::TableMetadata>,
    std::collections::HashMap<String, String>,
    String,
    Arc<dyn ExecutionPlan>,
);

/// The fields both writers are built from.
fn writer_parts(
    codec: &IcemergePhysicalCodec,
    write: WriteNode,
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Result<WriterParts> {
    let input = only_input(inputs, &format!("writer of {}", write.table))?;
    let metadata = serde_json::from_str(&write.table_metadata_json).map_err(json_err)?;
    let props = codec.with_own_credentials(write.file_io);
    Ok((
        write.table,
        Arc::new(metadata),
        props,
        write.write_id,
        input,
    ))
}

/// The merge writer's target files, taken out of its message.
fn decode_targets(write: &mut WriteNode) -> Result<TargetFiles> {
    let deletes = std::mem::take(&mut write.file_deletes_json)
        .into_iter()
        .map(|(path, json)| {
            let files: Vec<FileScanTaskDeleteFile> =
                serde_json::from_str(&json).map_err(json_err)?;
            Ok((path, files))
        })
        .collect::<Result<HashMap<_, _>>>()?;
    Ok(TargetFiles {
        rows: Arc::new(std::mem::take(&mut write.file_rows)),
        deletes: Arc::new(deletes),
    })
}

fn encode_deletes(targets: &TargetFiles) -> Result<HashMap<String, String>> {
    targets
        .deletes
        .iter()
        .map(|(path, files)| {
            Ok((
                path.clone(),
                serde_json::to_string(files).map_err(json_err)?,
            ))
        })
        .collect()
}

/// The one input of a decoded single-input operator.
fn only_input(inputs: &[Arc<dyn ExecutionPlan>], operator: &str) -> Result<Arc<dyn ExecutionPlan>> {
    inputs
        .first()
        .cloned()
        .ok_or_else(|| internal(format!("{operator} without input")))
}

impl PhysicalExtensionCodec for IcemergePhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(body) = buf.strip_prefix(MAGIC) else {
            return self.fallback.try_decode(buf, inputs, ctx);
        };
        let node = PhysicalNode::decode(body)
            .map_err(|e| internal(format!("bad icemerge plan node: {e}")))?;
        match node.node {
            Some(Node::Scan(scan)) => {
                let groups = scan
                    .groups
                    .iter()
                    .map(|g| {
                        g.tasks_json
                            .iter()
                            .map(|t| serde_json::from_str::<FileScanTask>(t).map_err(json_err))
                            .collect::<Result<Vec<_>>>()
                    })
                    .collect::<Result<Vec<_>>>()?;
                let exec = IcebergScanExec::new(
                    scan.table,
                    Arc::new(decode_schema(&scan.schema)?),
                    self.with_own_credentials(scan.file_io),
                    groups,
                    scan.files_pruned,
                    scan.predicate,
                    scan.limit.map(|l| l as usize),
                )
                .with_dynamic_predicate(scan.dynamic_predicate);
                Ok(Arc::new(if scan.merge_target || scan.row_ids {
                    exec.as_merge_target(scan.row_ids)
                } else {
                    exec
                }))
            }
            Some(Node::Write(write)) => {
                let (table, metadata, props, write_id, input) = writer_parts(self, write, inputs)?;
                Ok(Arc::new(IcebergWriteExec::new(
                    table, metadata, props, write_id, input,
                )))
            }
            Some(Node::MergeWrite(mut write)) => {
                let targets = decode_targets(&mut write)?;
                let (table, metadata, props, write_id, input) = writer_parts(self, write, inputs)?;
                Ok(Arc::new(
                    CopyOnWriteWriterExec::new(table, metadata, props, write_id, input)
                        .with_targets(targets),
                ))
            }
            Some(Node::MergeOnReadWrite(write)) => {
                let (table, metadata, props, write_id, input) = writer_parts(self, write, inputs)?;
                Ok(Arc::new(MergeOnReadWriterExec::new(
                    table, metadata, props, write_id, input,
                )))
            }
            Some(Node::StageProbe(probe)) => {
                let input = only_input(inputs, "stage probe")?;
                Ok(Arc::new(StageProbeExec::new(probe.stage as usize, input)))
            }
            Some(Node::SortChangesByFile(SortChangesByFileNode { files })) => {
                let input = only_input(inputs, "sort of changes")?;
                let files = Arc::new(FileOrdinals::new(files)?);
                Ok(Arc::new(SortChangesByFileExec::try_new(input, files)?))
            }
            Some(Node::BatchSlices(BatchSlicesNode {})) => {
                let input = only_input(inputs, "batch slices")?;
                Ok(Arc::new(BatchSlicesExec::new(input)))
            }
            None => Err(internal("empty icemerge plan node")),
        }
    }

    fn try_encode(&self, node: Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Result<()> {
        let message = if let Some(scan) = node.as_any().downcast_ref::<IcebergScanExec>() {
            let groups = scan
                .groups
                .iter()
                .map(|g| {
                    Ok(ScanTaskGroup {
                        tasks_json: g
                            .iter()
                            .map(|t| serde_json::to_string(t).map_err(json_err))
                            .collect::<Result<Vec<_>>>()?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Node::Scan(ScanNode {
                table: scan.table.clone(),
                schema: encode_schema(&scan.schema)?,
                file_io: shipped(&scan.file_io_props),
                groups,
                files_pruned: scan.files_pruned,
                predicate: scan.predicate.clone(),
                limit: scan.limit.map(|l| l as u64),
                row_ids: scan.row_ids,
                dynamic_predicate: scan.dynamic_predicate.clone(),
                merge_target: scan.merge_target,
            })
        } else if let Some(write) = node.as_any().downcast_ref::<IcebergWriteExec>() {
            Node::Write(WriteNode {
                table: write.table.clone(),
                table_metadata_json: serde_json::to_string(write.metadata.as_ref())
                    .map_err(json_err)?,
                file_io: shipped(&write.file_io_props),
                write_id: write.write_id.clone(),
                file_rows: Default::default(),
                file_deletes_json: Default::default(),
            })
        } else if let Some(write) = node.as_any().downcast_ref::<CopyOnWriteWriterExec>() {
            Node::MergeWrite(WriteNode {
                table: write.table.clone(),
                table_metadata_json: serde_json::to_string(write.metadata.as_ref())
                    .map_err(json_err)?,
                file_io: shipped(&write.file_io_props),
                write_id: write.write_id.clone(),
                file_rows: write.targets.rows.as_ref().clone(),
                file_deletes_json: encode_deletes(&write.targets)?,
            })
        } else if let Some(write) = node.as_any().downcast_ref::<MergeOnReadWriterExec>() {
            Node::MergeOnReadWrite(WriteNode {
                table: write.table.clone(),
                table_metadata_json: serde_json::to_string(write.metadata.as_ref())
                    .map_err(json_err)?,
                file_io: shipped(&write.file_io_props),
                write_id: write.write_id.clone(),
                file_rows: Default::default(),
                file_deletes_json: Default::default(),
            })
        } else if let Some(probe) = node.as_any().downcast_ref::<StageProbeExec>() {
            Node::StageProbe(StageProbeNode {
                stage: probe.stage as u64,
            })
        } else if let Some(sort) = node.as_any().downcast_ref::<SortChangesByFileExec>() {
            Node::SortChangesByFile(SortChangesByFileNode {
                files: sort.files().map(str::to_string).collect(),
            })
        } else if node.as_any().is::<BatchSlicesExec>() {
            Node::BatchSlices(BatchSlicesNode {})
        } else {
            return self.fallback.try_encode(node, buf);
        };
        buf.extend_from_slice(MAGIC);
        PhysicalNode {
            node: Some(message),
        }
        .encode(buf)
        .map_err(|e| internal(format!("encode icemerge plan node: {e}")))
    }

    fn try_decode_expr(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn PhysicalExpr>],
    ) -> Result<Arc<dyn PhysicalExpr>> {
        if let Some(json) = buf.strip_prefix(WRITER_ROUTE) {
            let node: WriterRouteNode = serde_json::from_slice(json)
                .map_err(|e| internal(format!("bad writer route: {e}")))?;
            let [route] = inputs else {
                return Err(internal("the writer route takes one child"));
            };
            return Ok(Arc::new(WriterRouteExpr::new(
                route.clone(),
                node.assigned,
                node.writers,
            )?));
        }
        let Some(op) = buf.strip_prefix(CHECKED_ARITHMETIC) else {
            return self.fallback.try_decode_expr(buf, inputs);
        };
        let op = std::str::from_utf8(op).map_err(|e| internal(format!("bad operator: {e}")))?;
        let [left, right] = inputs else {
            return Err(internal("checked arithmetic takes two operands"));
        };
        Ok(Arc::new(CheckedArithmeticExpr::new(
            left.clone(),
            CheckedArithmeticExpr::parse_op(op)?,
            right.clone(),
        )))
    }

    fn try_encode_expr(&self, node: &Arc<dyn PhysicalExpr>, buf: &mut Vec<u8>) -> Result<()> {
        if let Some(route) = node.as_any().downcast_ref::<WriterRouteExpr>() {
            buf.extend_from_slice(WRITER_ROUTE);
            let node = WriterRouteNode {
                writers: route.writers(),
                assigned: route.assigned().to_vec(),
            };
            serde_json::to_writer(&mut *buf, &node)
                .map_err(|e| internal(format!("encode writer route: {e}")))?;
            return Ok(());
        }
        let Some(checked) = node.as_any().downcast_ref::<CheckedArithmeticExpr>() else {
            return self.fallback.try_encode_expr(node, buf);
        };
        buf.extend_from_slice(CHECKED_ARITHMETIC);
        buf.extend_from_slice(checked.op_name().as_bytes());
        Ok(())
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        if buf == INSERT_ROUTE_MARK {
            return Ok(InsertRoute::udf());
        }
        self.fallback.try_decode_udf(name, buf)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        if node.inner().as_any().is::<InsertRoute>() {
            buf.extend_from_slice(INSERT_ROUTE_MARK);
            return Ok(());
        }
        self.fallback.try_encode_udf(node, buf)
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        if buf == CHECKED_SUM_MARK {
            return Ok(CheckedSum::udaf());
        }
        self.fallback.try_decode_udaf(name, buf)
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        if node.inner().as_any().is::<CheckedSum>() {
            buf.extend_from_slice(CHECKED_SUM_MARK);
            return Ok(());
        }
        self.fallback.try_encode_udaf(node, buf)
    }

    fn try_decode_udwf(&self, name: &str, buf: &[u8]) -> Result<Arc<WindowUDF>> {
        self.fallback.try_decode_udwf(name, buf)
    }

    fn try_encode_udwf(&self, node: &WindowUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.fallback.try_encode_udwf(node, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field};
    use datafusion::prelude::SessionContext;

    #[test]
    fn plans_carry_no_secrets_and_take_the_decoding_process_credentials() {
        let props: HashMap<String, String> = [
            ("s3.endpoint", "http://store:9000"),
            ("s3.access-key-id", "coordinator-key"),
            ("s3.secret-access-key", "coordinator-secret"),
            ("s3.session-token", "coordinator-token"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
        let scan: Arc<dyn ExecutionPlan> = Arc::new(IcebergScanExec::new(
            "db.t".into(),
            schema,
            props,
            vec![],
            0,
            String::new(),
            None,
        ));
        let mut buf = vec![];
        IcemergePhysicalCodec::default()
            .try_encode(scan, &mut buf)
            .unwrap();
        let text = String::from_utf8_lossy(&buf);
        assert!(text.contains("http://store:9000"), "{text}");
        assert!(!text.contains("coordinator-"), "{text}");

        let own: HashMap<String, String> = [
            ("s3.access-key-id", "executor-key"),
            ("s3.secret-access-key", "executor-secret"),
            ("s3.endpoint", "http://ignored:1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let ctx = SessionContext::new();
        let codec = IcemergePhysicalCodec::with_credentials(own);
        assert!(!format!("{codec:?}").contains("executor-secret"));
        let decoded = codec.try_decode(&buf, &[], &ctx.task_ctx()).unwrap();
        assert!(!format!("{decoded:?}").contains("executor-secret"));
        let scan = decoded.as_any().downcast_ref::<IcebergScanExec>().unwrap();
        assert_eq!(scan.file_io_props["s3.endpoint"], "http://store:9000");
        assert_eq!(scan.file_io_props["s3.access-key-id"], "executor-key");
        assert_eq!(
            scan.file_io_props["s3.secret-access-key"],
            "executor-secret"
        );
        assert!(!scan.file_io_props.contains_key("s3.session-token"));
    }

    #[test]
    fn a_writer_route_travels_with_each_file_writer() {
        use datafusion::physical_expr::expressions::Column;
        let route: Arc<dyn PhysicalExpr> = Arc::new(Column::new("__icemerge_route", 4));
        let files = [
            ("b".to_string(), 10),
            ("a".to_string(), 30),
            ("c".to_string(), 20),
        ];
        let expr: Arc<dyn PhysicalExpr> =
            Arc::new(WriterRouteExpr::balanced(route.clone(), &files, 2).unwrap());
        let codec = IcemergePhysicalCodec::default();
        let mut buf = vec![];
        codec.try_encode_expr(&expr, &mut buf).unwrap();
        let decoded = codec.try_decode_expr(&buf, &[route]).unwrap();
        let decoded = decoded.as_any().downcast_ref::<WriterRouteExpr>().unwrap();
        assert_eq!(decoded.writers(), 2);
        assert_eq!(
            decoded.assigned(),
            &[
                ("a".to_string(), 0),
                ("b".to_string(), 1),
                ("c".to_string(), 1)
            ]
        );
        assert!(expr.as_any().downcast_ref::<WriterRouteExpr>().unwrap() == decoded);
    }
}

//! The physical plan codec that ships icemerge operators between coordinator,
//! scheduler and executors. Our nodes are wrapped in `icemerge_proto`
//! messages behind a magic prefix; everything else is Ballista's (shuffle
//! reader / writer) or DataFusion's, through Ballista's codec. Our one
//! expression, checked arithmetic, travels as its operator behind its own
//! prefix (its operands are the expression's children); our functions
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
    physical_node::Node, FileIoProps, PhysicalNode, ScanNode, ScanTaskGroup, StageProbeNode,
    WriteNode,
};
use prost::Message;

use crate::checked_arithmetic::CheckedArithmeticExpr;
use crate::checked_sum::{CheckedSum, CHECKED_SUM_MARK};
use crate::insert_route::{InsertRoute, INSERT_ROUTE_MARK};
use crate::merge_on_read::MergeOnReadWriterExec;
use crate::merge_writer::{CopyOnWriteWriterExec, TargetFiles};
use crate::scan_exec::IcebergScanExec;
use crate::stage_probe::StageProbeExec;
use crate::write_exec::IcebergWriteExec;
use icemerge_proto::error::internal;

const MAGIC: &[u8] = b"ICEMERGE1";
const CHECKED_ARITHMETIC: &[u8] = b"ICEMERGE1-CHECKED:";

/// Encodes icemerge operators; delegates all others to Ballista's codec.
#[derive(Debug, Default)]
pub struct IcemergePhysicalCodec {
    fallback: BallistaPhysicalExtensionCodec,
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
fn writer_parts(write: WriteNode, inputs: &[Arc<dyn ExecutionPlan>]) -> Result<WriterParts> {
    let input = inputs
        .first()
        .cloned()
        .ok_or_else(|| internal(format!("writer of {} without input", write.table)))?;
    let metadata = serde_json::from_str(&write.table_metadata_json).map_err(json_err)?;
    let props = write.file_io.map(|p| p.props).unwrap_or_default();
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
                    scan.file_io.map(|p| p.props).unwrap_or_default(),
                    groups,
                    scan.files_pruned,
                    scan.predicate,
                    scan.limit.map(|l| l as usize),
                )
                .with_dynamic_predicate(scan.dynamic_predicate);
                Ok(Arc::new(if scan.row_ids {
                    exec.with_row_ids()
                } else {
                    exec
                }))
            }
            Some(Node::Write(write)) => {
                let (table, metadata, props, write_id, input) = writer_parts(write, inputs)?;
                Ok(Arc::new(IcebergWriteExec::new(
                    table, metadata, props, write_id, input,
                )))
            }
            Some(Node::MergeWrite(mut write)) => {
                let targets = decode_targets(&mut write)?;
                let (table, metadata, props, write_id, input) = writer_parts(write, inputs)?;
                Ok(Arc::new(
                    CopyOnWriteWriterExec::new(table, metadata, props, write_id, input)
                        .with_targets(targets),
                ))
            }
            Some(Node::MergeOnReadWrite(write)) => {
                let (table, metadata, props, write_id, input) = writer_parts(write, inputs)?;
                Ok(Arc::new(MergeOnReadWriterExec::new(
                    table, metadata, props, write_id, input,
                )))
            }
            Some(Node::StageProbe(probe)) => {
                let input = inputs
                    .first()
                    .cloned()
                    .ok_or_else(|| internal("stage probe without input"))?;
                Ok(Arc::new(StageProbeExec::new(probe.stage as usize, input)))
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
                file_io: Some(FileIoProps {
                    props: scan.file_io_props.clone(),
                }),
                groups,
                files_pruned: scan.files_pruned,
                predicate: scan.predicate.clone(),
                limit: scan.limit.map(|l| l as u64),
                row_ids: scan.row_ids,
                dynamic_predicate: scan.dynamic_predicate.clone(),
            })
        } else if let Some(write) = node.as_any().downcast_ref::<IcebergWriteExec>() {
            Node::Write(WriteNode {
                table: write.table.clone(),
                table_metadata_json: serde_json::to_string(write.metadata.as_ref())
                    .map_err(json_err)?,
                file_io: Some(FileIoProps {
                    props: write.file_io_props.clone(),
                }),
                write_id: write.write_id.clone(),
                file_rows: Default::default(),
                file_deletes_json: Default::default(),
            })
        } else if let Some(write) = node.as_any().downcast_ref::<CopyOnWriteWriterExec>() {
            Node::MergeWrite(WriteNode {
                table: write.table.clone(),
                table_metadata_json: serde_json::to_string(write.metadata.as_ref())
                    .map_err(json_err)?,
                file_io: Some(FileIoProps {
                    props: write.file_io_props.clone(),
                }),
                write_id: write.write_id.clone(),
                file_rows: write.targets.rows.as_ref().clone(),
                file_deletes_json: encode_deletes(&write.targets)?,
            })
        } else if let Some(write) = node.as_any().downcast_ref::<MergeOnReadWriterExec>() {
            Node::MergeOnReadWrite(WriteNode {
                table: write.table.clone(),
                table_metadata_json: serde_json::to_string(write.metadata.as_ref())
                    .map_err(json_err)?,
                file_io: Some(FileIoProps {
                    props: write.file_io_props.clone(),
                }),
                write_id: write.write_id.clone(),
                file_rows: Default::default(),
                file_deletes_json: Default::default(),
            })
        } else if let Some(probe) = node.as_any().downcast_ref::<StageProbeExec>() {
            Node::StageProbe(StageProbeNode {
                stage: probe.stage as u64,
            })
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

//! How a physical plan built by the coordinator reaches the Ballista
//! scheduler: Ballista accepts logical plans only, so the plan travels as a
//! logical leaf, `ShippedPlanNode`, whose bytes are the physical plan encoded
//! with our physical codec. The scheduler's `ShippedPlanQueryPlanner` turns
//! the leaf back into that physical plan, and Ballista splits it into stages
//! at its exchanges. Both engines therefore run the very same plan.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use async_trait::async_trait;
use ballista_core::serde::BallistaLogicalExtensionCodec;
use datafusion::catalog::TableProvider;
use datafusion::common::{DFSchema, DFSchemaRef, TableReference};
use datafusion::datasource::file_format::FileFormatFactory;
use datafusion::error::Result;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::{Expr, Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use icemerge_executor::codec::IcemergePhysicalCodec;
use icemerge_proto::error::internal;
use prost::Message;

use super::series_scans::with_series_scans_unprojected;

const MAGIC: &[u8] = b"ICEMERGE-SHIPPED1";

/// A logical leaf carrying a complete physical plan.
#[derive(Debug, Clone)]
pub struct ShippedPlanNode {
    pub id: String,
    pub plan: Arc<dyn ExecutionPlan>,
    pub schema: DFSchemaRef,
}

impl ShippedPlanNode {
    pub fn new(plan: Arc<dyn ExecutionPlan>) -> Result<Self> {
        let plan = with_series_scans_unprojected(plan)?;
        let arrow = plan.schema();
        let mut names = std::collections::HashSet::new();
        let schema = if arrow.fields().iter().all(|f| names.insert(f.name())) {
            DFSchema::try_from(arrow.as_ref().clone())?
        } else {
            // Output columns may share a name (`SELECT a.v, b.v ...`): a
            // logical schema may not, so each field gets its position as
            // qualifier. The columns keep their names.
            let qualifiers = (0..arrow.fields().len())
                .map(|i| Some(TableReference::bare(format!("__icemerge_column_{i}"))))
                .collect();
            DFSchema::from_field_specific_qualified_schema(qualifiers, &arrow)?
        };
        let schema = Arc::new(schema);
        Ok(Self {
            id: uuid::Uuid::new_v4().to_string(),
            plan,
            schema,
        })
    }

    pub fn into_logical_plan(self) -> LogicalPlan {
        LogicalPlan::Extension(Extension {
            node: Arc::new(self),
        })
    }
}

impl PartialEq for ShippedPlanNode {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for ShippedPlanNode {}

impl PartialOrd for ShippedPlanNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        self.id.partial_cmp(&other.id)
    }
}

impl Hash for ShippedPlanNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state)
    }
}

impl UserDefinedLogicalNodeCore for ShippedPlanNode {
    fn name(&self) -> &str {
        "ShippedPlan"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ShippedPlan: {}", self.plan.name())
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, _inputs: Vec<LogicalPlan>) -> Result<Self> {
        Ok(self.clone())
    }
}

/// Logical codec: encodes `ShippedPlanNode`; everything else is Ballista's.
#[derive(Debug, Default)]
pub struct IcemergeLogicalCodec {
    physical: IcemergePhysicalCodec,
    fallback: BallistaLogicalExtensionCodec,
}

impl LogicalExtensionCodec for IcemergeLogicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[LogicalPlan],
        ctx: &TaskContext,
    ) -> Result<Extension> {
        let Some(body) = buf.strip_prefix(MAGIC) else {
            return self.fallback.try_decode(buf, inputs, ctx);
        };
        let node = PhysicalPlanNode::decode(body)
            .map_err(|e| internal(format!("bad shipped plan: {e}")))?;
        let plan = node.try_into_physical_plan(ctx, &self.physical)?;
        Ok(Extension {
            node: Arc::new(ShippedPlanNode::new(plan)?),
        })
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> Result<()> {
        let Some(shipped) = node.node.as_any().downcast_ref::<ShippedPlanNode>() else {
            return self.fallback.try_encode(node, buf);
        };
        let proto = PhysicalPlanNode::try_from_physical_plan(shipped.plan.clone(), &self.physical)?;
        buf.extend_from_slice(MAGIC);
        proto
            .encode(buf)
            .map_err(|e| internal(format!("encode shipped plan: {e}")))
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: arrow::datatypes::SchemaRef,
        ctx: &TaskContext,
    ) -> Result<Arc<dyn TableProvider>> {
        self.fallback
            .try_decode_table_provider(buf, table_ref, schema, ctx)
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        self.fallback
            .try_encode_table_provider(table_ref, node, buf)
    }

    fn try_decode_file_format(
        &self,
        buf: &[u8],
        ctx: &TaskContext,
    ) -> Result<Arc<dyn FileFormatFactory>> {
        self.fallback.try_decode_file_format(buf, ctx)
    }

    fn try_encode_file_format(
        &self,
        buf: &mut Vec<u8>,
        node: Arc<dyn FileFormatFactory>,
    ) -> Result<()> {
        self.fallback.try_encode_file_format(buf, node)
    }
}

/// The scheduler's query planner: a shipped plan is already physical.
#[derive(Debug, Default)]
pub struct ShippedPlanQueryPlanner;

#[async_trait]
impl QueryPlanner for ShippedPlanQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &SessionState,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let LogicalPlan::Extension(ext) = logical_plan {
            if let Some(shipped) = ext.node.as_any().downcast_ref::<ShippedPlanNode>() {
                return Ok(shipped.plan.clone());
            }
        }
        DefaultPhysicalPlanner::default()
            .create_physical_plan(logical_plan, session_state)
            .await
    }
}

/// Sessions of a Ballista scheduler that runs icemerge's shipped plans:
/// DataFusion's defaults with [`ShippedPlanQueryPlanner`].
pub fn scheduler_session_builder() -> ballista_scheduler::SessionBuilder {
    Arc::new(|config: datafusion::prelude::SessionConfig| {
        Ok(datafusion::execution::SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_query_planner(Arc::new(ShippedPlanQueryPlanner))
            .build())
    })
}

//! `EXPLAIN [ANALYZE] (FORMAT TEXT|GRAPHVIZ|JSON|SVG)` of a query or an
//! INSERT: the statement's physical plan cut into its stage graph, drawn in
//! the format asked for, as for a MERGE. With ANALYZE the statement runs (an
//! INSERT commits, as EXPLAIN ANALYZE MERGE does) and the graph carries
//! the run's per-stage figures. Without an option list, `EXPLAIN SELECT`
//! stays DataFusion's own EXPLAIN.

use datafusion::error::Result;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use icemerge_executor::write_exec::IcebergWriteExec;
use icemerge_planner::explain::{stage_graph, ExplainDocument, Timing};
use icemerge_planner::merge::ExplainMerge;
use icemerge_proto::error::invalid_input;

use super::explain_analyze::render_explain;
use super::{overwritten_table, Session, StatementOutput};
use crate::engine::now_nanos;

impl Session {
    /// EXPLAIN of a query or an INSERT in `mode` (see the module docs).
    pub(super) async fn explain_plan(
        &self,
        mode: ExplainMerge,
        sql: &str,
    ) -> Result<StatementOutput> {
        let started = now_nanos();
        let mut statements = DFParser::parse_sql_with_dialect(sql, &GenericDialect {})
            .map_err(|e| invalid_input(format!("SQL syntax error: {e}")))?;
        let statement = match (statements.pop_front(), statements.is_empty()) {
            (Some(s @ DFStatement::Statement(_)), true) => s,
            _ => return Err(refused(sql)),
        };
        let plan = self.ctx.state().statement_to_plan(statement).await?;
        if matches!(
            plan,
            LogicalPlan::Ddl(_)
                | LogicalPlan::Statement(_)
                | LogicalPlan::Explain(_)
                | LogicalPlan::Analyze(_)
                | LogicalPlan::DescribeTable(_)
                | LogicalPlan::Copy(_)
        ) {
            return Err(refused(sql));
        }
        let overwrite = overwritten_table(&plan)?;
        let physical = self.ctx.state().create_physical_plan(&plan).await?;
        let writer = physical.as_any().downcast_ref::<IcebergWriteExec>();
        let kind = if writer.is_some() { "insert" } else { "query" };
        if !mode.analyze {
            let graph = stage_graph(&physical, false)?;
            let document = ExplainDocument::plan(kind, self.engine_name(), &graph.stages);
            return Ok(render_explain(&document, mode.format, ""));
        }
        let planned = now_nanos();
        let line = match writer {
            Some(writer) => {
                let rows = self
                    .run_insert(writer, physical.clone(), overwrite.as_ref())
                    .await?;
                format!("Insert: count={rows}")
            }
            None => {
                let batches = self.run_plan_of(physical.clone(), kind).await?;
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                format!("Query: rows={rows}")
            }
        };
        let ended = now_nanos();
        let mut document = self
            .last_run()
            .ok_or_else(|| invalid_input("EXPLAIN ANALYZE: the statement did not run a plan"))?;
        let ms = |nanos: i64| nanos.max(0) as f64 / 1e6;
        let run_ms = document.timing.as_ref().map_or(0.0, |t| t.run_ms);
        let total_ms = ms(ended - started);
        let plan_ms = ms(planned - started);
        document.timing = Some(Timing {
            total_ms,
            plan_ms,
            run_ms,
            // An INSERT's commit follows its run; a query has none.
            commit_ms: if writer.is_some() {
                (total_ms - plan_ms - run_ms).max(0.0)
            } else {
                0.0
            },
        });
        Ok(render_explain(&document, mode.format, &line))
    }
}

/// The error for an EXPLAIN with options of a statement without a plan.
fn refused(sql: &str) -> datafusion::error::DataFusionError {
    let first = sql.split_whitespace().next().unwrap_or("").to_uppercase();
    invalid_input(format!(
        "EXPLAIN (FORMAT ...): {first} has no stage graph; EXPLAIN with options takes a \
         query (SELECT, VALUES, WITH), INSERT, MERGE, UPDATE or DELETE"
    ))
}

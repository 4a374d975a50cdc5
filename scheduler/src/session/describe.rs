//! What a statement will give back and take, known before it runs: the
//! schema of a query's rows and the types of its parameters, as a Flight
//! SQL prepared statement reports them (`dataset_schema`,
//! `parameter_schema`) so that JDBC and ADBC clients can describe a result
//! and bind values before executing.
//!
//! Queries and INSERT are planned by DataFusion without running (tables
//! read `FOR ... AS OF` pinned as when they run); a parameter's type is the
//! one DataFusion infers from where it stands (`id = $1` takes `id`'s type,
//! `INSERT ... VALUES ($1)` the column's). Other statements (MERGE, UPDATE,
//! DELETE, DDL) give no rows' schema and leave their parameters untyped, as
//! does a statement that does not plan yet: describing is a best guess the
//! statement's run confirms or refutes with its own error.

use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::sql::parser::{DFParser, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::GenericDialect;

use super::Session;

/// A statement's shape before it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct StatementShape {
    /// The schema of the rows a query returns; `None` when not known.
    pub rows: Option<SchemaRef>,
    /// Each parameter's type (`$1` first); `None` when not inferred.
    pub parameters: Vec<Option<DataType>>,
}

impl Session {
    /// The shape of `sql`, whose placeholders are written `$1`, `$2`, ...
    /// and which takes `parameters` of them.
    pub async fn describe(&self, sql: &str, parameters: usize) -> StatementShape {
        let mut shape = StatementShape {
            rows: None,
            parameters: vec![None; parameters],
        };
        let (resolved, pinned) = match self.pin_time_travel(sql).await {
            Ok(pinned) => pinned,
            Err(e) => {
                tracing::debug!("not described: {e}");
                return shape;
            }
        };
        self.describe_planned(&resolved, &mut shape).await;
        self.unpin(pinned);
        shape
    }

    async fn describe_planned(&self, sql: &str, shape: &mut StatementShape) {
        let Ok(mut statements) = DFParser::parse_sql_with_dialect(sql, &GenericDialect {}) else {
            return;
        };
        let (Some(statement), true) = (statements.pop_front(), statements.is_empty()) else {
            return;
        };
        let DFStatement::Statement(inner) = &statement else {
            return;
        };
        let query = match inner.as_ref() {
            Statement::Query(_) => true,
            Statement::Insert(_) => false,
            _ => return,
        };
        let plan = match self.ctx.state().statement_to_plan(statement).await {
            Ok(plan) => plan,
            Err(e) => {
                tracing::debug!("not described: {e}");
                return;
            }
        };
        if query {
            shape.rows = Some(Arc::new(plan.schema().as_arrow().clone()));
        }
        let Ok(types) = plan.get_parameter_types() else {
            return;
        };
        for (name, data_type) in types {
            let index = name.strip_prefix('$').and_then(|n| n.parse::<usize>().ok());
            if let Some(slot) = index
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| shape.parameters.get_mut(i))
            {
                *slot = data_type;
            }
        }
    }
}

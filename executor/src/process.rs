//! The `icemerge-executor` process: a Ballista executor with icemerge's
//! physical codec, so it can run the stages of plans shipped by the
//! `icemerge-scheduler` coordinator (scans, MERGE writers, shuffles).
//! It serves Arrow Flight (shuffle data, results) on `port` and, in push
//! mode, a gRPC service on `grpc_port` through which the scheduler launches
//! and cancels tasks.
//!
//! Ballista's executor decodes a stage's plan once for all the tasks of that
//! stage it is pushed at once, so their operators would share one metrics
//! set and every task would report the running total of its siblings;
//! [`FreshPlanEngine`] gives each task its own copy of the plan, so each
//! reports only its own figures (as with pull scheduling), and reads each
//! map output of its shuffle inputs once (`shuffle_inputs`).

use icemerge_proto::memory_budget::MemoryBudget;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::error::BallistaError;
use ballista_core::RuntimeProducer;
use ballista_executor::execution_engine::{
    DefaultExecutionEngine, ExecutionEngine, QueryStageExecutor,
};
use ballista_executor::executor_process::{start_executor_process, ExecutorProcessConfig};
use datafusion::error::Result;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use datafusion_proto::physical_plan::AsExecutionPlan;
use datafusion_proto::protobuf::PhysicalPlanNode;
use icemerge_proto::limits::{EXECUTOR_HEARTBEAT_SECONDS, MAX_MESSAGE_BYTES};

use crate::codec::IcemergePhysicalCodec;
use crate::shuffle_inputs::read_each_map_output_once;
use crate::task_figures::MeasuredStage;

/// How an executor process is started.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// Address the executor's services bind to.
    pub bind_host: String,
    /// Host name or address the scheduler and other executors reach this
    /// executor at (default: the address the scheduler sees it connect from).
    pub external_host: Option<String>,
    /// Arrow Flight port (shuffle reads, results).
    pub port: u16,
    /// gRPC port the scheduler pushes tasks to (push scheduling).
    pub grpc_port: u16,
    pub scheduler_host: String,
    pub scheduler_port: u16,
    /// Tasks run at once (0: available cores).
    pub task_slots: usize,
    /// Shuffle files and spill files (default: a temporary directory).
    pub work_dir: Option<PathBuf>,
    /// Push scheduling (the scheduler launches and cancels tasks) or pull
    /// (the executor polls). Must match the scheduler's policy.
    pub push_scheduling: bool,
    /// Memory for running tasks, shared equally among the task slots.
    pub memory_limit: MemoryBudget,
    /// This executor's storage credentials (`file_io::SECRET_PROPS`), added
    /// to every plan it runs: plans carry none. Empty: the S3 client's own
    /// (environment, profile, instance role).
    pub storage_credentials: HashMap<String, String>,
}

/// Runs the executor until it stops (an error or a shutdown signal).
pub async fn run(options: ExecutorOptions) -> Result<(), BallistaError> {
    if let Some(dir) = &options.work_dir {
        std::fs::create_dir_all(dir).map_err(|e| {
            BallistaError::Configuration(format!(
                "cannot create the work directory '{}': {e}",
                dir.display()
            ))
        })?;
    }
    let runtime = task_runtime(&options);
    let config = ExecutorProcessConfig {
        bind_host: options.bind_host,
        external_host: options.external_host,
        port: options.port,
        grpc_port: options.grpc_port,
        scheduler_host: options.scheduler_host,
        scheduler_port: options.scheduler_port,
        scheduler_connect_timeout_seconds: 30,
        concurrent_tasks: options.task_slots,
        override_runtime_producer: Some(runtime),
        task_scheduling_policy: if options.push_scheduling {
            TaskSchedulingPolicy::PushStaged
        } else {
            TaskSchedulingPolicy::PullStaged
        },
        work_dir: options.work_dir.map(|d| d.to_string_lossy().to_string()),
        grpc_max_decoding_message_size: MAX_MESSAGE_BYTES as u32,
        grpc_max_encoding_message_size: MAX_MESSAGE_BYTES as u32,
        executor_heartbeat_interval_seconds: EXECUTOR_HEARTBEAT_SECONDS,
        override_physical_codec: Some(Arc::new(IcemergePhysicalCodec::with_credentials(
            options.storage_credentials.clone(),
        ))),
        override_execution_engine: Some(Arc::new(FreshPlanEngine::new(
            IcemergePhysicalCodec::with_credentials(options.storage_credentials),
        ))),
        ..Default::default()
    };
    start_executor_process(Arc::new(config)).await
}

/// Each task's runtime: a memory pool of its slot's share of the budget
/// (`memory_budget`'s pool, as on the coordinator) and spill files in the
/// work directory, if one was given (else the system's temporary directory).
fn task_runtime(options: &ExecutorOptions) -> RuntimeProducer {
    let slots = match options.task_slots {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        slots => slots,
    };
    let budget = options.memory_limit.share(slots);
    let spill_dir = options.work_dir.clone();
    Arc::new(move |_| {
        let mut runtime = RuntimeEnvBuilder::new().with_memory_pool(budget.pool());
        if let Some(dir) = &spill_dir {
            runtime = runtime.with_temp_file_path(dir);
        }
        runtime.build_arc()
    })
}

/// Ballista's execution engine, run on a private copy of the stage plan
/// (a round trip through icemerge's physical codec) for every task, which
/// also reports its shuffle output and times (`task_figures`).
pub struct FreshPlanEngine {
    inner: DefaultExecutionEngine,
    codec: IcemergePhysicalCodec,
}

impl FreshPlanEngine {
    /// Copies plans through `codec` (which adds the executor's storage
    /// credentials).
    pub fn new(codec: IcemergePhysicalCodec) -> Self {
        Self {
            inner: DefaultExecutionEngine::default(),
            codec,
        }
    }
}

impl ExecutionEngine for FreshPlanEngine {
    fn create_query_stage_exec(
        &self,
        job_id: String,
        stage_id: usize,
        partition_id: usize,
        plan: Arc<dyn ExecutionPlan>,
        work_dir: &str,
        config: &SessionConfig,
    ) -> Result<Arc<dyn QueryStageExecutor>> {
        let node = PhysicalPlanNode::try_from_physical_plan(plan, &self.codec)?;
        let state = SessionStateBuilder::new()
            .with_config(config.clone())
            .with_default_features()
            .build();
        let fresh = node.try_into_physical_plan(&state.task_ctx(), &self.codec)?;
        let fresh = read_each_map_output_once(fresh)?;
        let stage = self.inner.create_query_stage_exec(
            job_id.clone(),
            stage_id,
            partition_id,
            fresh,
            work_dir,
            config,
        )?;
        Ok(Arc::new(MeasuredStage::new(
            stage, work_dir, job_id, stage_id,
        )))
    }
}

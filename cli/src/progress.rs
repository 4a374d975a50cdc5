//! Progress bars for a statement running on a remote scheduler: one bar per
//! stage of its Ballista job (tasks done / total), polled from the
//! scheduler's `icemerge.progress` Flight action. Drawn on stderr, only when
//! stdout is a terminal and the CLI is not `--quiet`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::flight_client::FlightClient as Client;
use arrow_flight::Action;
use futures::TryStreamExt;
use icemerge_proto::progress::{JobProgressReport, PROGRESS_ACTION};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the scheduler is asked.
const POLL: Duration = Duration::from_millis(200);

/// Bars shown while a statement runs; cleared when dropped.
pub struct ProgressBars {
    poller: tokio::task::JoinHandle<()>,
    multi: MultiProgress,
}

impl ProgressBars {
    /// Starts polling the scheduler and drawing bars.
    pub fn start(client: Client) -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let poller = tokio::spawn(poll(client, multi.clone()));
        Self { poller, multi }
    }
}

impl Drop for ProgressBars {
    fn drop(&mut self) {
        self.poller.abort();
        let _ = self.multi.clear();
    }
}

async fn report(client: &mut Client) -> Option<JobProgressReport> {
    let action = Action {
        r#type: PROGRESS_ACTION.to_string(),
        body: Default::default(),
    };
    let mut stream = client.do_action(action).await.ok()?.into_inner();
    let result = stream.try_next().await.ok()??;
    serde_json::from_slice(&result.body).ok()
}

async fn poll(mut client: Client, multi: MultiProgress) {
    let style = ProgressStyle::with_template("{prefix:>9} [{bar:30}] {pos}/{len} tasks {msg}")
        .expect("progress template")
        .progress_chars("=> ");
    let mut bars: BTreeMap<usize, ProgressBar> = BTreeMap::new();
    let mut job: Option<String> = None;
    loop {
        tokio::time::sleep(POLL).await;
        let Some(report) = report(&mut client).await else {
            continue;
        };
        if report.job != job {
            // A new job (or none): start over.
            for bar in bars.values() {
                bar.finish_and_clear();
            }
            bars.clear();
            job = report.job.clone();
        }
        for stage in &report.stages {
            let Some(total) = stage.total else { continue };
            let bar = bars.entry(stage.stage).or_insert_with(|| {
                let bar = multi.add(ProgressBar::new(total as u64));
                bar.set_style(style.clone());
                bar.set_prefix(format!("stage {}", stage.stage));
                bar
            });
            bar.set_length(total as u64);
            bar.set_position(stage.done as u64);
            if stage.status != "Running" {
                bar.set_message(stage.status.to_lowercase());
            }
        }
    }
}

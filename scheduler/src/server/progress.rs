//! Progress of the running statement's job for the `icemerge.progress`
//! action: per-stage task counts read from Ballista's REST handler,
//! called in-process (no network round trip). Through the same handler,
//! the jobs still live on this scheduler and their cancellation, for
//! `CANCEL STATEMENT` of a job whose id its submitter has not learnt yet.

use icemerge_proto::progress::StageProgress;

/// Per-stage task progress of a job, read from Ballista's REST API
/// (`/api/job/{id}/stages`) in-process, without a network round trip.
#[derive(Clone)]
pub struct JobProgress {
    router: axum::Router,
}

impl JobProgress {
    /// Progress read through Ballista's REST `router`.
    pub fn new(router: axum::Router) -> Self {
        Self { router }
    }

    /// The job's stages in id order; `total` is None until a stage runs.
    pub async fn stages(&self, job_id: &str) -> std::result::Result<Vec<StageProgress>, String> {
        let json = self
            .call(
                axum::http::Method::GET,
                &format!("/api/job/{job_id}/stages"),
            )
            .await
            .map_err(|e| format!("job {job_id}: {e}"))?;
        Ok(parse_stages(&json))
    }

    /// The jobs named `name` (a session's, `engine::job_name`) queued or
    /// running on this scheduler. Ballista tells a job's submitter its id
    /// with the job's first status change (a stage ending), so a job still
    /// in its first stage is known only here; a session runs one statement
    /// at a time.
    pub async fn live_jobs(&self, name: &str) -> std::result::Result<Vec<String>, String> {
        let json = self.call(axum::http::Method::GET, "/api/jobs").await?;
        Ok(json
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|job| matches!(job["status"].as_str(), Some("Queued" | "Running")))
            .filter(|job| job["job_name"].as_str() == Some(name))
            .filter_map(|job| job["job_id"].as_str().map(str::to_string))
            .collect())
    }

    /// Cancels a queued or running job (its tasks are stopped; the job
    /// fails).
    pub async fn cancel(&self, job_id: &str) -> std::result::Result<(), String> {
        self.call(axum::http::Method::PATCH, &format!("/api/job/{job_id}"))
            .await
            .map(|_| ())
            .map_err(|e| format!("cancelling job {job_id}: {e}"))
    }

    /// One request to Ballista's REST handler; its JSON answer.
    async fn call(
        &self,
        method: axum::http::Method,
        path: &str,
    ) -> std::result::Result<serde_json::Value, String> {
        use tower::ServiceExt;
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::empty())
            .map_err(|e| e.to_string())?;
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 64 * 1024 * 1024)
            .await
            .map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
        }
        if body.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    }
}

/// Reads Ballista's `QueryStagesResponse` JSON.
fn parse_stages(json: &serde_json::Value) -> Vec<StageProgress> {
    let mut stages: Vec<StageProgress> = json["stages"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|stage| {
            let id = stage["stage_id"].as_str()?.parse().ok()?;
            let status = stage["stage_status"].as_str().unwrap_or("").to_string();
            let tasks = stage["tasks"]
                .as_array()
                .map(|a| a.as_slice())
                .unwrap_or_default();
            let done = tasks
                .iter()
                .filter(|t| t["status"].as_str() == Some("Successful"))
                .count();
            let total = (!tasks.is_empty()).then_some(tasks.len());
            Some(StageProgress {
                stage: id,
                status,
                done,
                total,
            })
        })
        .collect();
    stages.sort_by_key(|s| s.stage);
    stages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stage_progress() {
        let json = serde_json::json!({"stages": [
            {"stage_id": "2", "stage_status": "Running",
             "tasks": [{"status": "Successful"}, null, {"status": "Running"}]},
            {"stage_id": "1", "stage_status": "Successful",
             "tasks": [{"status": "Successful"}, {"status": "Successful"}]},
            {"stage_id": "3", "stage_status": "Unresolved", "tasks": []}
        ]});
        let stages = parse_stages(&json);
        let figures: Vec<_> = stages.iter().map(|s| (s.stage, s.done, s.total)).collect();
        assert_eq!(
            figures,
            vec![(1, 2, Some(2)), (2, 1, Some(3)), (3, 0, None)]
        );
    }
}

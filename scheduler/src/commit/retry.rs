//! The retry policy of a commit that lost the catalog's compare-and-swap to
//! another writer: Iceberg's `commit.retry.num-retries`,
//! `commit.retry.min-wait-ms`, `commit.retry.max-wait-ms` and
//! `commit.retry.total-timeout-ms` table properties (defaults 4, 100 ms,
//! 60 s, 30 min), shared by every action that rebases and swaps again.
//! Like Iceberg's, each wait adds a random jitter of up to 10%, so writers
//! that lost together do not retry in lockstep.

use std::time::{Duration, Instant};

use iceberg::spec::TableProperties;

/// Waits between commit attempts that lost the catalog swap: exponential
/// backoff within the table's `commit.retry.num-retries`, `commit.retry.min-wait-ms`,
/// `commit.retry.max-wait-ms` and `commit.retry.total-timeout-ms`.
pub(crate) struct Retries {
    left: usize,
    delay: Duration,
    max_delay: Duration,
    /// None: no limit within reach.
    deadline: Option<Instant>,
    /// Attempts lost so far.
    pub(crate) lost: usize,
}

impl Retries {
    pub(crate) fn of(properties: &TableProperties) -> Self {
        Retries {
            left: properties.commit_num_retries,
            delay: Duration::from_millis(properties.commit_min_retry_wait_ms),
            max_delay: Duration::from_millis(properties.commit_max_retry_wait_ms),
            deadline: Instant::now().checked_add(Duration::from_millis(
                properties.commit_total_retry_timeout_ms,
            )),
            lost: 0,
        }
    }

    /// Counts a lost attempt and sleeps before the next one; `false` when
    /// none is left.
    pub(crate) async fn wait(&mut self) -> bool {
        self.lost += 1;
        let past_deadline = self.deadline.is_some_and(|deadline| {
            (Instant::now().checked_add(self.delay)).is_none_or(|wake| wake > deadline)
        });
        if self.left == 0 || past_deadline {
            return false;
        }
        tokio::time::sleep(self.delay + jitter(self.delay)).await;
        self.left -= 1;
        self.delay = self.delay.saturating_mul(2).min(self.max_delay);
        true
    }
}

/// A random duration below a tenth of `delay` (below 1 ms for delays under 10 ms).
fn jitter(delay: Duration) -> Duration {
    let tenth = (delay.as_micros() / 10).max(1000);
    let random = uuid::Uuid::new_v4().as_u128() % tenth;
    Duration::from_micros(random as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn retries_back_off_up_to_the_limits() {
        let mut retries = Retries {
            left: 2,
            delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(3),
            deadline: None,
            lost: 0,
        };
        assert!(retries.wait().await);
        assert_eq!(retries.delay, Duration::from_millis(2));
        assert!(retries.wait().await);
        assert_eq!(retries.delay, Duration::from_millis(3));
        assert!(!retries.wait().await);
        assert_eq!(retries.lost, 3);

        let mut retries = Retries {
            left: 5,
            delay: Duration::from_secs(60),
            max_delay: Duration::from_secs(60),
            deadline: Some(Instant::now() + Duration::from_secs(1)),
            lost: 0,
        };
        assert!(!retries.wait().await, "would sleep past the deadline");
    }

    #[test]
    fn jitter_stays_below_a_tenth_of_the_delay() {
        for _ in 0..100 {
            assert!(jitter(Duration::from_millis(100)) < Duration::from_millis(10));
            assert!(jitter(Duration::ZERO) < Duration::from_millis(1));
        }
    }
}

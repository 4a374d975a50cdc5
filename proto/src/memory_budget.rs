//! The memory budget a process runs statements in (`--memory-limit` of the
//! CLI, the scheduler and the executor): how it is written, its default (a
//! fraction of the machine's RAM), the DataFusion memory pool that enforces
//! it, and the error a statement over it ends with.
//!
//! The pool is a [`HoldersSpillPool`]: operators that can spill (sort, hash
//! aggregate, the sort-merge join, repartition) share the budget by what
//! each holds and spill to disk beyond their share; an operator
//! that cannot spill and needs more than what is left fails the statement
//! with [`over_budget`]'s error.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::{MemoryPool, TrackConsumersPool};

use crate::error::{out_of_memory, IcemergeError};
use crate::spill_pool::HoldersSpillPool;

/// The share of the machine's RAM a process takes when no budget is given.
pub const DEFAULT_RAM_PERCENT: u64 = 50;

/// The smallest budget accepted: below it not even one batch of a merge fits.
pub const MIN_BUDGET_BYTES: u64 = 1 << 20;

/// A memory budget in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    bytes: u64,
}

impl MemoryBudget {
    /// A budget of `bytes` (at least [`MIN_BUDGET_BYTES`]).
    pub fn from_bytes(bytes: u64) -> Result<Self, String> {
        if bytes < MIN_BUDGET_BYTES {
            return Err(format!(
                "a memory limit of {} is too small: at least {} are needed",
                human(bytes),
                human(MIN_BUDGET_BYTES)
            ));
        }
        Ok(Self { bytes })
    }

    /// [`DEFAULT_RAM_PERCENT`] of the machine's RAM.
    pub fn default_for_machine() -> Self {
        Self::percent_of_ram(DEFAULT_RAM_PERCENT)
    }

    fn percent_of_ram(percent: u64) -> Self {
        let mut system = sysinfo::System::new();
        system.refresh_memory();
        let ram = system.total_memory();
        // A machine that does not say how much RAM it has gets 4 GiB.
        let ram = if ram == 0 { 4 << 30 } else { ram };
        Self {
            bytes: (ram / 100 * percent).max(MIN_BUDGET_BYTES),
        }
    }

    /// The budget in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The budget split in `parts` equal shares (one per executor or task
    /// slot), each at least [`MIN_BUDGET_BYTES`].
    pub fn share(&self, parts: usize) -> Self {
        Self {
            bytes: (self.bytes / parts.max(1) as u64).max(MIN_BUDGET_BYTES),
        }
    }

    /// The memory each sort keeps back for merging what it spilled
    /// (DataFusion's `sort_spill_reservation_bytes`, 10 MiB by default) when
    /// `partitions` sorts run at once in this budget: an eighth of their
    /// share, between 256 KiB and 10 MiB, so that small budgets still leave
    /// the sorts room to spill rather than fail.
    pub fn sort_spill_reservation(&self, partitions: usize) -> usize {
        let share = self.bytes / (8 * partitions.max(1) as u64);
        share.clamp(256 << 10, 10 << 20) as usize
    }

    /// A DataFusion memory pool of this size whose spilling consumers share
    /// it by what each holds, and which names its largest consumers when it
    /// runs out.
    pub fn pool(&self) -> Arc<dyn MemoryPool> {
        let size = usize::try_from(self.bytes).unwrap_or(usize::MAX);
        Arc::new(TrackConsumersPool::new(
            HoldersSpillPool::new(size),
            std::num::NonZeroUsize::new(3).expect("3 is not zero"),
        ))
    }
}

impl Default for MemoryBudget {
    fn default() -> Self {
        Self::default_for_machine()
    }
}

impl fmt::Display for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&human(self.bytes))
    }
}

/// `512MiB`, `4GiB`, `2G`, `1.5GB`, `1000000` (bytes) or `25%` (of the
/// machine's RAM). Binary and decimal prefixes both mean powers of 1024, as
/// in Spark's and Trino's size settings.
impl FromStr for MemoryBudget {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bad = || {
            format!(
                "invalid memory limit '{text}': expected a size such as 512MiB, 4GiB or 2G, \
                 or a share of RAM such as 25%"
            )
        };
        if let Some(percent) = text.strip_suffix('%') {
            let percent: u64 = percent.trim().parse().map_err(|_| bad())?;
            if !(1..=100).contains(&percent) {
                return Err(format!(
                    "invalid memory limit '{text}': a share of RAM is between 1% and 100%"
                ));
            }
            return Ok(Self::percent_of_ram(percent));
        }
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: f64 = number.parse().map_err(|_| bad())?;
        let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            _ => return Err(bad()),
        };
        let bytes = number * scale as f64;
        if !bytes.is_finite() || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
            return Err(bad());
        }
        Self::from_bytes(bytes as u64)
    }
}

/// `bytes` as the largest binary unit that keeps a number ≥ 1.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `error`, when DataFusion's pool refused memory somewhere inside it (on
/// this process, or reported by an executor as its task's failure text),
/// as the error of a statement over `budget` (words that name the budget,
/// e.g. "the memory budget of 32 MiB (--memory-limit)"); any other error
/// unchanged.
pub fn over_budget(error: DataFusionError, budget: &str) -> DataFusionError {
    if IcemergeError::find(&error).is_some() || !pool_refused(&error) {
        return error;
    }
    out_of_memory(format!(
        "the statement needs more memory than {budget}; nothing was committed. \
         Raise --memory-limit, or run it on more executors. ({error})"
    ))
}

fn pool_refused(error: &DataFusionError) -> bool {
    match error.find_root() {
        DataFusionError::ResourcesExhausted(_) => true,
        // A Ballista task's failure comes back as text only: the refusal's
        // display or debug form.
        other => {
            let text = other.to_string();
            text.contains("Resources exhausted") || text.contains("ResourcesExhausted(")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_shares_of_ram() {
        let b = |t: &str| t.parse::<MemoryBudget>().map(|b| b.bytes());
        assert_eq!(b("512MiB"), Ok(512 << 20));
        assert_eq!(b("4GiB"), Ok(4 << 30));
        assert_eq!(b("2G"), Ok(2 << 30));
        assert_eq!(b("1.5GB"), Ok(3 << 29));
        assert_eq!(b(" 64 mb "), Ok(64 << 20));
        assert_eq!(b("2000000"), Ok(2_000_000));
        assert!(b("25%").unwrap() >= MIN_BUDGET_BYTES);
        assert!(b("50%").unwrap() >= b("25%").unwrap());
        for wrong in ["", "lots", "4XB", "-1G", "0%", "101%", "1.5", "G"] {
            assert!(b(wrong).is_err(), "{wrong} accepted");
        }
        let small = b("1000").unwrap_err();
        assert!(small.contains("too small"), "{small}");
    }

    #[test]
    fn shares_and_names() {
        let budget: MemoryBudget = "6GiB".parse().unwrap();
        assert_eq!(budget.share(3).bytes(), 2 << 30);
        assert_eq!(budget.share(0).bytes(), 6 << 30);
        assert_eq!(budget.to_string(), "6 GiB");
        assert_eq!(budget.share(4).to_string(), "1.5 GiB");
    }

    #[test]
    fn pool_refusals_become_over_budget_errors() {
        let budget: MemoryBudget = "32MiB".parse().unwrap();
        let refused = DataFusionError::Context(
            "joining".into(),
            Box::new(DataFusionError::ResourcesExhausted("no room".into())),
        );
        let e = over_budget(refused, &format!("the budget of {budget} per task"));
        assert_eq!(
            IcemergeError::kind_of(&e),
            Some(crate::error::ErrorKind::OutOfMemory)
        );
        assert!(e.to_string().contains("32 MiB per task"), "{e}");
        let remote = DataFusionError::Execution(
            "Task failed: Resources exhausted: Failed to allocate".into(),
        );
        assert!(IcemergeError::find(&over_budget(remote, "the budget")).is_some());
        let other = over_budget(DataFusionError::Plan("bad".into()), "the budget");
        assert!(matches!(other, DataFusionError::Plan(_)));
    }
}

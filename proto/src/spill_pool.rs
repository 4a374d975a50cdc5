//! The memory pool a statement's operators reserve from: [`HoldersSpillPool`],
//! a spill pool that shares its budget among the spilling consumers by what
//! they hold, not equally among every one registered.
//!
//! DataFusion's `FairSpillPool` caps each consumer that can spill at the
//! budget divided by every such consumer registered. A merge's plan registers
//! one for each output of each exchange besides its sorts, and the exchanges'
//! outputs hold a batch or two at a time: in a copy-on-write merge of 10M
//! rows the two sorts of the writer stage were each capped at an eighth of
//! the budget and spilled while most of it lay unused. Counting only the
//! consumers that hold memory is not enough: at any moment several outputs
//! hold a batch.
//!
//! Here the budget left by the consumers that cannot spill is filled like
//! water: a spilling consumer may hold up to the level at which the others,
//! each counted for what it holds up to that level, plus itself and one more
//! share kept free, fill the budget. An exchange output holding a few
//! batches takes a few batches from it; two large sorts get a third each.
//! The free share is room for a consumer that starts holding memory later
//! and for those that cannot spill (a hash join's build side). A consumer
//! above its level — because others grew since it did — is refused its next
//! growth and spills. Consumers that cannot spill grow while the pool has
//! room, as in the fair pool.

use std::collections::HashMap;
use std::sync::Mutex;

use datafusion::common::resources_datafusion_err;
use datafusion::error::Result;
use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool, MemoryReservation};

/// A memory pool of a fixed size whose spilling consumers share what the
/// others leave by what each holds (see the module's doc).
#[derive(Debug)]
pub struct HoldersSpillPool {
    size: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Bytes held by consumers that cannot spill.
    unspillable: usize,
    /// Bytes held by each spilling consumer that holds any, by consumer id.
    holders: HashMap<usize, usize>,
}

impl HoldersSpillPool {
    /// A pool of `size` bytes.
    pub fn new(size: usize) -> Self {
        Self {
            size,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a few counters updated under the lock; a panic
        // elsewhere while it was held leaves them as consistent as any.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn add(&mut self, reservation: &MemoryReservation, bytes: usize) {
        let consumer = reservation.consumer();
        if consumer.can_spill() {
            *self.holders.entry(consumer.id()).or_default() += bytes;
        } else {
            self.unspillable += bytes;
        }
    }

    fn remove(&mut self, reservation: &MemoryReservation, bytes: usize) {
        let consumer = reservation.consumer();
        if consumer.can_spill() {
            if let Some(held) = self.holders.get_mut(&consumer.id()) {
                *held = held.saturating_sub(bytes);
                if *held == 0 {
                    self.holders.remove(&consumer.id());
                }
            }
        } else {
            self.unspillable = self.unspillable.saturating_sub(bytes);
        }
    }

    /// Bytes held by all consumers.
    fn reserved(&self) -> usize {
        self.unspillable + self.holders.values().sum::<usize>()
    }
}

/// The most a spilling consumer may hold when the others hold `others`
/// bytes each: the level `L` at which the others' holdings, each counted up
/// to `L`, and two shares of `L` (the consumer's own and one kept free) fill
/// `budget`.
fn level(budget: usize, others: &mut [usize]) -> usize {
    others.sort_unstable();
    let mut left = budget;
    for (i, &bytes) in others.iter().enumerate() {
        // Shares of the level still to place: the others from `i` on, the
        // consumer's own and the free one.
        let shares = others.len() - i + 2;
        if bytes.saturating_mul(shares) > left {
            return left / shares;
        }
        left -= bytes;
    }
    left / 2
}

impl MemoryPool for HoldersSpillPool {
    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.state().add(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.state().remove(reservation, shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let mut state = self.state();
        let free = self.size.saturating_sub(state.reserved());
        let consumer = reservation.consumer();
        let available = if consumer.can_spill() {
            let held = state.holders.get(&consumer.id()).copied().unwrap_or(0);
            let mut others: Vec<usize> = state
                .holders
                .iter()
                .filter(|(id, _)| **id != consumer.id())
                .map(|(_, bytes)| *bytes)
                .collect();
            let budget = self.size.saturating_sub(state.unspillable);
            free.min(level(budget, &mut others).saturating_sub(held))
        } else {
            free
        };
        if additional > available {
            return Err(resources_datafusion_err!(
                "Failed to allocate additional {additional} bytes for {} with {} bytes \
                 already allocated for this reservation - {available} bytes remain available \
                 to it in the pool of {} bytes",
                consumer.name(),
                reservation.size(),
                self.size
            ));
        }
        state.add(reservation, additional);
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.state().reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.size)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::execution::memory_pool::MemoryConsumer;

    use super::*;

    fn consumer(pool: &Arc<dyn MemoryPool>, name: &str, can_spill: bool) -> MemoryReservation {
        MemoryConsumer::new(name)
            .with_can_spill(can_spill)
            .register(pool)
    }

    #[test]
    fn a_lone_spiller_holds_half_of_what_others_leave() {
        let pool: Arc<dyn MemoryPool> = Arc::new(HoldersSpillPool::new(1000));
        // Idle registered spillers (an exchange's outputs) take no share.
        let _idle: Vec<_> = (0..6)
            .map(|i| consumer(&pool, &format!("exchange[{i}]"), true))
            .collect();
        let sort = consumer(&pool, "sort", true);
        sort.try_grow(500).expect("half of the pool");
        assert!(sort.try_grow(1).is_err(), "more than half of the pool");
        let build = consumer(&pool, "build", false);
        build
            .try_grow(200)
            .expect("a build side grows into the free share");
        // With 200 bytes that cannot spill, the spiller's share is 400: it is
        // refused growth (and spills) until it holds less.
        assert!(sort.try_grow(1).is_err());
        sort.shrink(300);
        sort.try_grow(200).expect("back within its share");
        assert_eq!(pool.reserved(), 600);
        // The consumer that cannot spill takes what is left, no more.
        build.try_grow(400).expect("the rest of the pool");
        assert!(build.try_grow(1).is_err());
        let error = sort.try_grow(1).unwrap_err().to_string();
        assert!(
            error.contains("Resources exhausted") && error.contains("sort"),
            "{error}"
        );
    }

    #[test]
    fn a_spiller_holding_little_counts_for_what_it_holds() {
        let pool: Arc<dyn MemoryPool> = Arc::new(HoldersSpillPool::new(1000));
        let outputs: Vec<_> = (0..4)
            .map(|i| consumer(&pool, &format!("exchange[{i}]"), true))
            .collect();
        for output in &outputs {
            output.try_grow(10).expect("a batch");
        }
        // Four outputs holding 10 bytes each leave 960 to the sort and the
        // free share: 480 each.
        let sort = consumer(&pool, "sort", true);
        sort.try_grow(480).expect("its level");
        assert!(sort.try_grow(1).is_err());
        assert_eq!(level(900, &mut [600, 10]), 296);
        assert_eq!(level(900, &mut []), 450);
        assert_eq!(level(0, &mut [5]), 0);
    }

    #[test]
    fn two_spillers_share_the_pool_and_one_that_holds_nothing_counts_for_nothing() {
        let pool: Arc<dyn MemoryPool> = Arc::new(HoldersSpillPool::new(900));
        let first = consumer(&pool, "first", true);
        let second = consumer(&pool, "second", true);
        first.try_grow(450).expect("alone: half");
        // The second finds the first holding: a third each, with the last
        // third free.
        assert!(second.try_grow(301).is_err());
        second.try_grow(300).expect("its third");
        // The first is over its third now: refused until it spills.
        assert!(first.try_grow(1).is_err());
        first.free();
        first.try_grow(300).expect("a third again after spilling");
        // A consumer that holds nothing no longer counts.
        second.free();
        first.try_grow(150).expect("alone again: half");
        assert_eq!(pool.reserved(), 450);
        drop(first);
        assert_eq!(pool.reserved(), 0);
    }
}

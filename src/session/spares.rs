//! Spares: everything a session makes ahead of a call so the call need not wait for it. One
//! type serves them all: the kerns already in their cgroups (`Opened::kerns`), the zygote's
//! forks set up as call boxes (`zygote`), and the prewarmed one-cell python boxes (`prewarm`).
//! Each is taken oldest first, skipping any that died meanwhile (killed from outside), and
//! topped up beside the call that took one.
//!
//! Kerns and zygote forks follow demand: each call that finds none ready raises how many are
//! kept by one (up to `max`, the Sandbox's `spareMemoryMb` share), so a Sandbox with N calls in
//! flight soon keeps about N ready; after `IDLE` with no call asking, `trim_idle` lets the extra
//! ones go, back to the minimum. (Prewarmed boxes are the number the caller asked for.)

use super::kernel::driver::Prewarmed;
use crate::engine::addon::launch::Kern;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long no call may ask for a spare before the extra ones go.
pub(super) const IDLE: Duration = Duration::from_secs(2);

/// Something made ahead of a call.
pub(super) trait Spare {
    /// Whether it can still serve a call (a kern reaps its dead child here).
    fn is_alive(&mut self) -> bool;
    /// Lets it go unused (close()): it ends whatever it made. A task that ends once it is gone,
    /// for close() to wait on.
    fn retire(self) -> Option<Gone>;
}

/// A task that ends once a retired spare's processes are gone.
pub(super) type Gone = tokio::task::JoinHandle<()>;

impl Spare for Kern {
    fn is_alive(&mut self) -> bool {
        Kern::is_alive(self)
    }
    fn retire(self) -> Option<Gone> {
        Some(Kern::retire(self))
    }
}

impl Spare for Prewarmed {
    fn is_alive(&mut self) -> bool {
        Prewarmed::is_alive(self)
    }
    fn retire(self) -> Option<Gone> {
        // Dropping a prewarmed ends its box; its session's `running` lock, which close() takes,
        // is held until that box has ended.
        drop(self);
        None
    }
}

/// The spares of one kind, and how many are wanted now.
struct Pool<T> {
    items: VecDeque<T>,
    /// Between `min` and `max`: raised by a call that found none.
    want: usize,
    /// When a call last asked for one (taken or not).
    asked: Instant,
    /// Being made by a `top_up`, outside the lock.
    making: usize,
    /// Spares a `top_up` made after close() began, retired at once: close() waits for them.
    gone: Vec<Gone>,
}

/// From `min` up to `max` spares of one kind, oldest first.
pub(super) struct Spares<T> {
    pool: Mutex<Pool<T>>,
    min: usize,
    max: usize,
}

impl<T: Spare> Spares<T> {
    /// Empty; `top_up` fills it to `want` (`min` to start with). A fixed number: `min == max`.
    pub(super) fn new(min: usize, max: usize) -> Spares<T> {
        Spares {
            pool: Mutex::new(Pool {
                items: VecDeque::new(),
                want: min,
                asked: Instant::now(),
                making: 0,
                gone: Vec::new(),
            }),
            min,
            max: max.max(min),
        }
    }

    /// Takes the oldest spare that still runs; a dead one is dropped. Finding none raises how
    /// many are kept (the next `top_up` makes them).
    pub(super) fn take(&self) -> Option<T> {
        let mut pool = self.pool.lock().ok()?;
        pool.asked = Instant::now();
        while let Some(mut s) = pool.items.pop_front() {
            if s.is_alive() {
                return Some(s);
            }
        }
        pool.want = (pool.want + 1).min(self.max);
        None
    }

    /// Drops the dead ones, then makes spares up to `want` while `go_on` holds and `make`
    /// succeeds. Each is made outside the lock (a kern's start is milliseconds, and calls take
    /// under it), in a slot reserved under it so that top-ups beside each other make no more
    /// than wanted; `go_on` is checked again under the lock `retire_all` drains under before
    /// one is added, so none outlives close().
    pub(super) fn top_up(&self, go_on: impl Fn() -> bool, mut make: impl FnMut() -> Option<T>) {
        loop {
            {
                let Ok(mut pool) = self.pool.lock() else {
                    return;
                };
                pool.items.retain_mut(Spare::is_alive);
                if pool.items.len() + pool.making >= pool.want || !go_on() {
                    return;
                }
                pool.making += 1;
            }
            let made = make();
            let Ok(mut pool) = self.pool.lock() else {
                if let Some(s) = made {
                    s.retire();
                }
                return;
            };
            pool.making -= 1;
            match made {
                Some(s) if go_on() => pool.items.push_back(s),
                Some(s) => {
                    pool.gone.extend(s.retire());
                    return;
                }
                None => return,
            }
        }
    }

    /// Adds one made elsewhere (a resident session's first kern), within `want`.
    pub(super) fn put(&self, s: T) {
        match self.pool.lock() {
            Ok(mut pool) if pool.items.len() < pool.want => pool.items.push_back(s),
            _ => {
                s.retire();
            }
        }
    }

    /// Once no call has asked for `idle`: back to `min`, the newest extra ones let go.
    pub(super) fn trim_idle(&self, idle: Duration) {
        let Ok(mut pool) = self.pool.lock() else {
            return;
        };
        if pool.want == self.min || pool.asked.elapsed() < idle {
            return;
        }
        pool.want = self.min;
        while pool.items.len() > self.min {
            if let Some(s) = pool.items.pop_back() {
                s.retire();
            }
        }
    }

    /// Lets every spare go unused (close()); what to wait on for their ends, with those a
    /// `top_up` retired since the last call.
    pub(super) fn retire_all(&self) -> Vec<Gone> {
        match self.pool.lock() {
            Ok(mut pool) => {
                let mut gone: Vec<Gone> = pool.items.drain(..).filter_map(Spare::retire).collect();
                gone.append(&mut pool.gone);
                gone
            }
            Err(_) => Vec::new(),
        }
    }

    /// Whether a `top_up` is making one now (close() waits for it to end).
    pub(super) fn making(&self) -> bool {
        self.pool.lock().is_ok_and(|p| p.making > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A spare that is alive or not, and counts its retirements.
    struct Probe {
        id: u32,
        alive: bool,
        retired: Arc<AtomicUsize>,
    }

    impl Spare for Probe {
        fn is_alive(&mut self) -> bool {
            self.alive
        }
        fn retire(self) -> Option<Gone> {
            self.retired.fetch_add(1, Ordering::SeqCst);
            None
        }
    }

    fn filled(alive: &[bool], retired: &Arc<AtomicUsize>) -> Spares<Probe> {
        let spares = Spares::new(alive.len(), alive.len());
        for (id, a) in alive.iter().enumerate() {
            spares.put(Probe {
                id: id as u32,
                alive: *a,
                retired: retired.clone(),
            });
        }
        spares
    }

    #[test]
    fn take_gives_the_oldest_live_one_and_drops_the_dead_before_it() {
        let retired = Arc::default();
        let spares = filled(&[false, true, true], &retired);
        assert_eq!(spares.take().map(|p| p.id), Some(1));
        assert_eq!(spares.take().map(|p| p.id), Some(2));
        assert!(spares.take().is_none());
    }

    #[test]
    fn top_up_replaces_the_dead_and_stops_when_told() {
        let retired = Arc::new(AtomicUsize::new(0));
        let spares = filled(&[true, false, true], &retired);
        let mut made = 0;
        let r = retired.clone();
        spares.top_up(
            || true,
            || {
                made += 1;
                Some(Probe {
                    id: 9,
                    alive: true,
                    retired: r.clone(),
                })
            },
        );
        assert_eq!(made, 1, "only the dead one is replaced");
        let ids: Vec<u32> = std::iter::from_fn(|| spares.take()).map(|p| p.id).collect();
        assert_eq!(ids, [0, 2, 9]);
        spares.top_up(|| false, || panic!("nothing is made once go_on is false"));
        assert!(spares.take().is_none());
    }

    #[test]
    fn put_past_want_and_retire_all_retire_them() {
        let retired = Arc::new(AtomicUsize::new(0));
        let spares = filled(&[true, true], &retired);
        spares.put(Probe {
            id: 5,
            alive: true,
            retired: retired.clone(),
        });
        assert_eq!(
            retired.load(Ordering::SeqCst),
            1,
            "one past `want` goes at once"
        );
        spares.retire_all();
        assert_eq!(retired.load(Ordering::SeqCst), 3);
        assert!(spares.take().is_none());
    }

    fn probe(id: u32, retired: &Arc<AtomicUsize>) -> Probe {
        Probe {
            id,
            alive: true,
            retired: retired.clone(),
        }
    }

    #[test]
    fn a_call_that_finds_none_raises_the_count_up_to_max() {
        let retired = Arc::new(AtomicUsize::new(0));
        let spares: Spares<Probe> = Spares::new(1, 3);
        let mut made = 0;
        let mut fill = |spares: &Spares<Probe>| {
            spares.top_up(
                || true,
                || {
                    made += 1;
                    Some(probe(made, &retired))
                },
            );
        };
        fill(&spares);
        // Four calls at once: one finds a spare, three find none.
        let taken: Vec<_> = (0..4).filter_map(|_| spares.take()).collect();
        assert_eq!(taken.len(), 1);
        fill(&spares);
        let ready: Vec<_> = std::iter::from_fn(|| spares.take()).collect();
        assert_eq!(ready.len(), 3, "raised by each miss, capped at max");
    }

    #[test]
    fn idle_spares_go_back_to_the_minimum_and_busy_ones_stay() {
        let retired = Arc::new(AtomicUsize::new(0));
        let spares: Spares<Probe> = Spares::new(1, 4);
        for _ in 0..3 {
            assert!(spares.take().is_none());
        }
        let mut n = 0;
        spares.top_up(
            || true,
            || {
                n += 1;
                Some(probe(n, &retired))
            },
        );
        spares.trim_idle(Duration::from_secs(3600));
        assert_eq!(retired.load(Ordering::SeqCst), 0, "asked for just now");
        spares.trim_idle(Duration::ZERO);
        assert_eq!(
            retired.load(Ordering::SeqCst),
            3,
            "the newest extra ones go"
        );
        spares.top_up(
            || true,
            || panic!("want is back at the minimum, which is held"),
        );
        assert_eq!(spares.take().map(|p| p.id), Some(1), "the oldest stays");
    }
}

//! Spares: everything a session makes ahead of a call so the call need not wait for it. One
//! type serves them all: the kerns already in their cgroups (`Opened::kerns`), the zygote's
//! forks set up as call boxes (`zygote`), and the prewarmed one-cell python boxes (`prewarm`).
//! Each is taken oldest first, skipping any that died meanwhile (killed from outside), and
//! topped up beside the call that took one.

use super::kernel::driver::Prewarmed;
use crate::engine::addon::launch::Kern;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Something made ahead of a call.
pub(super) trait Spare {
    /// Whether it can still serve a call (a kern reaps its dead child here).
    fn is_alive(&mut self) -> bool;
    /// Lets it go unused (close()): it ends whatever it made.
    fn retire(self);
}

impl Spare for Kern {
    fn is_alive(&mut self) -> bool {
        Kern::is_alive(self)
    }
    fn retire(self) {
        Kern::retire(self);
    }
}

impl Spare for Prewarmed {
    fn is_alive(&mut self) -> bool {
        Prewarmed::is_alive(self)
    }
    fn retire(self) {
        // Dropping a prewarmed ends its box.
        drop(self);
    }
}

/// Up to `want` spares of one kind, oldest first.
pub(super) struct Spares<T> {
    items: Mutex<VecDeque<T>>,
    want: usize,
}

impl<T: Spare> Spares<T> {
    /// Empty; `top_up` fills it to `want`.
    pub(super) fn new(want: usize) -> Spares<T> {
        Spares {
            items: Mutex::new(VecDeque::new()),
            want,
        }
    }

    /// Takes the oldest spare that still runs; a dead one is dropped.
    pub(super) fn take(&self) -> Option<T> {
        let mut items = self.items.lock().ok()?;
        while let Some(mut s) = items.pop_front() {
            if s.is_alive() {
                return Some(s);
            }
        }
        None
    }

    /// Drops the dead ones, then makes spares up to `want` while `go_on` holds (checked under
    /// the lock `retire_all` drains under, so none is made after it) and `make` succeeds.
    pub(super) fn top_up(&self, go_on: impl Fn() -> bool, mut make: impl FnMut() -> Option<T>) {
        let Ok(mut items) = self.items.lock() else {
            return;
        };
        items.retain_mut(Spare::is_alive);
        while items.len() < self.want && go_on() {
            match make() {
                Some(s) => items.push_back(s),
                None => break,
            }
        }
    }

    /// Adds one made elsewhere (a resident session's first kern), within `want`.
    pub(super) fn put(&self, s: T) {
        match self.items.lock() {
            Ok(mut items) if items.len() < self.want => items.push_back(s),
            _ => s.retire(),
        }
    }

    /// Lets every spare go unused (close()).
    pub(super) fn retire_all(&self) {
        if let Ok(mut items) = self.items.lock() {
            items.drain(..).for_each(Spare::retire);
        }
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
        fn retire(self) {
            self.retired.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn filled(alive: &[bool], retired: &Arc<AtomicUsize>) -> Spares<Probe> {
        let spares = Spares::new(alive.len());
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
}

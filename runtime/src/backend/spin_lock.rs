//! A lock for a few instructions of work, such as a cache bin's push or pop on every
//! eager op: taken with one atomic exchange and given back with a plain release store.
//! `std::sync::Mutex` gives back with a second exchange, to learn whether a waiter sleeps;
//! here nobody sleeps: a thread that finds the lock taken spins, then yields its time
//! slice, until it is free. Not for work that may block or take long.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time (the
// exchange in `lock`), so the lock hands a `T` from thread to thread as a Mutex does.
unsafe impl<T: Send> Sync for SpinLock<T> {}

// As `std::sync::Mutex` is: a panic inside a holder's work gives the lock back (the guard
// drops while unwinding), and what the value holds then is whatever that work left, which
// for the callers' single pushes and pops is a whole value.
impl<T> std::panic::RefUnwindSafe for SpinLock<T> {}

/// Access to a [`SpinLock`]'s value; the lock is given back when it is dropped (a guard
/// that is forgotten leaves the lock taken, which blocks, never races).
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        SpinLock { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        // Acquire: what the last holder wrote before its release store is seen here.
        while self.locked.swap(true, Ordering::Acquire) {
            while self.locked.load(Ordering::Relaxed) {
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        SpinGuard { lock: self }
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see `Sync`), so no `&mut T` exists meanwhile.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one, borrowed mutably here: no other reference exists.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        // Release: this holder's writes are seen by the next one's acquire.
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::SpinLock;

    /// Increments under the lock from several threads at once: none is lost, which a
    /// lock that let two holders in (or a relaxed hand-over) would show as a short count.
    #[test]
    fn holders_exclude_each_other() {
        let lock = SpinLock::new((0u64, 0u64));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let mut g = lock.lock();
                        // Two fields written apart: a second holder would see them differ.
                        let v = g.0;
                        g.0 = v + 1;
                        assert_eq!(g.1, v, "another holder was inside");
                        g.1 = v + 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), (80_000, 80_000));
    }
}

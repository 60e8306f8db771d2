//! Who wrote a buffer last and who used it since: the books both backends keep for each
//! buffer, and the rules that decide from them when a use on a stream must wait first.
//! Written once here, so the host backend, whose hazard checker runs in CI, takes the
//! same decisions the GPU does; each backend only says how to wait (for a stream, or for
//! the event recorded after a write) and what a capture allows.
//!
//! - A read on stream `s` of memory last written on stream `w` waits for that write,
//!   unless `s` is `w`, `s` already waited for this write, or an earlier wait of `s`
//!   covers it (`ordering.rs`); the waits and skips are counted.
//! - A write in place on `s` waits for the last write and for every stream that read the
//!   memory since.
//! - Every stream but the home stream that used the memory is a user: its free is
//!   ordered after them (each backend's free reads [`Uses::users`]).
//!
//! Each buffer keeps its books in a [`Booked`]: behind a lock, with the writer's stream
//! readable without it, so that a read on the writer's own stream (every read of a
//! program of one stream) takes no lock.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::sync::count_cross_stream_wait;
use crate::backend::sync::ordering::{count_skipped, Order};
use crate::error::Result;

/// A stream as the books name it.
pub(crate) trait BookedStream {
    /// Its process-unique id (`ordering::new_stream_id`).
    fn stream_id(&self) -> u64;
    /// Its ordering books.
    fn order(&self) -> &Order;
}

/// What a use must wait for before it is queued.
pub(crate) enum Wait<'a, S, E> {
    /// The event recorded right after the last write.
    Event(&'a Arc<E>),
    /// Everything queued on `stream` so far; `upto` is the write of it this wait is for
    /// (0: none in particular, a reader's work).
    Stream { stream: &'a Arc<S>, upto: u64 },
}

/// The books of one buffer.
#[derive(Debug)]
pub(crate) struct Uses<S, E> {
    /// The stream of the last write; `None` for host memory no stream writes.
    pub writer: Option<Arc<S>>,
    /// The event recorded right after that write, when there is one: readers on other
    /// streams wait for exactly this write, not for all of the writer's later work.
    pub ready: Option<Arc<E>>,
    /// The number of that write on the writer's stream (0: not known).
    pub written: u64,
    /// Streams other than the writer that have waited for the last write.
    pub seen: Streams<S>,
    /// Every stream other than the home stream that used this memory.
    pub users: Streams<S>,
}

/// A list of streams that stays empty in a program of one stream: one word, and no
/// allocation until a second stream joins. Every buffer carries two, and an op moves its
/// output's buffer a few times, so they are kept small.
#[derive(Debug)]
#[allow(clippy::box_collection)] // the box is the point: one word in place, not a Vec's three
pub(crate) struct Streams<S>(Option<Box<Vec<Arc<S>>>>);

impl<S> Default for Streams<S> {
    fn default() -> Self {
        Streams(None)
    }
}

impl<S> Streams<S> {
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Arc<S>> {
        self.0.as_deref().map_or([].iter(), |v| v.iter())
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |v| v.len())
    }

    pub(crate) fn contains(&self, s: &Arc<S>) -> bool {
        self.iter().any(|r| Arc::ptr_eq(r, s))
    }

    pub(crate) fn push(&mut self, s: Arc<S>) {
        self.0.get_or_insert_with(Default::default).push(s);
    }

    /// Empties the list, keeping its allocation for the next stream.
    pub(crate) fn clear(&mut self) {
        if let Some(v) = &mut self.0 {
            v.clear();
        }
    }

    /// The streams, leaving the list empty.
    pub(crate) fn take(&mut self) -> Vec<Arc<S>> {
        self.0.as_mut().map(|v| std::mem::take(&mut **v)).unwrap_or_default()
    }
}

impl<S: BookedStream, E> Uses<S, E> {
    /// The books of memory last written as write `written` of `writer`.
    pub(crate) fn new(writer: Option<Arc<S>>, written: u64) -> Self {
        Uses { writer, ready: None, written, seen: Streams::default(), users: Streams::default() }
    }

    /// Numbers the write that produced this memory, just queued on its writer's stream.
    pub(crate) fn mark_written(&mut self) {
        if let Some(w) = &self.writer {
            self.written = w.order().mark_write();
        }
    }

    /// Records `s` as a user, unless it is the home stream.
    pub(crate) fn add_user(&mut self, home: Option<&Arc<S>>, s: &Arc<S>) {
        if !home.is_some_and(|h| Arc::ptr_eq(h, s)) && !self.users.contains(s) {
            self.users.push(Arc::clone(s));
        }
    }

    /// The wait for the last write.
    fn last_write<'a>(&'a self, writer: &'a Arc<S>) -> Wait<'a, S, E> {
        match &self.ready {
            Some(ev) => Wait::Event(ev),
            None => Wait::Stream { stream: writer, upto: self.written },
        }
    }

    /// Before a read on `on`: waits (through `wait`) for the last write unless nothing
    /// requires it, then records `on` as a reader and a user.
    pub(crate) fn read_on(
        &mut self,
        home: Option<&Arc<S>>,
        on: &Arc<S>,
        wait: impl FnOnce(Wait<'_, S, E>) -> Result<()>,
    ) -> Result<()> {
        let Some(writer) = &self.writer else { return Ok(()) };
        if Arc::ptr_eq(writer, on) {
            return Ok(());
        }
        if self.seen.contains(on) {
            count_skipped();
            return Ok(());
        }
        if on.order().has_waited(writer.stream_id(), self.written) {
            count_skipped();
        } else {
            wait(self.last_write(writer))?;
            count_cross_stream_wait();
        }
        self.seen.push(Arc::clone(on));
        self.add_user(home, on);
        Ok(())
    }

    /// Before a write in place on `on`: waits (through `wait`) for the last write and
    /// for every stream that read the memory since.
    pub(crate) fn write_on(&mut self, on: &Arc<S>, mut wait: impl FnMut(Wait<'_, S, E>) -> Result<()>) -> Result<()> {
        if let Some(writer) = self.writer.clone() {
            if !Arc::ptr_eq(&writer, on)
                && !self.seen.contains(on)
                && !on.order().has_waited(writer.stream_id(), self.written)
            {
                wait(self.last_write(&writer))?;
            }
        }
        for r in self.seen.take() {
            if !Arc::ptr_eq(&r, on) {
                wait(Wait::Stream { stream: &r, upto: 0 })?;
            }
        }
        Ok(())
    }

    /// The memory was just written in place by work queued on `on`, with `ready` recorded
    /// right after it (when the backend records one).
    pub(crate) fn wrote(&mut self, home: Option<&Arc<S>>, on: &Arc<S>, ready: Option<Arc<E>>) {
        self.writer = Some(Arc::clone(on));
        self.written = on.order().mark_write();
        self.ready = ready;
        self.seen.clear();
        self.add_user(home, on);
    }

    /// Code outside locus writes the memory on `on` from now on (a raw view): `on` is the
    /// writer at once, with a write number no wait covers, so every other stream waits
    /// for all of `on`'s work until the write's end is marked ([`Uses::wrote`]).
    pub(crate) fn claim(&mut self, home: Option<&Arc<S>>, on: &Arc<S>) {
        self.writer = Some(Arc::clone(on));
        self.written = u64::MAX;
        self.ready = None;
        self.seen.clear();
        self.add_user(home, on);
    }

    /// Forgets the writes a capture queued (they never ran): the memory counts as
    /// written on `home`, where nothing is pending, until a replay writes it.
    pub(crate) fn forget_writes(&mut self, home: Option<Arc<S>>) {
        self.writer = home;
        self.ready = None;
        self.written = 0;
        self.seen.clear();
    }
}

/// A buffer's [`Uses`] behind a lock, and the stream id of its writer (0: none) beside
/// it. A read on that stream waits for nothing and records nothing ([`Uses::read_on`]
/// returns at once), so [`Booked::read_on`] decides it from the id alone. The id changes
/// only through a [`Guard`], which stores the writer's id when it is dropped, before the
/// lock is released.
#[derive(Debug)]
pub(crate) struct Booked<S: BookedStream, E> {
    uses: Mutex<Uses<S, E>>,
    writer: AtomicU64,
}

/// The books, locked (or owned), for reading and changing; see [`Booked`].
pub(crate) struct Guard<'a, S: BookedStream, E, B: DerefMut<Target = Uses<S, E>>> {
    uses: B,
    writer: &'a AtomicU64,
}

fn writer_id<S: BookedStream>(w: &Option<Arc<S>>) -> u64 {
    w.as_ref().map_or(0, |s| s.stream_id())
}

impl<S: BookedStream, E> Booked<S, E> {
    pub(crate) fn new(uses: Uses<S, E>) -> Self {
        Booked { writer: AtomicU64::new(writer_id(&uses.writer)), uses: Mutex::new(uses) }
    }

    /// The books, locked.
    pub(crate) fn lock(&self) -> Guard<'_, S, E, MutexGuard<'_, Uses<S, E>>> {
        Guard { uses: self.uses.lock().unwrap_or_else(|p| p.into_inner()), writer: &self.writer }
    }

    /// The books of memory only its owner can reach, without a lock.
    pub(crate) fn get_mut(&mut self) -> Guard<'_, S, E, &mut Uses<S, E>> {
        Guard { uses: self.uses.get_mut().unwrap_or_else(|p| p.into_inner()), writer: &self.writer }
    }

    /// [`Uses::read_on`]: nothing to do, and no lock taken, when `on` wrote the memory
    /// last or no stream did.
    pub(crate) fn read_on(
        &self,
        home: Option<&Arc<S>>,
        on: &Arc<S>,
        wait: impl FnOnce(Wait<'_, S, E>) -> Result<()>,
    ) -> Result<()> {
        // Acquire: pairs with the guard's release, so the id read is the writer the books
        // held when that lock was released.
        let w = self.writer.load(Ordering::Acquire);
        if w == 0 || w == on.stream_id() {
            return Ok(());
        }
        self.lock().read_on(home, on, wait)
    }
}

impl<S: BookedStream, E, B: DerefMut<Target = Uses<S, E>>> Deref for Guard<'_, S, E, B> {
    type Target = Uses<S, E>;

    fn deref(&self) -> &Uses<S, E> {
        &self.uses
    }
}

impl<S: BookedStream, E, B: DerefMut<Target = Uses<S, E>>> DerefMut for Guard<'_, S, E, B> {
    fn deref_mut(&mut self) -> &mut Uses<S, E> {
        &mut self.uses
    }
}

impl<S: BookedStream, E, B: DerefMut<Target = Uses<S, E>>> Drop for Guard<'_, S, E, B> {
    fn drop(&mut self) {
        // Runs before the lock is released (the guard's fields drop after this).
        self.writer.store(writer_id(&self.uses.writer), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sync::ordering::new_stream_id;

    #[derive(Debug, Default)]
    struct S {
        id: u64,
        order: Order,
    }

    impl BookedStream for S {
        fn stream_id(&self) -> u64 {
            self.id
        }
        fn order(&self) -> &Order {
            &self.order
        }
    }

    fn stream() -> Arc<S> {
        Arc::new(S { id: new_stream_id(), order: Order::default() })
    }

    /// The waits `f` asks for, by stream id (0 for an event).
    fn waits(f: impl FnOnce(&mut dyn FnMut(Wait<'_, S, ()>) -> Result<()>) -> Result<()>) -> Vec<u64> {
        let mut got = Vec::new();
        f(&mut |w| {
            got.push(match w {
                Wait::Event(_) => 0,
                Wait::Stream { stream, .. } => stream.id,
            });
            Ok(())
        })
        .unwrap();
        got
    }

    #[test]
    fn a_read_waits_once_for_another_streams_write_and_never_on_the_writer() {
        let (home, w, r) = (stream(), stream(), stream());
        let mut u: Uses<S, ()> = Uses::new(Some(Arc::clone(&home)), 0);
        u.wrote(Some(&home), &w, None);
        assert_eq!(waits(|f| u.read_on(Some(&home), &w, f)), Vec::<u64>::new(), "the writer waits for nothing");
        assert_eq!(waits(|f| u.read_on(Some(&home), &r, f)), vec![w.id], "a reader waits for the writer");
        assert_eq!(waits(|f| u.read_on(Some(&home), &r, f)), Vec::<u64>::new(), "once");
        assert_eq!(u.users.len(), 2, "both streams are users the free waits for");
    }

    #[test]
    fn a_read_covered_by_an_earlier_wait_waits_for_nothing() {
        let (home, w, r) = (stream(), stream(), stream());
        let mut u: Uses<S, ()> = Uses::new(Some(Arc::clone(&home)), 0);
        u.wrote(Some(&home), &w, None);
        r.order.note_wait(w.id, w.order.writes());
        assert_eq!(waits(|f| u.read_on(Some(&home), &r, f)), Vec::<u64>::new());
    }

    #[test]
    fn a_write_waits_for_the_last_write_and_every_reader_since() {
        let (home, w, r1, r2, next) = (stream(), stream(), stream(), stream(), stream());
        let mut u: Uses<S, ()> = Uses::new(Some(Arc::clone(&home)), 0);
        u.wrote(Some(&home), &w, None);
        waits(|f| u.read_on(Some(&home), &r1, f));
        waits(|f| u.read_on(Some(&home), &r2, f));
        let mut got = waits(|f| u.write_on(&next, f));
        got.sort();
        let mut want = vec![w.id, r1.id, r2.id];
        want.sort();
        assert_eq!(got, want);
        u.wrote(Some(&home), &next, Some(Arc::new(())));
        assert_eq!(waits(|f| u.read_on(Some(&home), &w, f)), vec![0], "a recorded write is waited for by its event");
    }

    #[test]
    fn a_claimed_write_is_covered_by_no_earlier_wait() {
        let (home, w, r) = (stream(), stream(), stream());
        let mut u: Uses<S, ()> = Uses::new(Some(Arc::clone(&home)), 0);
        r.order.note_wait(w.id, u64::MAX - 1);
        u.claim(Some(&home), &w);
        assert_eq!(waits(|f| u.read_on(Some(&home), &r, f)), vec![w.id]);
        u.forget_writes(Some(Arc::clone(&home)));
        assert_eq!(waits(|f| u.read_on(Some(&home), &home, f)), Vec::<u64>::new());
    }

    #[test]
    fn a_booked_read_skips_the_books_only_on_the_last_writers_stream() {
        let (home, w, r) = (stream(), stream(), stream());
        let b: Booked<S, ()> = Booked::new(Uses::new(Some(Arc::clone(&home)), 0));
        assert_eq!(waits(|f| b.read_on(Some(&home), &home, f)), Vec::<u64>::new(), "the writer reads freely");
        b.lock().wrote(Some(&home), &w, None);
        assert_eq!(waits(|f| b.read_on(Some(&home), &home, f)), vec![w.id], "the old writer waits for the new");
        assert_eq!(waits(|f| b.read_on(Some(&home), &w, f)), Vec::<u64>::new());
        let mut b = b;
        b.get_mut().claim(Some(&home), &r);
        assert_eq!(waits(|f| b.read_on(Some(&home), &w, f)), vec![r.id], "a change without a lock counts too");
    }
}

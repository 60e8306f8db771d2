//! One exchange with the peers: reading a message checked against what this rank
//! expects, sending to and reading from every peer at once, and breaking the group when
//! an exchange fails.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::net::TcpStream;
use std::thread;

use super::tcp::{State, Tcp};
use super::wire::{drain, dtype_name, write_msg, Header, Kind};
use super::{describe, dist, Link};
use crate::element::Element;
use crate::error::{Error, Result};

impl Tcp {
    /// The connections, or the error that broke the group.
    fn state(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &state.broken {
            Some(e) => Err(e.clone()),
            None => Ok(state),
        }
    }

    /// Runs one exchange on `state`, marking the group broken when it fails.
    pub(super) fn run<R>(&self, f: impl FnOnce(&mut State) -> Result<R>) -> Result<R> {
        let mut state = self.state()?;
        let out = f(&mut state);
        if let Err(e) = &out {
            state.broken = Some(match e {
                Error::Dist { op, reason } => {
                    Error::Dist { op, reason: format!("{reason} (the group broke in this call; make a new one)") }
                }
                other => other.clone(),
            });
        }
        out
    }

    /// Reads one message from `peer` and checks its header against `want` (the shape
    /// too when `check_shape`), then reads its `want.count` elements.
    pub(super) fn read_checked<T: Element>(
        &self,
        op: &'static str,
        peer: usize,
        r: &mut TcpStream,
        want: &Header,
        check_shape: bool,
    ) -> std::result::Result<Vec<T>, String> {
        let me = self.rank;
        let got = Header::read(r).map_err(|e| describe(peer, &e, self.timeout))?;
        let ok = got.kind == want.kind
            && got.dtype == want.dtype
            && got.count == want.count
            && (!check_shape || got.shape == want.shape);
        if !ok {
            // Read past the payload, so that no data is left unread when this process
            // closes the socket (which would reset the connection and lose what the peer
            // has yet to read from this side, e.g. its own view of this mismatch).
            drain(r, &got);
        }
        if got.kind != want.kind {
            let theirs =
                Kind::from_u8(got.kind).map_or_else(|| format!("unknown message {}", got.kind), |k| k.name().into());
            return Err(format!(
                "rank {peer} sent a `{theirs}` message while rank {me} is in `{op}`: \
                 every rank must call the same collectives in the same order"
            ));
        }
        if got.dtype != want.dtype {
            return Err(format!(
                "rank {peer} has {} elements but rank {me} has {}",
                dtype_name(got.dtype),
                dtype_name(want.dtype)
            ));
        }
        if check_shape && got.shape != want.shape {
            return Err(format!("rank {peer} has shape {:?} but rank {me} has shape {:?}", got.shape, want.shape));
        }
        if got.count != want.count {
            return Err(format!("rank {peer} sent {} elements but rank {me} expects {}", got.count, want.count));
        }
        let mut data = vec![T::ZERO; want.count];
        r.read_exact(bytemuck::cast_slice_mut(&mut data)).map_err(|e| describe(peer, &e, self.timeout))?;
        Ok(data)
    }

    /// Sends `payload(p)` to every peer `p` (each from its own thread, so that no two
    /// ranks block writing to each other) and reads one message from every peer in rank
    /// order, checked against `want`. Reads every peer even after a failure, so that the
    /// error names every peer that failed and no data is left unread. Returns the
    /// peers' elements by rank (this rank's entry empty).
    pub(super) fn exchange<'a, T: Element>(
        &self,
        state: &mut State,
        op: &'static str,
        want: &Header,
        payload: impl Fn(usize) -> &'a [T],
    ) -> Result<Vec<Vec<T>>> {
        let header = want.encode();
        let timeout = self.timeout;
        let mut failures: BTreeMap<usize, String> = BTreeMap::new();
        let mut received: Vec<Vec<T>> = (0..self.world_size).map(|_| Vec::new()).collect();
        thread::scope(|s| -> Result<()> {
            let mut writers = Vec::new();
            let mut readers = Vec::new();
            for (peer, l) in state.links.iter_mut().enumerate() {
                let Some(Link { read, write }) = l else { continue };
                let bytes: &[u8] = bytemuck::cast_slice(payload(peer));
                let header = &header;
                let w = thread::Builder::new()
                    .name(format!("locus-dist-send-{peer}"))
                    .spawn_scoped(s, move || write_msg(write, header, bytes))
                    .map_err(|e| Error::Thread { message: e.to_string() })?;
                writers.push((peer, w));
                readers.push((peer, read));
            }
            for (peer, r) in readers {
                match self.read_checked::<T>(op, peer, r, want, true) {
                    Ok(data) => received[peer] = data,
                    Err(reason) => {
                        failures.insert(peer, reason);
                    }
                }
            }
            for (peer, w) in writers {
                let res = w.join().unwrap_or_else(|_| Err(io::Error::other("the sending thread panicked")));
                if let Err(e) = res {
                    failures.entry(peer).or_insert_with(|| describe(peer, &e, timeout));
                }
            }
            Ok(())
        })?;
        if failures.is_empty() {
            Ok(received)
        } else {
            Err(dist(op, failures.into_values().collect::<Vec<_>>().join("; ")))
        }
    }
}

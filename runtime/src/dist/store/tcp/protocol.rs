//! The framing and constants of the `TCPStore` protocol (the module doc of
//! [`tcp_store`](super) describes it): command bytes, replies, limits, and the reading and
//! writing of lengths, strings and key lists.

use std::io::{self, ErrorKind, Read};

pub(super) const MAGIC: u32 = 0x3C85_F7CE;
pub(super) const VALIDATE: u8 = 0;
pub(super) const SET: u8 = 1;
pub(super) const COMPARE_SET: u8 = 2;
pub(super) const GET: u8 = 3;
pub(super) const ADD: u8 = 4;
pub(super) const CHECK: u8 = 5;
pub(super) const WAIT: u8 = 6;
pub(super) const GETNUMKEYS: u8 = 7;
pub(super) const DELETE_KEY: u8 = 8;
pub(super) const APPEND: u8 = 9;
pub(super) const MULTI_GET: u8 = 10;
pub(super) const MULTI_SET: u8 = 11;
pub(super) const CANCEL_WAIT: u8 = 12;
pub(super) const PING: u8 = 13;
pub(super) const STOP_WAITING: u8 = 0;
pub(super) const WAIT_CANCELED: u8 = 1;
pub(super) const KEY_PREFIX: &str = "/";
pub(super) const INIT_KEY: &str = "init/";
/// What this server accepts (more than torch's libuv server) and this client reads.
pub(super) const MAX_KEY: u64 = 64 << 10;
pub(super) const MAX_VALUE: u64 = 1 << 30;
pub(super) const MAX_KEYS: u64 = 128 << 10;
/// The most bytes one reply holds (`MULTI_GET` of many large values), so that a short
/// request cannot make the host buffer more than one value may be.
pub(super) const MAX_REPLY: u64 = MAX_VALUE;
/// A string or value is read in steps that start at this size and double, so that memory
/// follows the bytes that arrived, not the length a peer claims.
const READ_STEP: u64 = 64 << 10;

pub(super) fn put(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    buf.extend_from_slice(bytes);
}

pub(super) fn read_array<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

pub(super) fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    read_array(r).map(u64::from_le_bytes)
}

/// A `u64` length, at most `max`, then that many bytes. The buffer grows as they arrive
/// (to at most twice what arrived, or `READ_STEP`), so a length with no bytes behind it
/// costs nothing.
pub(super) fn read_bytes(r: &mut impl Read, max: u64) -> io::Result<Vec<u8>> {
    let n = read_u64(r)?;
    if n > max {
        return Err(io::Error::new(ErrorKind::InvalidData, format!("a length of {n} bytes, over {max}")));
    }
    let mut v = Vec::new();
    while (v.len() as u64) < n {
        let start = v.len();
        let step = (n - start as u64).min(READ_STEP.max(start as u64)) as usize;
        v.reserve_exact(step);
        v.resize(start + step, 0);
        r.read_exact(&mut v[start..])?;
    }
    Ok(v)
}

pub(super) fn read_key(r: &mut impl Read) -> io::Result<String> {
    String::from_utf8(read_bytes(r, MAX_KEY)?).map_err(|e| io::Error::new(ErrorKind::InvalidData, e))
}

/// A count of keys (or of key-value pairs), at most [`MAX_KEYS`].
pub(super) fn read_count(r: &mut impl Read) -> io::Result<u64> {
    let n = read_u64(r)?;
    if n > MAX_KEYS {
        return Err(io::Error::new(ErrorKind::InvalidData, format!("{n} keys in one call, over {MAX_KEYS}")));
    }
    Ok(n)
}

pub(super) fn read_keys(r: &mut impl Read) -> io::Result<Vec<String>> {
    (0..read_count(r)?).map(|_| read_key(r)).collect()
}

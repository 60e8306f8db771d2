//! The wire format between ranks: the hello that opens a connection, and the header
//! that precedes every message's elements.

use std::io::{self, Read, Write};
use std::net::TcpStream;

use crate::element::DType;

/// The first bytes of every hello.
const MAGIC: &[u8; 8] = b"LOCUSPG\x01";
/// The most dims a message's shape may have.
const MAX_DIMS: usize = 64;
/// The most payload bytes read past after a mismatched header: more is a garbled or
/// hostile header, and the connection is given up instead (the group breaks anyway).
const MAX_DRAIN: usize = 1 << 30;

/// The kind of a message: the collective that sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    AllReduce = 1,
    Broadcast = 2,
    AllGather = 3,
    ReduceScatter = 4,
    Barrier = 5,
    Send = 6,
}

impl Kind {
    pub(super) fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => Kind::AllReduce,
            2 => Kind::Broadcast,
            3 => Kind::AllGather,
            4 => Kind::ReduceScatter,
            5 => Kind::Barrier,
            6 => Kind::Send,
            _ => return None,
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all_reduce",
            Kind::Broadcast => "broadcast",
            Kind::AllGather => "all_gather",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::Barrier => "barrier",
            Kind::Send => "send",
        }
    }
}

fn dtype_code(d: DType) -> u8 {
    match d {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::I32 => 2,
        DType::U8 => 3,
        DType::BF16 => 4,
        DType::F16 => 5,
        DType::I64 => 6,
    }
}

pub(super) fn dtype_name(code: u8) -> String {
    match code {
        0 => "f32".into(),
        1 => "f64".into(),
        2 => "i32".into(),
        3 => "u8".into(),
        4 => "bf16".into(),
        5 => "f16".into(),
        6 => "i64".into(),
        c => format!("unknown type {c}"),
    }
}

/// What a message says about itself: the collective, element type and shape of the
/// sender's tensor, and how many elements follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) kind: u8,
    pub(super) dtype: u8,
    pub(super) shape: Vec<usize>,
    pub(super) count: usize,
}

impl Header {
    pub(super) fn new(kind: Kind, dtype: DType, shape: &[usize], count: usize) -> Self {
        Self { kind: kind as u8, dtype: dtype_code(dtype), shape: shape.to_vec(), count }
    }

    /// `[kind u8][dtype u8][0 u8; 2][ndim u32][dims u64 ...][count u64]`, little-endian.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + 8 * self.shape.len());
        out.extend_from_slice(&[self.kind, self.dtype, 0, 0]);
        out.extend_from_slice(&(self.shape.len() as u32).to_le_bytes());
        for &d in &self.shape {
            out.extend_from_slice(&(d as u64).to_le_bytes());
        }
        out.extend_from_slice(&(self.count as u64).to_le_bytes());
        out
    }

    pub(super) fn read(r: &mut impl Read) -> io::Result<Self> {
        let mut head = [0u8; 8];
        r.read_exact(&mut head)?;
        let ndim = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if ndim > MAX_DIMS {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a garbled header ({ndim} dims)")));
        }
        let mut rest = vec![0u8; 8 * (ndim + 1)];
        r.read_exact(&mut rest)?;
        let mut words = rest.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize);
        let shape: Vec<usize> = words.by_ref().take(ndim).collect();
        let count = words.next().expect("the count");
        Ok(Self { kind: head[0], dtype: head[1], shape, count })
    }
}

/// Reads and drops the payload that `h` announces, if it is of a sane size.
pub(super) fn drain(r: &mut TcpStream, h: &Header) {
    let size = match h.dtype {
        0 | 2 => 4,
        1 | 6 => 8,
        3 => 1,
        4 | 5 => 2,
        _ => return,
    };
    if let Some(n) = h.count.checked_mul(size).filter(|&n| n <= MAX_DRAIN) {
        let _ = io::copy(&mut r.take(n as u64), &mut io::sink());
    }
}

pub(super) fn write_msg(w: &mut TcpStream, header: &[u8], payload: &[u8]) -> io::Result<()> {
    if let Err(e) = crate::faults::io(crate::faults::Point::Collective) {
        // As a connection that broke: the peer sees its end at once.
        let _ = w.shutdown(std::net::Shutdown::Both);
        return Err(e);
    }
    w.write_all(header)?;
    w.write_all(payload)?;
    w.flush()
}

/// The hello: magic, rank, world size.
pub(super) fn hello(rank: usize, world_size: usize) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&(rank as u32).to_le_bytes());
    h[12..].copy_from_slice(&(world_size as u32).to_le_bytes());
    h
}

/// Reads a hello: the peer's rank and world size.
pub(super) fn read_hello(r: &mut TcpStream) -> io::Result<(usize, usize)> {
    let mut h = [0u8; 16];
    r.read_exact(&mut h)?;
    if &h[..8] != MAGIC {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a locus process group (wrong hello)"));
    }
    let rank = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let world = u32::from_le_bytes([h[12], h[13], h[14], h[15]]) as usize;
    Ok((rank, world))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::{drain, Header, Kind};
    use crate::element::DType;

    /// `drain` reads exactly the payload a header announces, for every element type: the
    /// byte after it is the next message's first.
    #[test]
    fn drain_reads_past_exactly_the_payload_of_every_type() {
        for dtype in [DType::F32, DType::F64, DType::I32, DType::U8, DType::BF16, DType::F16, DType::I64] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (mut rx, _) = listener.accept().unwrap();
            let header = Header::new(Kind::AllGather, dtype, &[3], 3);
            tx.write_all(&header.encode()).unwrap();
            tx.write_all(&vec![0x11u8; 3 * dtype.size()]).unwrap();
            tx.write_all(&[0xAB]).unwrap();
            let got = Header::read(&mut rx).unwrap();
            drain(&mut rx, &got);
            let mut next = [0u8];
            rx.read_exact(&mut next).unwrap();
            assert_eq!(next[0], 0xAB, "{dtype}: drain did not read exactly the payload");
        }
    }
}

// A peer token cannot be made by hand: only `enable_peer_access` returns one.
use locus::{Cuda, PeerAccess};

fn main() {
    let _peer: PeerAccess<Cuda<0>, Cuda<1>> = PeerAccess { _devices: std::marker::PhantomData };
}

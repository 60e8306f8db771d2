// Enabling peer access does not make `+` work across GPUs: ops on two devices are
// methods of the `PeerAccess` token (`peer.add(&a, &b)`).
use locus::{enable_peer_access, Cuda, Tensor};

fn main() -> locus::Result<()> {
    let _peer = enable_peer_access::<Cuda<0>, Cuda<1>>()?;
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let b = Tensor::<Cuda<1>>::ones([2])?;
    let _c = (&a + &b)?;
    Ok(())
}

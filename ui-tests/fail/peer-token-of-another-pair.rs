// A peer token covers its two devices only: the token of cuda:0 and cuda:1 does not
// take a tensor on cuda:2.
use locus::{enable_peer_access, Cuda, Tensor};

fn main() -> locus::Result<()> {
    let peer = enable_peer_access::<Cuda<0>, Cuda<1>>()?;
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let c = Tensor::<Cuda<2>>::ones([2])?;
    let _sum = peer.add(&a, &c)?;
    Ok(())
}

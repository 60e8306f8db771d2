// With the token of enable_peer_access, ops take one tensor on each GPU.
// With fewer than two devices it prints that it is skipped and returns (an error
// under LOCUS_EXPECT_DEVICES=2 or more).
use locus::{enable_peer_access, Cuda, Tensor};

fn main() -> locus::Result<()> {
    if !locus::testing::needs_devices(2)? {
        return Ok(());
    }
    let peer = enable_peer_access::<Cuda<0>, Cuda<1>>()?;
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let b = Tensor::<Cuda<1>>::full([2], 2.0)?;
    let c: Tensor<Cuda<0>> = peer.add(&a, &b)?;
    assert_eq!(c.to_vec()?, vec![3.0, 3.0]);
    let d: Tensor<Cuda<1>> = peer.reverse().mul(&b, &a)?;
    assert_eq!(d.to_vec()?, vec![2.0, 2.0]);
    Ok(())
}

// `with_device!` separates the device from the block with `=>`.
use locus::with_device;

fn main() {
    let _ = with_device!(1 { 2 + 2 });
}

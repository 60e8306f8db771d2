// A bare name in `with_device!` is a const generic; a run-time value needs `dyn`.
use locus::with_device;

fn main() {
    let rank = 1u32;
    let _ = with_device!(rank => { 2 + 2 });
}

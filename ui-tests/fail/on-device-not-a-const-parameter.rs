// A bare name must be a const generic of the fn; a run-time value needs `dyn`.
use locus::on_device;

#[on_device(rank)]
fn step(rank: usize) -> usize {
    rank
}

fn main() {}

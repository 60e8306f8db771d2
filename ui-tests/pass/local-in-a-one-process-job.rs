// `Local` is this process's GPU: `dist::init` binds it (here a job of one process), so the
// training code is typed, `Tensor<Local>`, instead of `Dyn`.
use locus::dist::{init_with, Launch, ReduceOp};
use locus::{Local, Tensor};

fn step(x: &Tensor<Local>) -> locus::Result<Tensor<Local>> {
    x * 0.5
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let launch = Launch::builder().rank(0, 1).master("127.0.0.1", port).build()?;
    let d = init_with(launch, std::time::Duration::from_secs(30))?;
    let _local: Local = d.local()?;
    let g = step(&Tensor::<Local>::full([3], 4.0)?)?;
    let sum = d.group().all_reduce(&g, ReduceOp::Sum)?;
    assert_eq!(sum.to_vec()?, vec![2.0; 3]);
    Ok(())
}

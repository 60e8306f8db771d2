//! Roles (`locus::role!`): placements named for what they do, bound to devices at
//! start-up. Binding is once per process, so each test declares roles of its own; the
//! `LOCUS_BIND` and `Local` tests run this binary again in processes of their own.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;
use common::ranks::run_ranks;

use locus::dist::{init_with, Launch, ReduceOp};
use locus::{
    bind, bound, current_device, load_safetensors, on_device, role, save_safetensors, with_device, Cpu, DeviceId,
    Error, Event, Local, Role, StaticDevice, Stream, Tensor,
};

/// The role named in an `Err`, or a panic naming what came instead.
fn role_of<T: std::fmt::Debug>(r: locus::Result<T>) -> (&'static str, String) {
    match r {
        Err(e @ Error::Role { role, .. }) => (role, e.to_string()),
        other => panic!("expected Error::Role, got {other:?}"),
    }
}

#[test]
fn an_unbound_role_is_an_err_naming_it_everywhere_a_placement_is_made() {
    role!(Unbound);
    let (role, msg) = role_of(Tensor::<Unbound>::zeros([2]));
    assert_eq!(role, "Unbound");
    assert!(msg.contains("locus::bind::<Unbound>") && msg.contains("LOCUS_BIND=Unbound=cuda:N"), "{msg}");
    assert_eq!(role_of(Tensor::<Unbound, i32>::from_vec(vec![1], [1])).0, "Unbound");
    assert_eq!(role_of(Stream::<Unbound>::new()).0, "Unbound");
    assert_eq!(role_of(Event::<Unbound>::new()).0, "Unbound");
    assert_eq!(role_of(Tensor::<Cpu>::ones([1]).unwrap().to::<Unbound>()).0, "Unbound");
    assert_eq!(role_of(Tensor::<Cpu>::ones([1]).unwrap().into_dyn().try_into_device::<Unbound>()).0, "Unbound");
    assert_eq!(role_of(with_device!(Unbound => 1)).0, "Unbound");
    #[on_device(Unbound)]
    fn on_it() -> locus::Result<DeviceId> {
        Ok(current_device())
    }
    assert_eq!(role_of(on_it()).0, "Unbound");
    let dir = common::ranks::fresh_dir("unbound_checkpoint");
    let path = dir.join("w.safetensors");
    save_safetensors(&path, [("w", &Tensor::<Cpu>::ones([2]).unwrap().into_dyn())]).unwrap();
    assert_eq!(role_of(load_safetensors::<Unbound>(&path)).0, "Unbound");
    std::fs::remove_dir_all(dir).ok();
    assert_eq!(role_of(bound::<Unbound>()).0, "Unbound");
    assert_eq!(role_of(Unbound::resolve()).0, "Unbound");
}

#[test]
fn a_role_binds_once_to_a_gpu_that_exists() {
    role!(Stage);
    let count = locus::device_count().unwrap() as u32;
    let (role, msg) = role_of(bind::<Stage>(DeviceId::Cuda(count)));
    assert_eq!(role, "Stage");
    assert!(msg.contains(&format!("cuda:{count} does not exist")), "{msg}");
    let (_, msg) = role_of(bind::<Stage>(DeviceId::Cpu));
    assert!(msg.contains("not a GPU"), "{msg}");
    assert!(bound::<Stage>().is_err(), "a failed bind binds nothing");
    bind::<Stage>(DeviceId::Cuda(0)).unwrap();
    let (_, msg) = role_of(bind::<Stage>(DeviceId::Cuda(0)));
    assert!(msg.contains("already bound to cuda:0"), "{msg}");
    assert_eq!(bound::<Stage>().unwrap(), DeviceId::Cuda(0));
    assert_eq!(Stage::NAME, "Stage");
}

#[test]
fn two_threads_binding_one_role_get_one_ok() {
    role!(Raced);
    let results: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| bind::<Raced>(DeviceId::Cuda(0)).is_ok())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|&&ok| ok).count(), 1, "{results:?}");
}

/// Two roles on one device: `.to::<Other>()` shares the memory (the same address), and
/// the result is typed for the other role.
#[test]
fn roles_sharing_a_device_convert_without_moving_data() -> locus::Result<()> {
    role!(Encoder, Decoder);
    bind::<Encoder>(DeviceId::Cuda(0))?;
    bind::<Decoder>(DeviceId::Cuda(0))?;
    let x = Tensor::<Encoder>::from_vec(vec![1.0, 2.0, 3.0], [3])?;
    let y: Tensor<Decoder> = x.to::<Decoder>()?;
    assert_eq!(y.device(), DeviceId::Cuda(0));
    let s = Stream::<Encoder>::new()?;
    let t = Stream::<Decoder>::new()?;
    // SAFETY: the views are read on the streams that queued no work on the tensors after
    // they were made; only their addresses are read here.
    let (a, b) = unsafe { (x.raw_view(&s)?.device_ptr(), y.raw_view(&t)?.device_ptr()) };
    assert_eq!(a, b, "the same buffer, not a copy");
    assert_eq!((&y + &y)?.to_vec()?, vec![2.0, 4.0, 6.0]);
    let back = y.to::<Encoder>()?;
    assert_eq!((&back * &x)?.to_vec()?, vec![1.0, 4.0, 9.0]);
    Ok(())
}

/// Two roles on two devices: `.to` copies, and each op runs on its role's device.
#[test]
fn roles_on_two_devices_copy_between_them() -> locus::Result<()> {
    if !locus::testing::needs_devices(2)? {
        return Ok(());
    }
    role!(First, Second);
    bind::<First>(DeviceId::Cuda(1))?;
    bind::<Second>(DeviceId::Cuda(0))?;
    let x = Tensor::<First>::arange(0.0, 4.0, 1.0)?;
    let y = x.to::<Second>()?;
    assert_eq!((x.device(), y.device()), (DeviceId::Cuda(1), DeviceId::Cuda(0)));
    assert_eq!((&y * 2.0)?.to::<First>()?.to_vec()?, vec![0.0, 2.0, 4.0, 6.0]);
    let dyn_y = y.clone().into_dyn();
    assert!(matches!(dyn_y.clone().try_into_device::<First>(), Err(Error::NotOnDevice { .. })));
    assert_eq!(dyn_y.try_into_device::<Second>()?.to_vec()?, vec![0.0, 1.0, 2.0, 3.0]);
    #[on_device(First)]
    fn where_first(x: &Tensor<Here>) -> locus::Result<(DeviceId, Tensor<Here>)> {
        Ok((current_device(), x.exp()?))
    }
    let (now, e) = where_first(&x)?;
    assert_eq!((now, e.device()), (DeviceId::Cuda(1), DeviceId::Cuda(1)));
    assert_eq!(with_device!(Second => current_device())?, DeviceId::Cuda(0));
    Ok(())
}

/// `#[on_device(Role)]` makes the role's device current and `Here` the role; streams,
/// events, graphs of a role work as those of `Cuda<N>`.
#[test]
fn a_role_is_a_placement_for_guards_streams_and_events() -> locus::Result<()> {
    role!(Worker);
    bind::<Worker>(DeviceId::Cuda(0))?;
    #[on_device(Worker)]
    fn step(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
        assert_eq!(current_device(), DeviceId::Cuda(0));
        let s = Stream::<Here>::new()?;
        let y = locus::on_stream(&s, || x * 3.0)?;
        let done = Event::<Here>::new()?;
        done.record(&s)?;
        done.synchronize()?;
        Ok(y)
    }
    let y = step(&Tensor::<Worker>::ones([4])?)?;
    assert_eq!(y.to_vec()?, vec![3.0; 4]);
    let w = with_device!(Worker => Tensor::<Here>::full([2], 5.0))??;
    assert_eq!(w.to::<Cpu>()?.to_vec()?, vec![5.0, 5.0]);
    Ok(())
}

/// A child process of this binary with `LOCUS_BIND` set: `Ok` when it passed.
fn child(test: &str, bind_list: &str) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("LOCUS_ROLES_CHILD", "1")
        .env("LOCUS_BIND", bind_list)
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn in_child() -> bool {
    std::env::var_os("LOCUS_ROLES_CHILD").is_some()
}

role!(FromEnv, Mistyped, OnHost, NotInList);

#[test]
fn locus_bind_binds_roles_at_first_use() {
    if !in_child() {
        let (ok, log) = child("locus_bind_binds_roles_at_first_use", "FromEnv=cuda:0, Mistyped=cuda:x,OnHost=cpu");
        assert!(ok, "the child failed:\n{log}");
        return;
    }
    let x = Tensor::<FromEnv>::ones([2]).unwrap();
    assert_eq!(x.device(), DeviceId::Cuda(0));
    let (role, msg) = role_of(bind::<FromEnv>(DeviceId::Cuda(0)));
    assert!(role == "FromEnv" && msg.contains("LOCUS_BIND already binds it"), "{msg}");
    let (role, msg) = role_of(Tensor::<Mistyped>::zeros([1]));
    assert!(role == "Mistyped" && msg.contains("`cuda:x`"), "{msg}");
    let (role, msg) = role_of(bound::<OnHost>());
    assert!(role == "OnHost" && msg.contains("not a GPU"), "{msg}");
    let (role, msg) = role_of(bound::<NotInList>());
    assert!(role == "NotInList" && msg.contains("not bound"), "{msg}");
}

#[test]
fn a_malformed_locus_bind_is_an_err_for_every_role() {
    if !in_child() {
        let (ok, log) = child("a_malformed_locus_bind_is_an_err_for_every_role", "FromEnv=cuda:0,oops");
        assert!(ok, "the child failed:\n{log}");
        return;
    }
    for r in [role_of(Tensor::<FromEnv>::zeros([1])), role_of(bind::<NotInList>(DeviceId::Cuda(0)))] {
        assert!(r.1.contains("`oops` is not `Role=cuda:N`"), "{}", r.1);
    }
}

/// Three processes join through `dist::init`: each rank that has a device of its own
/// (cuda:rank) gets `Local` bound to it by `init`; on a machine with fewer devices the
/// others have none (`d.local()` is an `Err`), bind `Local` themselves to a shared device,
/// as the ddp example does, and reduce through a host copy (NCCL takes one process a GPU).
fn local_rank_body(rank: usize, world: usize, dir: &Path) -> Result<(), String> {
    let s = |e: Error| e.to_string();
    let port_file = dir.join("port");
    let port: u16 = if rank == 0 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        drop(l);
        std::fs::write(dir.join("port.tmp"), port.to_string()).map_err(|e| e.to_string())?;
        std::fs::rename(dir.join("port.tmp"), &port_file).map_err(|e| e.to_string())?;
        port
    } else {
        let start = std::time::Instant::now();
        loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p.trim().parse().map_err(|e| format!("port file: {e}"))?;
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err("rank 0 never wrote its port".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let count = locus::device_count().map_err(s)?;
    let own = rank < count;
    if bound::<Local>().is_ok() {
        return Err("Local was bound before dist::init".into());
    }
    let launch = Launch::builder().rank(rank, world).local_rank(rank, world).master("127.0.0.1", port);
    let d = init_with(launch.build().map_err(s)?, Duration::from_secs(60)).map_err(s)?;
    let local: Local = match d.local() {
        Ok(local) if own => local,
        Ok(local) => return Err(format!("rank {rank} has no device of its own, yet Local is on {}", local.id())),
        Err(e) if own => return Err(format!("rank {rank} on cuda:{rank}: {e}")),
        Err(_) => {
            bind::<Local>(DeviceId::Cuda((rank % count) as u32)).map_err(s)?;
            Local::resolve().map_err(s)?
        }
    };
    let want = DeviceId::Cuda((rank % count) as u32);
    if (local.id(), bound::<Local>().map_err(s)?) != (want, want) {
        return Err(format!("Local is on {}, not {want}", local.id()));
    }
    let mine = Tensor::<Local>::full([3], (rank + 1) as f32).map_err(s)?;
    let total = (world * (world + 1) / 2) as f32;
    let sum = if count >= world {
        d.group().all_reduce(&mine, ReduceOp::Sum).map_err(s)?.to::<Cpu>().map_err(s)?
    } else {
        d.group().all_reduce(&mine.to::<Cpu>().map_err(s)?, ReduceOp::Sum).map_err(s)?
    };
    if sum.to_vec().map_err(s)? != vec![total; 3] {
        return Err(format!("all_reduce gave {:?}", sum.to_vec()));
    }
    d.group().barrier().map_err(s)
}

use locus::Device;

#[test]
fn three_processes_each_get_local_bound_to_their_device_by_init() {
    run_ranks("three_processes_each_get_local_bound_to_their_device_by_init", 3, local_rank_body);
}

/// Roles wherever a static placement goes: a `Loader` delivering to a role, `nn` layers and
/// an optimizer step on a role, `DataParallel` gathering on a role, a checkpoint loaded
/// onto a role.
#[test]
fn loaders_layers_data_parallel_and_checkpoints_take_roles() -> locus::Result<()> {
    use locus::nn::{self, Linear};
    use locus::optim::AdamW;
    use locus::parallel::{DataParallel, Module};
    use locus::Loader;
    role!(Trainer);
    bind::<Trainer>(DeviceId::Cuda(0))?;
    let data = Tensor::<Cpu>::arange(0.0, 24.0, 1.0)?.reshape([6, 4])?;
    let mut seen = Vec::new();
    for b in Loader::from_dataset(data.clone(), 2, None)?.to::<Trainer>()? {
        let b: Tensor<Trainer> = b?;
        assert_eq!(b.device(), DeviceId::Cuda(0));
        seen.extend(b.to_vec()?);
    }
    assert_eq!(seen, data.to_vec()?);

    let mut layer = Linear::<Trainer>::new(4, 3, 5)?;
    let x = data.to::<Trainer>()?;
    let before = layer.forward(&x)?.to_vec()?;
    layer.forward(&x)?.square()?.mean()?.backward()?;
    AdamW::<Trainer>::new(0.1).step(&mut layer)?;
    assert_ne!(layer.forward(&x)?.to_vec()?, before, "the step moved the weights");
    assert!(nn::named_parameters(&layer).iter().all(|(_, p)| p.device() == DeviceId::Cuda(0)));

    let ids = locus::devices()?;
    let dp = DataParallel::new(Linear::<Trainer>::new(4, 3, 5)?, &ids, Trainer::resolve()?)?;
    let y: Tensor<Trainer> = dp.forward(&data)?;
    let single = dp.module().forward(&x)?;
    let diff = (&y - &single)?.abs()?.max()?.item()?;
    assert!(diff <= 1e-5, "DataParallel gathered on the role differs by {diff}");

    let dir = common::ranks::fresh_dir("role_checkpoint");
    let path = dir.join("w.safetensors");
    save_safetensors(&path, [("x", &x.clone().into_dyn())])?;
    let back = load_safetensors::<Trainer>(&path)?;
    let t: Tensor<Trainer> = back.get::<f32>("x")?;
    assert_eq!(t.to_vec()?, data.to_vec()?);
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

fn saxpy_host(a: f32, x: &[f32], y: &mut [f32], n: usize) {
    for i in 0..n {
        y[i] += a * x[i];
    }
}

#[locus::kernel(source = r#"
    extern "C" __global__ void saxpy(float a, const float* x, float* y, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }
"#, host = saxpy_host)]
fn saxpy<D: locus::Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: usize);

/// A `#[locus::kernel]` launch on tensors of a role, on a stream of the role.
#[test]
fn a_user_kernel_runs_on_a_role() -> locus::Result<()> {
    role!(Kernels);
    bind::<Kernels>(DeviceId::Cuda(0))?;
    let x = Tensor::<Kernels>::arange(0.0, 4.0, 1.0)?;
    let mut y = Tensor::<Kernels>::ones([4])?;
    let s = Stream::<Kernels>::new()?;
    saxpy(2.0, &x, &mut y, 4).on(&s).launch()?;
    assert_eq!(y.to_vec()?, vec![1.0, 3.0, 5.0, 7.0]);
    Ok(())
}

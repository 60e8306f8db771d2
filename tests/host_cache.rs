//! The host-memory cache seen from tensors (issue 21's cache, issue 23's "no page fault
//! per 4 KiB"): a host buffer of a size used before comes back mapped and touched, the
//! cache reports what it holds within its cap, and `release_cached_host` empties it.
//! The cache test is alone in its binary (the page-fault count is the whole process's)
//! but for a test whose work happens in child processes.

use locus::{host_stats, release_cached_host, Cpu, Cuda, Tensor};

/// Minor page faults of this process so far (Linux), else `None`.
fn minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses: minflt is the 10th
    // field of the line, the 8th after the name.
    stat.rsplit_once(')')?.1.split_whitespace().nth(7)?.parse().ok()
}

#[test]
fn host_buffers_are_reused_without_page_faults_within_the_cap_and_released() -> locus::Result<()> {
    let cap = host_stats().cap;
    if cap < 64 << 20 {
        eprintln!("skipped: LOCUS_HOST_CACHE={cap} is below the 64 MiB this test uses");
        return Ok(());
    }
    // 16 MiB and a bit: one size class, which nothing else here uses.
    let n = (4 << 20) + 1234;
    let first = Tensor::<Cpu>::ones([n])?;
    drop(first);
    let before = host_stats();
    assert!(before.bytes_cached >= n * 4, "{before:?}");
    let faults = minor_faults();
    let again = Tensor::<Cpu>::full([n], 2.0)?;
    let after = host_stats();
    assert_eq!(after.cache_hits, before.cache_hits + 1, "{after:?}");
    assert_eq!(after.host_allocs, before.host_allocs, "no fresh memory: {after:?}");
    if let (Some(a), Some(b)) = (faults, minor_faults()) {
        // 16 MiB of fresh 4 KiB pages would be 4096 faults.
        assert!(b - a < 256, "{} page faults for a reused 16 MiB buffer", b - a);
    }
    assert_eq!(again.to_vec()?, vec![2.0; n], "a reused buffer holds only what its op wrote");

    let s = host_stats();
    assert!(s.bytes_cached <= s.cap, "{s:?}");
    assert!(s.bytes_in_use >= n * 4, "the live tensor is in use: {s:?}");
    drop(again);
    let cached = host_stats().bytes_cached;
    assert!(cached >= n * 4);
    assert_eq!(release_cached_host(), cached);
    assert_eq!(host_stats().bytes_cached, 0);
    // After a release the next buffer is fresh memory again.
    let allocs = host_stats().host_allocs;
    drop(Tensor::<Cpu>::ones([n])?);
    assert_eq!(host_stats().host_allocs, allocs + 1);

    // Simulated devices draw from the same cache; their memory comes back once the
    // stream's jobs are done with it (a job may drop its hold just after the sync). On a
    // GPU device memory is the driver's, not this cache's.
    if locus::backend_name()? != "host" {
        eprintln!("skipped: the device-buffer part (device memory is the driver's on this backend)");
        return Ok(());
    }
    let hits = host_stats().cache_hits;
    let g = Tensor::<Cuda<0>>::from_slice(&vec![2.0; n], [n])?;
    assert_eq!(host_stats().cache_hits, hits + 1, "the device buffer reuses the block");
    let doubled = (&g + &g)?;
    drop(g);
    assert_eq!(doubled.to_vec()?, vec![4.0; n]);
    drop(doubled);
    locus::synchronize(locus::DeviceId::Cuda(0))?;
    let s = host_stats();
    assert!(s.bytes_cached <= s.cap, "{s:?}");
    Ok(())
}

#[test]
fn a_bad_thread_count_or_cache_cap_is_a_clear_error() {
    // The backend reads its configuration once per process: check in a child process.
    if let Some(var) = std::env::var_os("LOCUS_HOST_CACHE_CHILD") {
        let var = var.to_string_lossy().into_owned();
        match Tensor::<Cuda<0>>::zeros([1]) {
            Err(locus::Error::NoBackend { reason, .. }) => {
                assert!(reason.contains(&var), "{reason}");
                println!("child: clear error: {reason}");
            }
            other => panic!("expected NoBackend naming {var}, got {other:?}"),
        }
        return;
    }
    for (var, value) in [("LOCUS_HOST_THREADS", "0"), ("LOCUS_HOST_THREADS", "many"), ("LOCUS_HOST_CACHE", "-1")] {
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", "a_bad_thread_count_or_cache_cap_is_a_clear_error", "--nocapture"])
            .env("LOCUS_HOST_CACHE_CHILD", var)
            .env("LOCUS_BACKEND", "host")
            .env(var, value)
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{var}={value}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("child: clear error"), "{var}={value}: {stdout}");
    }
}

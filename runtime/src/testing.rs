//! What locus' own tests and doc examples use to skip the parts that need more devices
//! than the machine has, and to refuse to skip where the machine should have them.
//!
//! A test that needs two GPUs passes silently on a machine of one unless it says so; on
//! a machine that should have two (a GPU runner), such a skip hides a broken setup. So a
//! skip prints its reason, and `LOCUS_EXPECT_DEVICES=N` turns a skip of a test that
//! needs at most N devices into an error: the runner says how many devices it has, and a
//! test that needs more than that still skips.

use crate::backend;
use crate::error::{Error, Result};

/// The variable that names how many devices the machine is expected to have.
const EXPECT: &str = "LOCUS_EXPECT_DEVICES";

/// Whether this process has `n` devices: `Ok(true)` if so; otherwise prints
/// `skipped: needs {n} devices, found {m}` to stderr and gives `Ok(false)`, unless
/// `LOCUS_EXPECT_DEVICES` is at least `n`, which makes the missing devices an `Err`
/// (so a test that returns it fails, naming what it needed).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cuda, Tensor};
/// if locus::testing::needs_devices(1)? {
///     assert_eq!(Tensor::<Cuda<0>>::ones([2])?.sum()?.item()?, 2.0);
/// }
/// # Ok::<(), locus::Error>(())
/// ```
pub fn needs_devices(n: usize) -> Result<bool> {
    needs_devices_for(n, "this test")
}

/// [`needs_devices`] for a part of a test, named by `what` in the skip's reason
/// (`skipped: {what} needs {n} devices, found {m}`).
pub fn needs_devices_for(n: usize, what: &str) -> Result<bool> {
    let found = backend::device_count()?;
    match decide(n, found, std::env::var(EXPECT).ok().as_deref(), what)? {
        Decision::Run => Ok(true),
        Decision::Skip(reason) => {
            eprintln!("{reason}");
            Ok(false)
        }
    }
}

/// What a test needing `n` devices does when `found` exist.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The devices are there.
    Run,
    /// They are not, and nobody expects them: the reason to print.
    Skip(String),
}

/// The rule, apart from the process' environment: run when `found >= n`; otherwise skip,
/// unless `expect` (the value of `LOCUS_EXPECT_DEVICES`) is at least `n`, which is an
/// error. A value of `expect` that is not a count is an error too.
pub(crate) fn decide(n: usize, found: usize, expect: Option<&str>, what: &str) -> Result<Decision> {
    let expected = match expect.map(str::trim) {
        None | Some("") => None,
        Some(v) => Some(v.parse::<usize>().map_err(|_| Error::InvalidArgument {
            op: EXPECT,
            reason: format!("`{v}` is not a number of devices (set it to the number of GPUs present, or unset it)"),
        })?),
    };
    if found >= n {
        return Ok(Decision::Run);
    }
    let devices = if n == 1 { "device" } else { "devices" };
    match expected {
        Some(e) if n <= e => Err(Error::InvalidArgument {
            op: EXPECT,
            reason: format!(
                "{what} needs {n} {devices}, found {found}, but {EXPECT}={e} says {e} are present; \
                 check the machine's devices (and CUDA_VISIBLE_DEVICES), or lower {EXPECT}"
            ),
        }),
        _ => Ok(Decision::Skip(format!("skipped: {what} needs {n} {devices}, found {found}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::{decide, Decision};

    #[test]
    fn enough_devices_run_whatever_is_expected() {
        assert_eq!(decide(2, 2, None, "t").unwrap(), Decision::Run);
        assert_eq!(decide(1, 4, Some("1"), "t").unwrap(), Decision::Run);
        assert_eq!(decide(0, 0, Some("8"), "t").unwrap(), Decision::Run);
    }

    #[test]
    fn missing_devices_skip_with_their_reason_when_nothing_is_expected() {
        assert_eq!(decide(2, 1, None, "t").unwrap(), Decision::Skip("skipped: t needs 2 devices, found 1".into()));
        assert_eq!(decide(1, 0, Some(""), "t").unwrap(), Decision::Skip("skipped: t needs 1 device, found 0".into()));
    }

    #[test]
    fn missing_devices_fail_when_at_most_the_expected_count_is_needed() {
        let e = decide(2, 1, Some("2"), "the cuda:1 part").unwrap_err().to_string();
        assert!(e.contains("the cuda:1 part needs 2 devices, found 1"), "{e}");
        assert!(e.contains("LOCUS_EXPECT_DEVICES=2"), "{e}");
        assert!(decide(1, 0, Some("4"), "t").is_err());
    }

    #[test]
    fn a_test_needing_more_than_expected_still_skips() {
        // A one-GPU runner (LOCUS_EXPECT_DEVICES=1) runs the two-device tests as skips.
        assert_eq!(decide(2, 1, Some("1"), "t").unwrap(), Decision::Skip("skipped: t needs 2 devices, found 1".into()));
    }

    #[test]
    fn expected_counts_never_panic_and_name_the_variable_when_refused() {
        use crate::env_fuzz;
        let values = env_fuzz::values(0x4558_5043, &["1", "2", "8", "0", ""], env_fuzz::CASES);
        let mut rng = env_fuzz::Rng::new(0x4558_5043);
        let n = env_fuzz::run("LOCUS_EXPECT_DEVICES", &values, |v| {
            let (n, found) = (rng.below(10), rng.below(10));
            let count = v.trim().parse::<usize>().ok();
            match decide(n, found, Some(v), "t") {
                Ok(Decision::Run) => assert!(found >= n && (count.is_some() || v.trim().is_empty()), "`{v}`"),
                Ok(Decision::Skip(_)) => {
                    assert!(found < n && (v.trim().is_empty() || count.is_some_and(|e| e < n)), "`{v}`")
                }
                Err(e) => {
                    let e = e.to_string();
                    env_fuzz::assert_clear(&e, "LOCUS_EXPECT_DEVICES", v, &[]);
                    match count {
                        Some(c) => assert!(found < n && n <= c, "`{v}`: {e}"),
                        None => assert!(!v.trim().is_empty() && e.contains("is not a number of devices"), "{e}"),
                    }
                }
            }
        });
        assert!(n >= 4000, "{n} values");
    }

    #[test]
    fn an_expected_count_that_is_not_a_number_is_an_error() {
        let e = decide(2, 2, Some("two"), "t").unwrap_err().to_string();
        assert!(e.contains("`two` is not a number of devices"), "{e}");
    }
}

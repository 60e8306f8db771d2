//! Roles: placements a program names (`Encoder`, `Stage0`) and binds to devices at
//! start-up, so that one typed program runs with any device numbering.
//!
//! A role is a type made by [`role!`](crate::role); [`bind`] (or `LOCUS_BIND`) ties it to
//! a device once per process. Every value of a role carries a [`Bound`] that only this
//! module makes, after the binding is read: so a `Tensor<Encoder>` exists only once
//! `Encoder` is bound, and its device never changes after that.

use std::fmt;
use std::sync::{Mutex, OnceLock};

use crate::device::DeviceId;
use crate::error::{Error, Result};

/// A role's binding: set once per process, never changed.
#[doc(hidden)]
pub struct Binding {
    device: OnceLock<DeviceId>,
    /// Serialises binding (explicit and from `LOCUS_BIND`), so that two threads binding
    /// one role get one `Ok` and one `Err`.
    lock: Mutex<()>,
}

impl Binding {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Binding { device: OnceLock::new(), lock: Mutex::new(()) }
    }
}

/// The proof, carried by every value of a role, that the role is bound. Only locus
/// makes one.
#[doc(hidden)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bound(());

impl fmt::Debug for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Bound")
    }
}

/// A placement that names a role of the program rather than a device ordinal: declared
/// with [`role!`](crate::role), bound to a device at start-up with [`bind`] or
/// `LOCUS_BIND`. Every static placement rule holds for roles: tensors of two roles meet
/// only through `.to::<Role>()`, which moves no data when both are bound to one device.
///
/// Implemented by the types [`role!`](crate::role) declares, and by [`Local`].
pub trait Role: Copy + Send + Sync + fmt::Debug + 'static {
    /// The role's name, as `LOCUS_BIND` and error messages spell it.
    const NAME: &'static str;

    #[doc(hidden)]
    fn binding() -> &'static Binding;

    #[doc(hidden)]
    fn from_bound(bound: Bound) -> Self;
}

/// Declares roles: placements named for what they do, bound to a device at start-up.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{role, DeviceId, Tensor};
/// role!(pub Encoder, pub Decoder);
///
/// locus::bind::<Encoder>(DeviceId::Cuda(0))?;
/// locus::bind::<Decoder>(DeviceId::Cuda(0))?;
/// let x = Tensor::<Encoder>::ones([2])?;
/// let y = x.to::<Decoder>()?; // one device: no data moves
/// assert_eq!((x.device(), y.device()), (DeviceId::Cuda(0), DeviceId::Cuda(0)));
/// assert_eq!((&y * 2.0)?.to_vec()?, vec![2.0, 2.0]);
/// # Ok::<(), locus::Error>(())
/// ```
///
/// Mixing two roles in one op does not compile, even when they share a device:
///
/// ```text
/// role!(Encoder, Decoder);
/// fn mix(a: &Tensor<Encoder>, b: &Tensor<Decoder>) { let _ = a + b; }
/// ```
#[macro_export]
macro_rules! role {
    ($($(#[$meta:meta])* $vis:vis $name:ident),+ $(,)?) => {$(
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis struct $name($crate::__private::Bound);

        impl $crate::Role for $name {
            const NAME: &'static str = stringify!($name);

            fn binding() -> &'static $crate::__private::Binding {
                static BINDING: $crate::__private::Binding = $crate::__private::Binding::new();
                &BINDING
            }

            fn from_bound(bound: $crate::__private::Bound) -> Self {
                $name(bound)
            }
        }
    )+};
}

crate::role! {
    /// The role of this process's own GPU in a multi-process job: [`dist::init`](crate::dist::init)
    /// binds it to the rank's device (torchrun's local rank, Slurm's or MPI's, or the one
    /// `LOCUS_DEVICE_MAP` gives), so code run under a launcher is static
    /// (`Tensor<Local>`) rather than `Dyn`. Outside a job, bind it like any role.
    pub Local
}

/// Binds role `R` to `device` for the rest of the process: the one way (with
/// `LOCUS_BIND`) a role gets its device.
///
/// An `Err` naming the role when `device` is not a CUDA device of this machine (real or
/// simulated), when `R` is already bound (binding is once per process, so a tensor of `R`
/// can never change device), or when `LOCUS_BIND` also names `R`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{role, DeviceId, Error};
/// role!(Stage0);
/// assert!(matches!(locus::bind::<Stage0>(DeviceId::Cuda(4096)), Err(Error::Role { role: "Stage0", .. })));
/// locus::bind::<Stage0>(DeviceId::Cuda(0))?;
/// assert!(locus::bind::<Stage0>(DeviceId::Cuda(0)).is_err(), "bound once");
/// assert_eq!(locus::bound::<Stage0>()?, DeviceId::Cuda(0));
/// # Ok::<(), locus::Error>(())
/// ```
pub fn bind<R: Role>(device: DeviceId) -> Result<()> {
    if let Some(entry) = env_entry(R::NAME)? {
        return Err(role_err::<R>(format!(
            "LOCUS_BIND already binds it to {entry}; bind each role once, in LOCUS_BIND or in the program"
        )));
    }
    set::<R>(device, "")
}

/// The device role `R` is bound to: by [`bind`], or else by `LOCUS_BIND` (read the first
/// time an unbound role is used). An `Err` naming the role when neither binds it.
pub fn bound<R: Role>() -> Result<DeviceId> {
    if let Some(&d) = R::binding().device.get() {
        return Ok(d);
    }
    match env_entry(R::NAME)? {
        Some(entry) => {
            let device = entry
                .parse::<DeviceId>()
                .map_err(|e| role_err::<R>(format!("`LOCUS_BIND` gives it `{entry}`: {e}")))?;
            match set::<R>(device, " (from LOCUS_BIND)") {
                // Another thread bound it from the same entry meanwhile.
                Err(_) if R::binding().device.get() == Some(&device) => Ok(device),
                r => r.map(|()| device),
            }
        }
        None => Err(role_err::<R>(format!(
            "the role is not bound to a device: call `locus::bind::<{0}>(device)` at start-up, \
             or set LOCUS_BIND={0}=cuda:N",
            R::NAME
        ))),
    }
}

/// Binds [`Local`] to this rank's `device` for `dist::init`, unless it is bound already
/// (to the same device: a second group of the same rank; to another: ranks sharing one
/// process, which [`Dist::local`](crate::dist::Dist::local) then refuses).
pub(crate) fn bind_local(device: DeviceId) {
    if bound::<Local>().is_err() {
        // Only a race with another binding can fail here; `Dist::local` reports it.
        let _ = set::<Local>(device, " (by dist::init)");
    }
}

/// The value of role `R`, once bound (see [`bound`]).
pub(crate) fn value<R: Role>() -> Result<R> {
    bound::<R>()?;
    Ok(R::from_bound(Bound(())))
}

/// The device of a value of `R`: bound, since the value exists.
pub(crate) fn device_of<R: Role>() -> DeviceId {
    // A value of `R` is made only after its binding is set, which never changes; the
    // fallback names no device of any machine, so it could only fail an op, never alias.
    R::binding().device.get().copied().unwrap_or(DeviceId::Cuda(u32::MAX))
}

fn set<R: Role>(device: DeviceId, from: &str) -> Result<()> {
    let binding = R::binding();
    let _serial = binding.lock.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&d) = binding.device.get() {
        return Err(role_err::<R>(format!(
            "it is already bound to {d}; a role is bound once per process, so its tensors never change device"
        )));
    }
    let DeviceId::Cuda(ordinal) = device else {
        return Err(role_err::<R>(format!("{device}{from} is not a GPU: a role names a CUDA device, `cuda:N`")));
    };
    let count = crate::backend::device_count()?;
    if ordinal as usize >= count {
        return Err(role_err::<R>(format!(
            "{device}{from} does not exist: {count} device(s) here (cuda:0 to cuda:{})",
            count.saturating_sub(1)
        )));
    }
    // The lock makes this the only setter.
    let _ = binding.device.set(device);
    Ok(())
}

fn role_err<R: Role>(reason: String) -> Error {
    Error::Role { role: R::NAME, reason }
}

/// The device `LOCUS_BIND` names for role `name`, if it names one. `LOCUS_BIND` is a
/// comma-separated list of `Role=device` (`Encoder=cuda:2,Decoder=cuda:0`); a malformed
/// list, or one naming a role twice, is an `Err` for every role.
fn env_entry(name: &'static str) -> Result<Option<String>> {
    static PARSED: OnceLock<std::result::Result<Vec<(String, String)>, String>> = OnceLock::new();
    let parsed = PARSED.get_or_init(|| match std::env::var("LOCUS_BIND") {
        Ok(v) => parse_bind_list(&v),
        Err(std::env::VarError::NotPresent) => Ok(Vec::new()),
        Err(std::env::VarError::NotUnicode(_)) => Err("LOCUS_BIND is not valid UTF-8".into()),
    });
    match parsed {
        Ok(list) => Ok(list.iter().find(|(role, _)| role == name).map(|(_, device)| device.clone())),
        Err(why) => Err(Error::Role { role: name, reason: why.clone() }),
    }
}

/// `Role=device` pairs of a `LOCUS_BIND` value; the devices are checked when their role
/// is used.
fn parse_bind_list(v: &str) -> std::result::Result<Vec<(String, String)>, String> {
    let mut list: Vec<(String, String)> = Vec::new();
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((role, device)) = item.split_once('=') else {
            return Err(format!("LOCUS_BIND entry `{item}` is not `Role=cuda:N`"));
        };
        let (role, device) = (role.trim(), device.trim());
        let ident = role.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
            && role.chars().all(|c| c.is_alphanumeric() || c == '_');
        if !ident || device.is_empty() {
            return Err(format!("LOCUS_BIND entry `{item}` is not `Role=cuda:N` (a role is a type name)"));
        }
        if list.iter().any(|(r, _)| r == role) {
            return Err(format!("LOCUS_BIND names `{role}` twice"));
        }
        list.push((role.to_string(), device.to_string()));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::parse_bind_list;
    use crate::env_fuzz;

    #[test]
    fn bind_lists_never_panic_and_hold_no_more_than_the_value() {
        let near = ["Encoder=cuda:2,Decoder=cuda:0", "A=cuda:0", "_x9=cuda:1,", "A=cuda:0,A=cuda:1", "é=cuda:0"];
        let values = env_fuzz::values(0x4249_4e44, &near, env_fuzz::CASES);
        let n = env_fuzz::run("LOCUS_BIND", &values, |v| match parse_bind_list(v) {
            Ok(list) => {
                let held: usize = list.iter().map(|(r, d)| r.len() + d.len()).sum();
                assert!(held <= v.len() && list.len() <= v.len() / 2, "`{v}` gave {list:?}");
                for (i, (role, device)) in list.iter().enumerate() {
                    assert!(!role.is_empty() && !device.is_empty() && !device.contains(','), "`{v}`: {list:?}");
                    assert!(role.chars().all(|c| c.is_alphanumeric() || c == '_'), "`{v}`: `{role}`");
                    assert!(list[..i].iter().all(|(r, _)| r != role), "`{v}` names `{role}` twice");
                }
            }
            Err(e) => {
                let says = if e.contains("twice") { "twice" } else { "is not `Role=cuda:N`" };
                env_fuzz::assert_clear(&e, "LOCUS_BIND", v, &[says]);
            }
        });
        assert!(n >= 4000, "{n} values");
    }

    #[test]
    fn bind_lists_parse_or_say_which_entry_is_wrong() {
        let ok = parse_bind_list(" Encoder=cuda:2, Decoder = cuda:0 ,").unwrap();
        assert_eq!(ok, vec![("Encoder".into(), "cuda:2".into()), ("Decoder".into(), "cuda:0".into())]);
        assert!(parse_bind_list("").unwrap().is_empty());
        for (bad, says) in [
            ("Encoder", "`Encoder` is not"),
            ("Encoder=", "`Encoder=` is not"),
            ("=cuda:0", "`=cuda:0` is not"),
            ("En coder=cuda:0", "`En coder=cuda:0`"),
            ("9x=cuda:0", "`9x=cuda:0`"),
            ("A=cuda:0,A=cuda:1", "names `A` twice"),
        ] {
            let e = parse_bind_list(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}

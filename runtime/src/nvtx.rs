//! NVTX ranges for Nsight Systems and Nsight Compute, with no NVTX library to link.
//!
//! NVTX 3 is a header-only protocol: a profiler that wants ranges names its injection
//! library in `NVTX_INJECTION64_PATH` (`nsys` and `ncu` set it for the process they
//! run), and the program loads it at its first NVTX call, calls its
//! `InitializeInjectionNvtx2` with a function that hands out the program's tables of
//! NVTX entry points, and from then on calls whatever the tool wrote into them. This is
//! that program side, for the two entry points locus uses: `nvtxRangePushA` and
//! `nvtxRangePop`, the nested per-thread ranges of [`range!`](crate::range).
//!
//! Without the variable (no profiler) nothing is loaded and a range costs one load of an
//! initialised `OnceLock`. A tool that fails to load or to initialise leaves NVTX off.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::{Mutex, OnceLock};

/// `int nvtxRangePushA(const char*)`.
type PushA = unsafe extern "C" fn(*const c_char) -> c_int;
/// `int nvtxRangePop(void)`.
type Pop = unsafe extern "C" fn() -> c_int;
/// A slot of a function table: a function pointer of the slot's type, or null.
type Slot = *mut c_void;

/// `NVTX_CB_MODULE_CORE`: the module of the push, pop and mark entry points.
const MODULE_CORE: c_uint = 1;
/// `NVTX_CBID_CORE_RangePushA` and `NVTX_CBID_CORE_RangePop`: their slots in it.
const CORE_RANGE_PUSH_A: usize = 9;
const CORE_RANGE_POP: usize = 11;
/// `NVTX_CBID_*_SIZE` of each module, 1 (core) to 6 (sync): the slots of its table, the
/// first (invalid) one included.
const MODULE_SIZES: [usize; MODULES] = [16, 9, 15, 7, 16, 7];
const MODULES: usize = 6;
const MAX_SLOTS: usize = 16;
/// `NVTX_ETID_CALLBACKS` and `NVTX_ETID_VERSIONINFO`: the export tables a tool may ask for.
const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;
/// `NVTX_VERSION`: the version of the NVTX API implemented here.
const NVTX_VERSION: u32 = 3;

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct Callbacks {
    struct_size: usize,
    get_module_function_table: unsafe extern "C" fn(c_uint, *mut *mut *mut Slot, *mut c_uint) -> c_int,
}

/// `NvtxExportTableVersionInfo`.
#[repr(C)]
struct VersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: unsafe extern "C" fn(u32),
}

/// The tables the tool writes into, one per NVTX module (core, CUDA, OpenCL, CUDA
/// runtime, core 2, sync), each with its slot 0 unused, as NVTX's own globals lay them
/// out; and per module the array of pointers to its slots that `GetModuleFunctionTable`
/// hands out (one null entry past the end). A tool fills the modules it supports; locus
/// calls only the core module's push and pop.
struct Tables {
    slots: [[Slot; MAX_SLOTS]; MODULES],
    table: [[*mut Slot; MAX_SLOTS + 1]; MODULES],
}

/// The entry points the tool filled in.
#[derive(Clone, Copy)]
struct Entries {
    push: Option<PushA>,
    pop: Option<Pop>,
}

// SAFETY: the tables are written only during `init` (one thread, inside `OnceLock`) and
// read after it; the pointers they hold are the tool's functions and this static's slots.
unsafe impl Send for Tables {}
// SAFETY: as above: no write after `init`.
unsafe impl Sync for Tables {}

/// The tables, made once at a fixed address (the tool keeps the pointers it is given).
static TABLES: OnceLock<Box<Mutex<Tables>>> = OnceLock::new();
static ENTRIES: OnceLock<Option<Entries>> = OnceLock::new();
static CALLBACKS: Callbacks = Callbacks { struct_size: size_of::<Callbacks>(), get_module_function_table };
static VERSION_INFO: VersionInfo = VersionInfo {
    struct_size: size_of::<VersionInfo>(),
    version: NVTX_VERSION,
    reserved0: 0,
    set_injection_nvtx_version,
};

unsafe extern "C" fn set_injection_nvtx_version(_version: u32) {}

fn tables() -> &'static Mutex<Tables> {
    TABLES.get_or_init(|| {
        Box::new(Mutex::new(Tables {
            slots: [[std::ptr::null_mut(); MAX_SLOTS]; MODULES],
            table: [[std::ptr::null_mut(); MAX_SLOTS + 1]; MODULES],
        }))
    })
}

/// `nvtxGetExportTable`: what the tool asks for first.
unsafe extern "C" fn get_export_table(id: u32) -> *const c_void {
    match id {
        ETID_CALLBACKS => (&raw const CALLBACKS).cast(),
        ETID_VERSIONINFO => (&raw const VERSION_INFO).cast(),
        _ => std::ptr::null(),
    }
}

/// `GetModuleFunctionTable`: module `module`'s table and its size, as NVTX's own gives
/// them: `NVTX_CBID_*_SIZE` entries (the unused first one included) and a null past them.
unsafe extern "C" fn get_module_function_table(
    module: c_uint,
    out_table: *mut *mut *mut Slot,
    out_size: *mut c_uint,
) -> c_int {
    let Some(tables) = TABLES.get() else { return 0 };
    let Some(m) = (module as usize).checked_sub(1).filter(|&m| m < MODULES) else { return 0 };
    let size = MODULE_SIZES[m];
    let mut t = tables.lock().unwrap_or_else(|p| p.into_inner());
    // The table points at the slots of this same boxed, never-moved value.
    let base: *mut Slot = t.slots[m].as_mut_ptr();
    for i in 1..size {
        t.table[m][i] = base.wrapping_add(i);
    }
    if !out_size.is_null() {
        // SAFETY: the tool passes a valid pointer or null (checked).
        unsafe { *out_size = size as c_uint };
    }
    if !out_table.is_null() {
        // SAFETY: as above.
        unsafe { *out_table = t.table[m].as_mut_ptr() };
    }
    1
}

/// Loads the tool `NVTX_INJECTION64_PATH` names and lets it fill the tables; with
/// `LOCUS_NVTX_DEBUG` set, says on stderr how that went.
fn init() -> Option<Entries> {
    let path = std::env::var_os("NVTX_INJECTION64_PATH").filter(|p| !p.is_empty())?;
    let r = load(&path);
    if std::env::var_os("LOCUS_NVTX_DEBUG").is_some() {
        match &r {
            Ok(e) => eprintln!(
                "locus nvtx: {} initialised; push {}, pop {}",
                path.to_string_lossy(),
                if e.push.is_some() { "set" } else { "not set" },
                if e.pop.is_some() { "set" } else { "not set" }
            ),
            Err(why) => eprintln!("locus nvtx: {}: {why}", path.to_string_lossy()),
        }
    }
    r.ok()
}

fn load(path: &std::ffi::OsStr) -> Result<Entries, String> {
    tables();
    // SAFETY: loading the library runs its initialisers: the profiler's own library,
    // named by the profiler for this purpose.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
    type Init = unsafe extern "C" fn(unsafe extern "C" fn(u32) -> *const c_void) -> c_int;
    // SAFETY: `InitializeInjectionNvtx2` has this signature in the NVTX 3 protocol.
    let entry: Init = *unsafe { lib.get::<Init>(b"InitializeInjectionNvtx2\0") }.map_err(|e| e.to_string())?;
    // SAFETY: the protocol's call: the tool queries `get_export_table` and writes its
    // functions into the slots `get_module_function_table` gives it.
    if unsafe { entry(get_export_table) } == 0 {
        return Err("InitializeInjectionNvtx2 returned 0".into());
    }
    // The tool's functions live as long as its library: keep it loaded.
    std::mem::forget(lib);
    let t = tables().lock().unwrap_or_else(|p| p.into_inner());
    let core = MODULE_CORE as usize - 1;
    let (push, pop) = (t.slots[core][CORE_RANGE_PUSH_A], t.slots[core][CORE_RANGE_POP]);
    // SAFETY: a non-null slot holds the tool's function of that slot's NVTX signature.
    let push = (!push.is_null()).then(|| unsafe { std::mem::transmute::<Slot, PushA>(push) });
    // SAFETY: as above.
    let pop = (!pop.is_null()).then(|| unsafe { std::mem::transmute::<Slot, Pop>(pop) });
    Ok(Entries { push, pop })
}

fn entries() -> Option<Entries> {
    *ENTRIES.get_or_init(init)
}

/// Whether a profiler takes NVTX ranges in this process.
pub(crate) fn is_on() -> bool {
    entries().is_some_and(|e| e.push.is_some())
}

/// Pushes the range `name` on this thread's NVTX stack (nothing without a profiler).
pub(crate) fn push(name: &str) {
    let Some(Entries { push: Some(push), .. }) = entries() else { return };
    let Ok(c) = CString::new(name.replace('\0', " ")) else { return };
    // SAFETY: the tool's `nvtxRangePushA`, given a NUL-terminated string alive for the
    // call (tools copy it).
    unsafe { push(c.as_ptr()) };
}

/// Pops this thread's innermost NVTX range (nothing without a profiler).
pub(crate) fn pop() {
    if let Some(Entries { pop: Some(pop), .. }) = entries() {
        // SAFETY: the tool's `nvtxRangePop`, which takes nothing.
        unsafe { pop() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn fake_pop() -> c_int {
        7
    }

    /// What a tool does: ask for the callbacks table, then the core module's table, and
    /// write its functions into the slots it implements; the pop slot then holds it.
    #[test]
    fn a_tool_finds_and_fills_the_core_slots() {
        tables();
        // SAFETY: the protocol's calls, as a tool makes them, on this module's tables.
        unsafe {
            let cb = get_export_table(ETID_CALLBACKS).cast::<Callbacks>();
            assert!(!cb.is_null() && (*cb).struct_size == size_of::<Callbacks>());
            let v = get_export_table(ETID_VERSIONINFO).cast::<VersionInfo>();
            assert_eq!((*v).version, 3);
            assert!(get_export_table(2).is_null());
            let (mut table, mut size) = (std::ptr::null_mut(), 0);
            assert_eq!(((*cb).get_module_function_table)(0, &mut table, &mut size), 0);
            assert_eq!(((*cb).get_module_function_table)(7, &mut table, &mut size), 0);
            assert_eq!(((*cb).get_module_function_table)(2, &mut table, &mut size), 1);
            assert_eq!(size, 9, "NVTX_CBID_CUDA_SIZE");
            assert!((*table.add(9)).is_null(), "a null past the end");
            assert_eq!(((*cb).get_module_function_table)(MODULE_CORE, &mut table, &mut size), 1);
            assert_eq!(size, 16, "NVTX_CBID_CORE_SIZE");
            assert!((*table).is_null(), "slot 0 is invalid");
            *(*table.add(CORE_RANGE_POP)) = fake_pop as Slot;
        }
        let t = tables().lock().unwrap();
        assert_eq!(t.slots[0][CORE_RANGE_POP], fake_pop as Slot);
        assert!(t.slots[0][CORE_RANGE_PUSH_A].is_null());
    }
}

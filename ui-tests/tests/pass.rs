//! The compile-pass cases (`pass/`): each is a user's program that must compile and run.
//! They compile here as one test crate, each in its own module, rather than under
//! trybuild, which then only checks the compile-fail cases (`cargo check`, no code
//! generation or linking: the ui tests took 131 s of a fresh `cargo test --workspace` on 2
//! cores with the pass cases built by trybuild). Each case's `main` still runs in a process
//! of its own, as under trybuild: roles and `Local` are bound once per process.

use std::process::Command;

/// The environment variable that tells a child process which case to run.
const CASE: &str = "LOCUS_UI_PASS_CASE";

/// What a case's `main` returns, as a test's outcome.
trait Ends {
    fn ends(self) -> Result<(), String>;
}

impl Ends for () {
    fn ends(self) -> Result<(), String> {
        Ok(())
    }
}

impl<E: std::fmt::Debug> Ends for Result<(), E> {
    fn ends(self) -> Result<(), String> {
        self.map_err(|e| format!("{e:?}"))
    }
}

/// Runs case `name`: in the child process it is meant for, its `main`; else a child
/// process of this test binary that runs it, which must succeed.
fn run(name: &str, main: impl FnOnce() -> Result<(), String>) {
    if std::env::var(CASE).is_ok_and(|c| c == name) {
        if let Err(e) = main() {
            panic!("pass/{name}: main returned an error: {e}");
        }
        return;
    }
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args([&format!("{name}::pass"), "--exact", "--nocapture", "--test-threads=1"])
        .env(CASE, name)
        .output()
        .expect("a child process");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "pass/{name} failed in its own process:\n{text}");
}

macro_rules! pass_cases {
    ($($name:ident = $file:literal;)*) => {
        $(
            mod $name {
                include!($file);

                #[test]
                fn pass() {
                    super::run(stringify!($name), || super::Ends::ends(main()));
                }
            }
        )*
    };
}

pass_cases! {
    add_f32_and_bf16_converted = "../pass/add-f32-and-bf16-converted.rs";
    cat_after_copy = "../pass/cat-after-copy.rs";
    copy_host_to_gpu_then_mul = "../pass/copy-host-to-gpu-then-mul.rs";
    copy_then_add = "../pass/copy-then-add.rs";
    derive_to_device = "../pass/derive-to-device.rs";
    dyn_checks_at_run_time = "../pass/dyn-checks-at-run-time.rs";
    generic_over_one_placement = "../pass/generic-over-one-placement.rs";
    graph_capture_replay_write_inputs = "../pass/graph-capture-replay-write-inputs.rs";
    graph_on_dyn = "../pass/graph-on-dyn.rs";
    graph_tuple_of_outputs = "../pass/graph-tuple-of-outputs.rs";
    graph_vec_of_inputs = "../pass/graph-vec-of-inputs.rs";
    kernel_types_and_const_generic_device = "../pass/kernel-types-and-const-generic-device.rs";
    kernel_with_host_fallback = "../pass/kernel-with-host-fallback.rs";
    local_in_a_one_process_job = "../pass/local-in-a-one-process-job.rs";
    on_device_async_fn = "../pass/on-device-async-fn.rs";
    on_device_const_generic = "../pass/on-device-const-generic.rs";
    on_device_custom_error = "../pass/on-device-custom-error.rs";
    on_device_dyn_ordinal = "../pass/on-device-dyn-ordinal.rs";
    on_device_impl_block = "../pass/on-device-impl-block.rs";
    on_device_literal_with_here = "../pass/on-device-literal-with-here.rs";
    on_device_role_with_here = "../pass/on-device-role-with-here.rs";
    peer_ops_with_token = "../pass/peer-ops-with-token.rs";
    pin_then_copy_async = "../pass/pin-then-copy-async.rs";
    role_bind_and_compute = "../pass/role-bind-and-compute.rs";
    role_in_generic_code_and_graphs = "../pass/role-in-generic-code-and-graphs.rs";
    roles_readme_example = "../pass/roles-readme-example.rs";
    streams_in_generic_code = "../pass/streams-in-generic-code.rs";
    streams_of_one_device = "../pass/streams-of-one-device.rs";
    train_with_autograd_and_adamw = "../pass/train-with-autograd-and-adamw.rs";
    with_device_forms = "../pass/with-device-forms.rs";
}

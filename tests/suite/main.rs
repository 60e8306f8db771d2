//! The integration tests that read or set no process-wide state (memory and wait counters,
//! copy tuning, roles, traces, fault injection, the environment) compile as one test
//! binary, one module per former file: a fresh `cargo test --workspace` links one binary
//! instead of twenty-two, and compiles the crate's generic code once for them all (issue
//! 35 build time: the last seven files to join took 19 s off a fresh build on 2 cores).
//! `shape_fuzz` stays alone: joined, it built no faster and its two busy tests slowed the
//! rest. A test that counts or sets something process-wide stays in tests/*.rs,
//! where no other file's tests run beside it.

#[path = "../common/mod.rs"]
mod common;

mod activations;
mod compare_select;
mod consistency;
mod dim_reduce;
mod doc_examples_paste;
mod dyn_properties;
mod dyn_tensor;
mod guard_order;
mod half;
mod host_threads;
mod i64;
mod index_select;
mod layers;
mod loader;
mod more_ops;
mod multi_tensor;
mod ndarray;
mod on_device;
mod ops;
mod softmax;
/// The model of examples/tiny_gpt, for its graphed step (training.rs).
#[path = "../../examples/tiny_gpt/model.rs"]
#[allow(dead_code)]
mod tiny_gpt_model;
mod to_device;
mod training;
mod transpose_dims;

//! The tape: one `Node` per op result that tracks gradients, and one per parameter.
//!
//! A node holds the edges to its inputs' nodes (with the version each input had when
//! the op read it), the op's backward rule (its saved tensors live in the rule's
//! closure), and the stream the op ran on. A parameter's node is a leaf: it holds the
//! accumulated gradient instead of a rule. Nodes are numbered in creation order, and an
//! op's inputs always exist before it, so a backward pass that takes nodes from the
//! highest number down has every contribution to a node's gradient before it runs it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::backend::AnyStream;
use crate::device::DeviceId;
use crate::error::Result;
use crate::tensor::Erased;

/// A backward rule: the gradient of the op's output in, one gradient per input out
/// (`None` where an input tracks no gradient or gets none).
pub(crate) type Rule = Box<dyn Fn(Erased) -> Result<Vec<Option<Erased>>> + Send + Sync>;

/// An input of an op that tracks gradients: its node and that node's version when read.
pub(crate) struct Edge {
    pub node: Arc<Node>,
    pub version: u64,
}

pub(crate) enum Kind {
    /// A parameter: gradients accumulate here across backward passes.
    Leaf { grad: Mutex<Option<Erased>> },
    /// An op's result. The rule is `None` once a backward pass without `retain_graph`
    /// freed it; a `keep` rule (a replica's link to its parameter, which saves nothing)
    /// serves every pass.
    Op { rule: Mutex<Option<Rule>>, stream: Option<(DeviceId, AnyStream)>, keep: bool },
    /// A tensor written in place after an op made it: its values are no function of
    /// the op's inputs any more, so a backward pass through it is an error naming `by`.
    Written { by: &'static str },
}

pub(crate) struct Node {
    pub op: &'static str,
    pub seq: u64,
    pub kind: Kind,
    /// The inputs that track gradients, by input position (`None`: no gradient).
    pub edges: Vec<Option<Edge>>,
    /// Bumped by every in-place write of a tensor of this node.
    version: AtomicU64,
    /// The op that wrote last, for the error of a stale edge.
    writer: Mutex<&'static str>,
}

fn next_seq() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Node {
    pub(crate) fn leaf() -> Arc<Node> {
        Arc::new(Node::new("a parameter", Kind::Leaf { grad: Mutex::new(None) }, Vec::new()))
    }

    pub(crate) fn op(
        op: &'static str,
        edges: Vec<Option<Edge>>,
        rule: Rule,
        stream: Option<(DeviceId, AnyStream)>,
    ) -> Arc<Node> {
        Arc::new(Node::new(op, Kind::Op { rule: Mutex::new(Some(rule)), stream, keep: false }, edges))
    }

    /// A node whose rule every backward pass may run (it saves no tensor): the link of a
    /// replica to the parameter it copies.
    pub(crate) fn kept(op: &'static str, edge: Edge, rule: Rule) -> Arc<Node> {
        Arc::new(Node::new(op, Kind::Op { rule: Mutex::new(Some(rule)), stream: None, keep: true }, vec![Some(edge)]))
    }

    /// The node of a tensor that `by` wrote in place; `before` was its node.
    pub(crate) fn written(by: &'static str, before: &Arc<Node>) -> Arc<Node> {
        let edge = Edge { node: Arc::clone(before), version: before.version() };
        Arc::new(Node::new(by, Kind::Written { by }, vec![Some(edge)]))
    }

    fn new(op: &'static str, kind: Kind, edges: Vec<Option<Edge>>) -> Node {
        Node { op, seq: next_seq(), kind, edges, version: AtomicU64::new(0), writer: Mutex::new("") }
    }

    pub(crate) fn is_leaf(&self) -> bool {
        matches!(self.kind, Kind::Leaf { .. })
    }

    pub(crate) fn is_written(&self) -> bool {
        matches!(self.kind, Kind::Written { .. })
    }

    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Records an in-place write by `op`.
    pub(crate) fn bump(&self, op: &'static str) {
        *self.writer.lock().unwrap_or_else(PoisonError::into_inner) = op;
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn writer(&self) -> &'static str {
        *self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A leaf's accumulated gradient.
    pub(crate) fn leaf_grad(&self) -> Option<Erased> {
        match &self.kind {
            Kind::Leaf { grad } => grad.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            _ => None,
        }
    }

    pub(crate) fn set_leaf_grad(&self, value: Option<Erased>) {
        if let Kind::Leaf { grad } = &self.kind {
            *grad.lock().unwrap_or_else(PoisonError::into_inner) = value;
        }
    }
}

impl Drop for Node {
    /// Frees a long chain of nodes without recursing once per node (a training loop of
    /// thousands of ops would overflow the stack): the edges of every node this drop
    /// frees are taken here and their nodes dropped in a loop.
    fn drop(&mut self) {
        let mut stack: Vec<Arc<Node>> = self.edges.drain(..).flatten().map(|e| e.node).collect();
        while let Some(node) = stack.pop() {
            if let Some(mut inner) = Arc::into_inner(node) {
                stack.extend(inner.edges.drain(..).flatten().map(|e| e.node));
            }
        }
    }
}

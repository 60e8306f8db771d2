//! A point of a stream's work that the host can ask about without naming its backend:
//! what the pinned pool holds a block until.

use std::fmt::Debug;

use crate::error::Result;

/// An event of either backend, as the host sees it.
pub(crate) trait Fence: Send + Sync + Debug {
    /// Whether the work before this point has finished. An event that cannot be asked
    /// (a lost context, an event of a capture) counts as not finished: a block held by it
    /// is then never handed out again, rather than handed out in use.
    fn is_done(&self) -> bool;
    /// Waits on the host until the work before this point has finished.
    fn wait(&self) -> Result<()>;
}

impl<F: Fence> Fence for std::sync::Arc<F> {
    fn is_done(&self) -> bool {
        F::is_done(self)
    }

    fn wait(&self) -> Result<()> {
        F::wait(self)
    }
}

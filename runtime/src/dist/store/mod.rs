//! The stores processes meet through: [`TcpStore`] (PyTorch's TCPStore wire protocol, as a
//! client of torchrun's agent store or as a host) and [`FileStore`] (a shared directory on
//! one machine). Both implement [`crate::dist::Store`].

mod file;
mod tcp;

pub use file::FileStore;
pub use tcp::TcpStore;

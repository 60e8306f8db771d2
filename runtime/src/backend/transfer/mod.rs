//! Copies between pageable host memory and a device that both backends share: which
//! path a copy takes by its size ([`paths`]), and the inline upload ([`upload`]) and
//! download ([`download`]) through one block of the pinned pool, and the non-temporal copy
//! that fills pinned blocks ([`stream_copy`]).

pub(crate) mod download;
pub(crate) mod paths;
pub(crate) mod stream_copy;
pub(crate) mod upload;

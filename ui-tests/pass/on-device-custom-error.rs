// A Result fn with its own error type propagates a failed guard through From<locus::Error>.
use locus::{on_device, Error};

#[derive(Debug)]
enum AppError {
    Device(Error),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Device(e)
    }
}

#[on_device(4096)]
fn missing() -> Result<(), AppError> {
    Ok(())
}

fn main() {
    assert!(matches!(missing(), Err(AppError::Device(Error::NoSuchDevice { ordinal: 4096, .. }))));
}

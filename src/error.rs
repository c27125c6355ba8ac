//! The one error type of the engine.

/// Everything that can go wrong in netcl, with enough context to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid argument.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The documentation wiki could not read, render, serve or write something.
    #[error("wiki: {0}")]
    Wiki(String),
}

/// Shorthand for `std::result::Result<T, netcl::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

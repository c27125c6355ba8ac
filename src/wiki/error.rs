//! The wiki's own error type: what the documentation site could not read, render, serve or write, kept apart
//! from the engine's [`crate::Error`]. Engine failures met while the wiki calls the engine convert into it.

/// A failure of the wiki: its own (content, configuration, templates, sockets, files) or the engine's.
#[derive(Debug, thiserror::Error)]
pub enum WikiError {
    /// The wiki could not read, render, serve or write something; the message names what and why.
    #[error("wiki: {0}")]
    Site(String),
    /// An engine call made by the wiki failed.
    #[error(transparent)]
    Engine(#[from] crate::error::Error),
}

impl WikiError {
    /// A short machine-readable name: `wiki` for the site's own failures, the engine's kind otherwise.
    pub fn kind(&self) -> &'static str {
        match self {
            WikiError::Site(_) => "wiki",
            WikiError::Engine(e) => e.kind(),
        }
    }
}

/// Shorthand for `std::result::Result<T, WikiError>`.
pub type Result<T, E = WikiError> = std::result::Result<T, E>;

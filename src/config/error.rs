//! The error of every configuration step, naming the key it concerns. Its own file below the
//! façade, so that the sections can return it without importing the module that declares them.

use std::path::PathBuf;

/// A configuration problem, always naming the key it concerns.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{key}: {problem}")]
    Invalid { key: String, problem: String },
    #[error("cannot read configuration file {path}: {problem}")]
    File { path: PathBuf, problem: String },
}

impl ConfigError {
    pub fn invalid(key: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            problem: problem.into(),
        }
    }
}

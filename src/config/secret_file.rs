//! `secrets_files`: a file of secrets, one per line, as Kubernetes mounts a Secret's key.
//!
//! A file is read while the configuration loads, at start and on every reload (`SIGHUP`), so a
//! rotation is: add the new secret as a second line (or a second file), reload, let the provider
//! roll over, remove the old line, reload. Blank lines and the whitespace around a secret are
//! ignored (editors and `kubectl create secret --from-file` leave a trailing newline).

use std::fmt;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::values::Secret;

/// The largest secret file read: a few secrets fit in far less, and a mistaken path to a large
/// file should fail rather than be read into memory.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// The most secrets one file may hold: a rotation needs two, and every secret is one more MAC a
/// bad signature costs.
pub const MAX_SECRETS_PER_FILE: usize = 16;

/// One configured secret file and the secrets read from it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretFile {
    path: String,
    secrets: Vec<Secret>,
}

impl SecretFile {
    /// Reads `path`: one secret per non-blank line.
    pub fn read(path: &str) -> Result<Self, String> {
        if path.is_empty() {
            return Err("the path is empty".to_owned());
        }
        let file = std::fs::File::open(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        let mut text = String::new();
        let read = std::io::Read::read_to_string(
            &mut std::io::Read::take(file, MAX_FILE_BYTES + 1),
            &mut text,
        )
        .map_err(|e| format!("cannot read {path}: {e}"))?;
        if read as u64 > MAX_FILE_BYTES {
            return Err(format!(
                "{path} is larger than {MAX_FILE_BYTES} bytes; a secret file holds a few lines"
            ));
        }
        let secrets = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .enumerate()
            .map(|(i, line)| Secret::from_file_line(line, path, i + 1))
            .collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(format!("{path} holds no secret (every line is blank)"));
        }
        if secrets.len() > MAX_SECRETS_PER_FILE {
            return Err(format!(
                "{path} holds {} secrets; at most {MAX_SECRETS_PER_FILE} are accepted",
                secrets.len()
            ));
        }
        Ok(Self {
            path: path.to_owned(),
            secrets,
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The file's secrets, in line order.
    pub fn secrets(&self) -> &[Secret] {
        &self.secrets
    }
}

impl fmt::Debug for SecretFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{} redacted]", self.path, self.secrets.len())
    }
}

/// Shown as its path: the secrets themselves never leave the process.
impl Serialize for SecretFile {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.path)
    }
}

impl<'de> Deserialize<'de> for SecretFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let path = String::deserialize(deserializer)?;
        SecretFile::read(&path).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, text).unwrap();
        (dir, path.to_str().unwrap().to_owned())
    }

    #[test]
    fn one_secret_per_line_blank_lines_and_surrounding_space_ignored() {
        let (_dir, path) = file_with("whsec_old\r\n\n  whsec_new  \n");
        let file = SecretFile::read(&path).unwrap();
        let values: Vec<&str> = file.secrets().iter().map(Secret::expose).collect();
        assert_eq!(values, ["whsec_old", "whsec_new"]);
    }

    #[test]
    fn an_empty_missing_or_huge_file_is_refused_without_showing_a_secret() {
        let (_dir, path) = file_with("\n \n");
        let error = SecretFile::read(&path).unwrap_err();
        assert!(error.contains("holds no secret"), "{error}");

        let error = SecretFile::read("/nonexistent/hookonce-secret").unwrap_err();
        assert!(
            error.starts_with("cannot read /nonexistent/hookonce-secret"),
            "{error}"
        );

        let (_dir, path) = file_with(&"s".repeat(MAX_FILE_BYTES as usize + 1));
        let error = SecretFile::read(&path).unwrap_err();
        assert!(error.contains("larger than"), "{error}");
        assert!(!error.contains("sss"), "{error}");

        let many: String = (0..=MAX_SECRETS_PER_FILE)
            .map(|i| format!("s{i}\n"))
            .collect();
        let (_dir, path) = file_with(&many);
        let error = SecretFile::read(&path).unwrap_err();
        assert!(error.contains("at most 16"), "{error}");
    }

    #[test]
    fn shown_as_its_path_never_its_secrets() {
        let (_dir, path) = file_with("whsec_topsecret\n");
        let file = SecretFile::read(&path).unwrap();
        assert_eq!(format!("{file:?}"), format!("{path} [1 redacted]"));
        let json = serde_json::to_string(&file).unwrap();
        assert_eq!(json, serde_json::to_string(&path).unwrap());
        assert!(!format!("{:?}", file.secrets()).contains("topsecret"));
    }
}

//! Certificates for TLS tests, made by the openssl CLI in a temporary directory: a CA, a server
//! certificate for 127.0.0.1 and localhost (usable as a client certificate too, as Redis Cluster
//! nodes use it between themselves), a client certificate, and a second CA that signed none of
//! them (the "wrong CA").

use std::path::{Path, PathBuf};
use std::process::Command;

/// The PEM files of one test's certificates; the directory goes when this is dropped.
pub struct TlsFiles {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A CA that signed nothing here: a server checked against it must be refused.
    pub other_ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsFiles {
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let at = |name: &str| dir.path().join(name);
        self_signed_ca(dir.path(), "ca");
        self_signed_ca(dir.path(), "other-ca");
        signed(
            dir.path(),
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        );
        signed(dir.path(), "client", "extendedKeyUsage=clientAuth\n");
        Self {
            ca: at("ca.pem"),
            server_cert: at("server.pem"),
            server_key: at("server.key"),
            client_cert: at("client.pem"),
            client_key: at("client.key"),
            other_ca: at("other-ca.pem"),
            _dir: dir,
        }
    }

    /// redis-server's TLS arguments for a listener on `port` (plain TCP off), with client
    /// certificates `optional` or required (`yes`).
    pub fn server_args(&self, port: u16, auth_clients: &str) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            path(&self.server_cert),
            "--tls-key-file".into(),
            path(&self.server_key),
            "--tls-ca-cert-file".into(),
            path(&self.ca),
            "--tls-auth-clients".into(),
            auth_clients.into(),
        ]
    }

    /// What a test's own redis client trusts and presents: the CA, and the client certificate
    /// (so it gets in whether or not the server requires one).
    pub fn certificates(&self) -> redis::TlsCertificates {
        let read = |p: &Path| std::fs::read(p).expect("read a test certificate");
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: read(&self.client_cert),
                client_key: read(&self.client_key),
            }),
            root_cert: Some(read(&self.ca)),
        }
    }
}

const EC: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

fn self_signed_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            &["req", "-x509", "-new", "-nodes", "-days", "2"][..],
            &EC,
            &["-subj", &format!("/CN=hookonce test {name}")],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            &[
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
            ],
        ]
        .concat(),
    );
}

/// A key and a certificate signed by `ca.pem`, with the extensions in `extensions`.
fn signed(dir: &Path, name: &str, extensions: &str) {
    let ext = format!("{name}.ext");
    std::fs::write(
        dir.join(&ext),
        format!("basicConstraints=CA:FALSE\n{extensions}"),
    )
    .expect("write extensions");
    let (key, csr, pem) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
    );
    openssl(
        dir,
        &[
            &["req", "-new", "-nodes"][..],
            &EC,
            &[
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
        ]
        .concat(),
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &pem,
            "-extfile",
            &ext,
        ],
    );
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (apt-get install openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

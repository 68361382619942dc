//! HTTPS end to end: a certificate authority and a server certificate made by openssl,
//! the server serving them, the agent's own client trusting the CA (`--ca-cert`).
//! Run with `cargo test -p flare-server --features tls,flare-agent/tls --test tls`.
#![cfg(feature = "tls")]

mod common;

use common::*;
use flare_agent::{PushConfig, Pusher};
use flare_server::TlsFiles;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A CA, and a certificate for 127.0.0.1 signed by it: `ca.pem`, `server.pem`, `server.key`.
fn make_certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl (Debian package openssl) is needed for the TLS test");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=flare test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=flare server",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
}

#[test]
fn the_agent_delivers_over_https_to_a_server_it_trusts_through_the_cluster_ca() {
    let dir = tempfile::tempdir().unwrap();
    make_certificates(dir.path());
    let mut cfg = config(&dir.path().join("flare.db"));
    cfg.tls = Some(TlsFiles {
        cert: dir.path().join("server.pem"),
        key: dir.path().join("server.key"),
    });
    let s = TestServer::start_cfg(cfg);
    let https = format!("https://{}", s.addr);

    // The agent's client, trusting the CA.
    let pusher = Pusher::start(PushConfig {
        ca_cert: Some(dir.path().join("ca.pem")),
        ..PushConfig::new(https.clone(), Some(TOKEN.into()))
    })
    .unwrap();
    pusher.submit(&node_summary("tls", 0, 0, None)).unwrap();
    let stats = pusher.shutdown(Duration::from_secs(10));
    assert_eq!((stats.sent, stats.rejected), (1, 0), "{stats:?}");

    // It arrived (read back over HTTPS too).
    let trusting: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(&[
                    ureq::tls::Certificate::from_pem(
                        &std::fs::read(dir.path().join("ca.pem")).unwrap(),
                    )
                    .unwrap(),
                ]))
                .build(),
        )
        .build()
        .into();
    let mut resp = trusting
        .get(format!("{https}/api/jobs"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .call()
        .unwrap();
    let jobs: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(jobs[0]["job_id"], "tls");

    // A client that does not trust the CA is refused by its own checks, and plain HTTP
    // to the TLS port gets no HTTP answer.
    let err = client().get(format!("{https}/healthz")).call().unwrap_err();
    assert!(
        err.to_string().to_lowercase().contains("certificate")
            || err.to_string().to_lowercase().contains("unknown"),
        "{err}"
    );
    assert!(client()
        .get(format!("http://{}/healthz", s.addr))
        .call()
        .is_err());
}

#[test]
fn a_bad_certificate_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("empty.pem"), "not a certificate\n").unwrap();
    std::fs::write(dir.path().join("k.pem"), "").unwrap();
    let mut cfg = config(&dir.path().join("flare.db"));
    cfg.tls = Some(TlsFiles {
        cert: dir.path().join("empty.pem"),
        key: dir.path().join("k.pem"),
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt
        .block_on(flare_server::Server::bind(cfg))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("empty.pem") && err.contains("no PEM certificate"),
        "{err}"
    );
}

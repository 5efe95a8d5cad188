use super::*;

#[test]
fn host_of_strips_the_port_and_ipv6_brackets() {
    assert_eq!(host_of("node1:7001"), "node1");
    assert_eq!(host_of("10.0.0.1:7001"), "10.0.0.1");
    assert_eq!(host_of("[::1]:7001"), "::1");
}

#[test]
fn generated_files_make_a_server_config_and_bad_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let written = generate(
        dir.path(),
        &[(1, vec!["node1".into()]), (2, vec!["node2".into()])],
        &["agent".into()],
        false,
    )
    .unwrap();
    assert_eq!(written.len(), 2 + 2 * 2 + 2);
    let files = TlsFiles {
        cert: dir.path().join("node-1.pem"),
        key: dir.path().join("node-1-key.pem"),
        ca: dir.path().join("ca.pem"),
        require_client_cert: true,
        peer: None,
    };
    assert!(files.server_configs().unwrap().one_ca);
    assert!(files.outbound_config().is_ok());
    let mismatched = TlsFiles {
        key: dir.path().join("node-2-key.pem"),
        ..files.clone()
    };
    let e = mismatched.server_configs().err().unwrap();
    assert!(e.to_string().contains("do not go together"), "{e}");
    assert!(matches!(&e, TlsError::Pair { cert, .. } if cert.ends_with("node-1.pem")));
    let missing = TlsFiles {
        ca: dir.path().join("nope.pem"),
        ..files
    };
    let e = missing.server_configs().err().unwrap();
    assert!(e.to_string().contains("nope.pem"));
    assert!(matches!(&e, TlsError::Read { file, .. } if file.ends_with("nope.pem")));
}

#[test]
fn a_peer_ca_makes_peer_certificates_and_separate_settings() {
    let dir = tempfile::tempdir().unwrap();
    let written = generate(dir.path(), &[(1, vec!["node1".into()])], &[], true).unwrap();
    let names: Vec<_> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "ca.pem",
            "ca-key.pem",
            "peer-ca.pem",
            "peer-ca-key.pem",
            "node-1.pem",
            "node-1-key.pem",
            "peer-1.pem",
            "peer-1-key.pem"
        ]
    );
    // Every private key, the CAs' too, is its owner's alone.
    use std::os::unix::fs::PermissionsExt;
    for (path, name) in written.iter().zip(&names) {
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        if name.ends_with("-key.pem") {
            assert_eq!(mode, 0o600, "{name}: {mode:o}");
        }
    }
    // Generating again over existing files keeps them private.
    std::fs::set_permissions(&written[1], std::fs::Permissions::from_mode(0o644)).unwrap();
    generate(dir.path(), &[(1, vec!["node1".into()])], &[], true).unwrap();
    let mode = std::fs::metadata(&written[1]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let files = TlsFiles {
        cert: dir.path().join("node-1.pem"),
        key: dir.path().join("node-1-key.pem"),
        ca: dir.path().join("ca.pem"),
        require_client_cert: false,
        peer: Some(PeerFiles {
            cert: dir.path().join("peer-1.pem"),
            key: dir.path().join("peer-1-key.pem"),
            ca: dir.path().join("peer-ca.pem"),
        }),
    };
    assert!(!files.server_configs().unwrap().one_ca);
    assert!(files.outbound_config().is_ok());
    // Peer files that do not go together are named, as the client ones are.
    let crossed = TlsFiles {
        peer: Some(PeerFiles {
            key: dir.path().join("node-1-key.pem"),
            ..files.peer.clone().unwrap()
        }),
        ..files
    };
    let e = crossed.server_configs().err().unwrap();
    assert!(
        e.to_string().contains("peer-1.pem") && e.to_string().contains("do not go together"),
        "{e}"
    );
}

//! Bad CA input: exit 2, the file named, nothing on stdout, and never a byte
//! of key material on either stream.

use std::process::Output;

use crate::fixture;

fn render(args: &[&std::ffi::OsStr]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress"))
        .args(["render", "--workload", "-f"])
        .arg(fixture("reencrypt-advertise-address.yaml"))
        .args(args)
        .output()
        .unwrap()
}

fn key_lines() -> Vec<String> {
    let mut lines: Vec<String> = ["ca.key", "ec-ca.key"]
        .iter()
        .flat_map(|k| {
            std::fs::read_to_string(fixture(k))
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|l| !l.starts_with("-----"))
        .collect();
    lines.retain(|l| l.len() > 16);
    lines
}

fn temp(name: &str, content: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("hcp-ingress-bad-{}-{name}", std::process::id()));
    std::fs::write(&path, content).unwrap();
    path
}

#[test]
fn bad_ca_files_exit_2_naming_the_file_without_key_material() {
    let ca_crt = fixture("ca.crt");
    let ca_key = fixture("ca.key");
    let ec_key = fixture("ec-ca.key");
    let missing = std::path::PathBuf::from("/nonexistent/ca.crt");
    let garbage = temp("garbage.pem", "this is not PEM\n");
    let key_text = std::fs::read_to_string(&ca_key).unwrap();
    // A key whose base64 is cut short: the parser must not quote it back.
    let truncated = temp(
        "truncated.key",
        &format!(
            "{}\n-----END RSA PRIVATE KEY-----\n",
            key_text.lines().take(6).collect::<Vec<_>>().join("\n")
        ),
    );
    let missing_key = std::path::PathBuf::from("/nonexistent/ca.key");
    // (case, [certificate, key], message, which file the message must name)
    let cases: Vec<(&str, [&std::path::Path; 2], &str, usize)> = vec![
        (
            "missing certificate",
            [&missing, &ca_key],
            "failed to read /nonexistent/ca.crt",
            0,
        ),
        (
            "missing key",
            [&ca_crt, &missing_key],
            "failed to read /nonexistent/ca.key",
            1,
        ),
        (
            "certificate not PEM",
            [&garbage, &ca_key],
            "failed to parse the CA certificate",
            0,
        ),
        (
            "key where the certificate belongs",
            [&ca_key, &ca_key],
            "failed to parse the CA certificate",
            0,
        ),
        (
            "key not PEM",
            [&ca_crt, &garbage],
            "failed to parse the CA key",
            1,
        ),
        (
            "key truncated",
            [&ca_crt, &truncated],
            "failed to parse the CA key",
            1,
        ),
        (
            "key of another CA",
            [&ca_crt, &ec_key],
            "the key does not match",
            1,
        ),
    ];
    let secrets = key_lines();
    for (case, files, message, at_fault) in cases {
        let output = render(&[
            "--ca-cert".as_ref(),
            files[0].as_os_str(),
            "--ca-key".as_ref(),
            files[1].as_os_str(),
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        assert_eq!(output.status.code(), Some(2), "{case}: {stderr}");
        assert!(output.stdout.is_empty(), "{case}: stdout not empty");
        assert!(stderr.contains(message), "{case}: {stderr}");
        // The file at fault is named.
        let at_fault = files[at_fault];
        assert!(
            stderr.contains(&at_fault.display().to_string()),
            "{case}: {stderr} does not name {}",
            at_fault.display()
        );
        for line in &secrets {
            assert!(
                !stderr.contains(line.as_str()),
                "{case}: stderr shows key material"
            );
        }
    }
    let _ = std::fs::remove_file(garbage);
    let _ = std::fs::remove_file(truncated);
}

#[test]
fn ca_flags_need_the_workload_side() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hcp-ingress"))
        .args(["render", "-f"])
        .arg(fixture("reencrypt-advertise-address.yaml"))
        .arg("--ca-cert")
        .arg(fixture("ca.crt"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("need --workload"));
}

#[test]
fn bad_clock_is_a_usage_error() {
    let output = render(&["--now".as_ref(), "yesterday".as_ref()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--now"));
}

#[test]
fn without_the_key_nothing_is_minted_and_a_note_says_so() {
    let output = render(&["--ca-cert".as_ref(), fixture("ca.crt").as_os_str()]);
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(!stdout.contains("kind: Secret"));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no --ca-key"));
}

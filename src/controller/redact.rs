//! Parser errors about Secret contents, made safe to show.
//!
//! A YAML or PEM parser explains a failure by quoting the input: a line of
//! source under the message, or the offending value in quotes. For a
//! kubeconfig or a key that quote is the secret itself, and conditions,
//! Events and logs are read by many more people than the Secret.

/// Shorter runs are words of the message ("expected", "mapping"), not secrets
/// worth hiding; tokens, keys and base64 data are all longer.
const MIN_SECRET_RUN: usize = 8;

/// `message` (a parser's error about `secret`) reduced to its first line,
/// with every run of token characters that also occurs in `secret` replaced
/// by `[redacted]`.
pub fn scrub(message: &str, secret: &str) -> String {
    let first_line = message.lines().next().unwrap_or_default();
    let is_token = |c: char| c.is_ascii_alphanumeric() || "+/=._~-".contains(c);
    let secret_runs: std::collections::HashSet<&str> = secret
        .split(|c: char| !is_token(c))
        .filter(|run| run.len() >= MIN_SECRET_RUN)
        .collect();
    let mut out = String::with_capacity(first_line.len());
    let mut run_start = None;
    for (i, c) in first_line.char_indices().chain([(first_line.len(), ' ')]) {
        match (is_token(c) && i < first_line.len(), run_start) {
            (true, None) => run_start = Some(i),
            (true, Some(_)) => {}
            (false, start) => {
                if let Some(start) = start {
                    let run = &first_line[start..i];
                    out.push_str(if contains_secret(run, &secret_runs) {
                        "[redacted]"
                    } else {
                        run
                    });
                    run_start = None;
                }
                if i < first_line.len() {
                    out.push(c);
                }
            }
        }
    }
    out
}

/// A run of the message that is, or holds, a long run of the secret.
fn contains_secret(run: &str, secret_runs: &std::collections::HashSet<&str>) -> bool {
    run.len() >= MIN_SECRET_RUN
        && secret_runs
            .iter()
            .any(|s| run.contains(s) || s.contains(run))
}

#[cfg(test)]
mod tests {
    use super::scrub;

    const KUBECONFIG: &str = "users:\n- name: admin\n  user:\n    token: abcdef.0123456789abcdef\n    client-key-data: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0t\n";

    #[test]
    fn quoted_values_and_source_snippets_are_removed() {
        let message = "invalid type: string \"abcdef.0123456789abcdef\", expected a map at line 4 column 12\n --> <input>:4:12\n  |\n4 |     token: abcdef.0123456789abcdef";
        let scrubbed = scrub(message, KUBECONFIG);
        assert_eq!(
            scrubbed,
            "invalid type: string \"[redacted]\", expected a map at line 4 column 12"
        );
    }

    #[test]
    fn part_of_a_key_is_redacted_too() {
        let scrubbed = scrub("bad base64 near LS0tLS1CRUdJTiBFQyBQ", KUBECONFIG);
        assert_eq!(scrubbed, "bad base64 near [redacted]");
    }

    #[test]
    fn words_that_are_not_in_the_secret_stay() {
        let message = "failed to parse kubeconfig YAML: unclosed bracket '[' at line 6 column 13";
        assert_eq!(scrub(message, KUBECONFIG), message);
    }
}

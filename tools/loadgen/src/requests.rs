//! `requests`: pre-signed deliveries in a file, for a client too light to sign (wrk's Lua).
//!
//! HMAC in the client's Lua would cost more than the server under test, so the requests are
//! made here, signed by the same `Workload` as `run` uses, and written compactly: every request
//! of a run has the same length (the IDs, indices and signatures are fixed-width), so the file
//! holds one request in full (the template) and, for each request, only the bytes where requests
//! differ. The client rebuilds request *i* by putting line *i*'s bytes into the template's runs.
//!
//! Format (all numbers decimal ASCII):
//!
//! ```text
//! hookonce-requests 1 COUNT WIDTH TEMPLATE_LEN\n
//! START:LEN START:LEN …\n          the runs of the template that vary, in order
//! TEMPLATE_LEN bytes\n             request 0 as sent
//! COUNT lines of WIDTH bytes + \n  each request's bytes at the runs, concatenated
//! ```
//!
//! The runs are found from a sample of the requests (the first and last 4 096 and a stride
//! between), then every request is checked against the template outside the runs while it is
//! written: a request that differs elsewhere stops the command with an error, so the file never
//! holds a request other than the one signed. Timestamped schemes (Stripe) are signed for one
//! instant, the moment the file is made: use it within the provider's tolerance.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{bail, Context};

use crate::workload::Workload;

/// Requests sampled (from each end) to find the varying runs.
const SAMPLE_EDGE: u64 = 4096;

/// Writes `count` requests of `workload` to `out`; returns the width of a line.
pub fn write(workload: &Workload, count: u64, now_unix: i64, out: &Path) -> anyhow::Result<usize> {
    if count == 0 {
        bail!("--count must be at least 1");
    }
    let mut scratch = Vec::with_capacity(4096);
    let template = workload
        .request_at(&workload.event(0), now_unix, &mut scratch)
        .to_vec();
    let mut varies = vec![false; template.len()];
    let stride = (count / SAMPLE_EDGE).max(1);
    let sample = (0..count.min(SAMPLE_EDGE))
        .chain((SAMPLE_EDGE..count).step_by(stride as usize))
        .chain(count.saturating_sub(SAMPLE_EDGE).max(SAMPLE_EDGE)..count);
    for index in sample {
        let event = workload.event(index);
        let request = workload.request_at(&event, now_unix, &mut scratch);
        if request.len() != template.len() {
            bail!(
                "request {index} is {} bytes, request 0 {}: this workload's requests are not fixed-width",
                request.len(),
                template.len()
            );
        }
        for (flag, (a, b)) in varies.iter_mut().zip(request.iter().zip(&template)) {
            *flag |= a != b;
        }
    }
    let runs = runs(&varies);
    let width: usize = runs.iter().map(|(_, len)| len).sum();

    let file =
        std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut file = BufWriter::with_capacity(1 << 20, file);
    writeln!(
        file,
        "hookonce-requests 1 {count} {width} {}",
        template.len()
    )?;
    let spans: Vec<String> = runs.iter().map(|(s, l)| format!("{s}:{l}")).collect();
    writeln!(file, "{}", spans.join(" "))?;
    file.write_all(&template)?;
    file.write_all(b"\n")?;
    let mut line = Vec::with_capacity(width + 1);
    for index in 0..count {
        let event = workload.event(index);
        let request = workload.request_at(&event, now_unix, &mut scratch);
        let same_outside = request.len() == template.len()
            && request
                .iter()
                .zip(&template)
                .zip(&varies)
                .all(|((a, b), varies)| *varies || a == b);
        if !same_outside {
            bail!("request {index} differs from the template outside the sampled runs; nothing usable was written");
        }
        line.clear();
        for (start, len) in &runs {
            line.extend_from_slice(&request[*start..start + len]);
        }
        line.push(b'\n');
        file.write_all(&line)?;
    }
    file.flush()?;
    Ok(width)
}

/// The maximal runs of `true`, as (start, length).
fn runs(flags: &[bool]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = None;
    for (i, flag) in flags.iter().chain(std::iter::once(&false)).enumerate() {
        match (start, *flag) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                runs.push((s, i - s));
                start = None;
            }
            _ => {}
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rebuilds every request of a file as the Lua client does, from the header, the runs, the
    /// template and the lines.
    fn rebuild(file: &[u8]) -> Vec<Vec<u8>> {
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        let first = file.iter().position(|b| *b == b'\n').unwrap();
        let header: Vec<usize> = text(&file[..first])
            .split(' ')
            .skip(2)
            .map(|n| n.parse().unwrap())
            .collect();
        let (count, width, template_len) = (header[0], header[1], header[2]);
        let second = first + 1 + file[first + 1..].iter().position(|b| *b == b'\n').unwrap();
        let runs: Vec<(usize, usize)> = text(&file[first + 1..second])
            .split_whitespace()
            .map(|r| {
                let (s, l) = r.split_once(':').unwrap();
                (s.parse().unwrap(), l.parse().unwrap())
            })
            .collect();
        let template = &file[second + 1..second + 1 + template_len];
        let lines = &file[second + 2 + template_len..];
        assert_eq!(lines.len(), count * (width + 1));
        (0..count)
            .map(|i| {
                let line = &lines[i * (width + 1)..(i + 1) * (width + 1)];
                let mut request = template.to_vec();
                let mut at = 0;
                for (start, len) in &runs {
                    request[*start..start + len].copy_from_slice(&line[at..at + len]);
                    at += len;
                }
                request
            })
            .collect()
    }

    fn round_trip(provider: &str, secret: &str, count: u64) {
        let settings: hookonce::config::SourceSettings = serde_json::from_value(
            serde_json::json!({ "provider": provider, "secrets": [secret] }),
        )
        .unwrap();
        let workload = Workload::new(
            provider,
            &settings,
            format!("/webhooks/{provider}"),
            "127.0.0.1".to_owned(),
            "0a1b2c3d".to_owned(),
            1400,
            5,
        )
        .unwrap();
        let dir = std::env::temp_dir().join(format!("loadgen-requests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{provider}.requests"));
        let now = 1_764_000_000;
        write(&workload, count, now, &path).unwrap();
        let rebuilt = rebuild(&std::fs::read(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        assert_eq!(rebuilt.len() as u64, count);
        let mut scratch = Vec::new();
        for (index, request) in rebuilt.iter().enumerate() {
            let event = workload.event(index as u64);
            assert_eq!(
                request,
                workload.request_at(&event, now, &mut scratch),
                "request {index}"
            );
        }
        let unique: std::collections::HashSet<_> = rebuilt.iter().collect();
        assert_eq!(unique.len() as u64, count, "every request differs");
    }

    #[test]
    fn github_requests_rebuild_exactly() {
        // More than two sample edges, so the stride between them is used too.
        round_trip("github", "bench-github-secret", 9_000);
    }

    #[test]
    fn stripe_requests_rebuild_exactly() {
        round_trip("stripe", "whsec_bench_0123456789abcdefghijklmnop", 5_000);
    }

    #[test]
    fn runs_are_maximal_and_ordered() {
        let flags = [true, true, false, false, true, false, true];
        assert_eq!(runs(&flags), vec![(0, 2), (4, 1), (6, 1)]);
        assert!(runs(&[false, false]).is_empty());
    }
}

//! `baton leader KEY`: leader election's observe (docs/election.md): who holds KEY and what
//! its record says now, then a line at every change, until Ctrl-C (exit 0) or an error that
//! ends the watch: compacted (exit 1), the cluster unavailable past `--timeout` (exit 4).

use std::io::Write;

use baton_client::{Client, Error, RecordView};
use futures::StreamExt;

use super::args::OutputFormat;
use super::exit::Verdict;
use super::output::{shell_word, Rendered};
use super::watch::stop_signal;

/// Prints `key`'s view now and at every change to stdout as it comes. Returns when the user
/// stops it (SIGINT, SIGTERM) or stdout closes; an error that ends the observation is the
/// command's error.
pub async fn run(client: &Client, key: &str, format: OutputFormat) -> anyhow::Result<Rendered> {
    let stopped = Rendered {
        stdout: String::new(),
        verdict: Verdict::Ok,
        error_line: None,
    };
    let mut views = client.observe(key);
    let mut stop = std::pin::pin!(stop_signal());
    let mut stdout = std::io::stdout();
    loop {
        let item = tokio::select! {
            item = views.next() => item,
            () = &mut stop => return Ok(stopped),
        };
        match item {
            Some(Ok(view)) => {
                let written = stdout
                    .write_all(line(&view, format).as_bytes())
                    .and_then(|()| stdout.flush());
                match written {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(stopped),
                    Err(e) => return Err(anyhow::Error::new(e).context("cannot write the view")),
                }
            }
            Some(Err(error @ Error::Compacted { .. })) => {
                let hint = format!(
                    "{error}; observe again (baton leader {}): it starts from a fresh read",
                    shell_word(key)
                );
                return Err(anyhow::Error::new(error).context(hint));
            }
            Some(Err(error)) => return Err(error.into()),
            None => return Ok(stopped),
        }
    }
}

/// One view as one line: `rev 1210  leader sched@a (client a41c0c2e)  token 1207  status
/// serving  endpoint=10.0.0.5:8080` or `rev 1300  no leader`, marked when the record was
/// written before the current leader's grant; the record view object for JSON.
pub fn line(view: &RecordView, format: OutputFormat) -> String {
    match format {
        OutputFormat::Json => {
            let mut line = serde_json::to_string(view)
                .expect("a record view serializes to JSON: string keys only");
            line.push('\n');
            line
        }
        OutputFormat::Table => {
            let mut line = format!("rev {}  ", view.revision);
            match &view.lease {
                Some(lease) => line.push_str(&format!(
                    "leader {} (client {})  token {}",
                    lease.holder_name, lease.holder_client_id, lease.token
                )),
                None => line.push_str("no leader"),
            }
            let record = &view.record;
            if let Some(offer) = &record.pending_offer {
                line.push_str(&format!("  handing over to {}", offer.to));
            }
            if !record.status.is_empty() {
                line.push_str(&format!("  status {}", record.status));
            }
            for (name, value) in &record.fields {
                line.push_str(&format!("  {name}={}", shell_word(value)));
            }
            // A holder's write needs its token: a record last written before this leader's
            // grant is not its proclamation (an earlier holder's, or a dispatcher's post).
            let written = !record.status.is_empty() || !record.fields.is_empty();
            if let Some(lease) = &view.lease {
                if written && record.updated_revision < lease.token {
                    line.push_str("  (written before this leader)");
                }
            }
            line.push('\n');
            line
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_client::{LeaseInfo, Record};
    use std::time::Duration;

    fn view(lease: bool) -> RecordView {
        RecordView {
            permits: None,
            key: "svc/leader".into(),
            record: Record {
                status: "serving".into(),
                fields: [("endpoint".to_owned(), "10.0.0.5:8080".to_owned())].into(),
                updated_revision: 1209,
                ..Record::default()
            },
            lease: lease.then(|| LeaseInfo {
                key: "svc/leader".into(),
                holder_name: "sched@a".into(),
                holder_client_id: "a41c0c2e".into(),
                token: 1207,
                ttl: Duration::from_secs(10),
                held_since_unix_ms: 0,
                renewed_at_unix_ms: 0,
                remaining: Duration::from_secs(9),
                basis: 1207,
            }),
            revision: 1210,
            quarantine: None,
            line: None,
        }
    }

    #[test]
    fn a_table_line_names_the_leader_and_what_it_proclaimed() {
        assert_eq!(
            line(&view(true), OutputFormat::Table),
            "rev 1210  leader sched@a (client a41c0c2e)  token 1207  status serving  \
             endpoint=10.0.0.5:8080\n"
        );
        assert_eq!(
            line(&view(false), OutputFormat::Table),
            "rev 1210  no leader  status serving  endpoint=10.0.0.5:8080\n"
        );
        let mut stale = view(true);
        stale.record.updated_revision = 1100;
        assert_eq!(
            line(&stale, OutputFormat::Table),
            "rev 1210  leader sched@a (client a41c0c2e)  token 1207  status serving  \
             endpoint=10.0.0.5:8080  (written before this leader)\n"
        );
    }

    #[test]
    fn a_json_line_is_the_record_view() {
        let out = line(&view(true), OutputFormat::Json);
        assert!(out.ends_with('\n') && out.lines().count() == 1);
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["lease"]["token"], 1207);
        assert_eq!(value["record"]["fields"]["endpoint"], "10.0.0.5:8080");
        assert_eq!(value["revision"], 1210);
    }
}

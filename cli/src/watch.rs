//! `baton watch [PREFIX] [--from REV]`: every event under a prefix, one line each, as it
//! happens, until Ctrl-C (exit 0) or an error that ends the watch: compacted (exit 1), the
//! cluster unavailable past `--timeout` (exit 4).

use std::io::Write;

use baton_client::{Client, Error, Event};
use futures::StreamExt;

use super::args::OutputFormat;
use super::exit::Verdict;
use super::output::{shell_word, Rendered};

/// Width of the kind column: the longest kind, `cancelled`.
const KIND_WIDTH: usize = 9;

/// Runs the watch, printing each event to stdout as it comes. Returns when the user stops
/// it (SIGINT, SIGTERM) or stdout closes, with nothing left to print; a terminal error of
/// the watch is returned as the command's error.
pub async fn run(
    client: &Client,
    prefix: &str,
    from: u64,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let stopped = Rendered {
        stdout: String::new(),
        verdict: Verdict::Ok,
        error_line: None,
    };
    let mut events = client.watch(prefix, from);
    let mut stop = std::pin::pin!(stop_signal());
    let mut columns = Columns::default();
    let mut stdout = std::io::stdout();
    loop {
        let item = tokio::select! {
            item = events.next() => item,
            () = &mut stop => return Ok(stopped),
        };
        match item {
            Some(Ok(event)) => {
                let line = line(&event, format, &mut columns);
                let written = stdout
                    .write_all(line.as_bytes())
                    .and_then(|()| stdout.flush());
                match written {
                    Ok(()) => {}
                    // `baton watch | head -3`: the reader has what it wanted.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(stopped),
                    Err(e) => return Err(anyhow::Error::new(e).context("cannot write the event")),
                }
            }
            Some(Err(error @ Error::Compacted { .. })) => {
                let hint = compacted_hint(prefix, &error);
                return Err(anyhow::Error::new(error).context(hint));
            }
            Some(Err(error)) => return Err(error.into()),
            // A watch ends only after an error item; stop quietly if it ever does not.
            None => return Ok(stopped),
        }
    }
}

/// What to do when the watch fell out of the node's window.
fn compacted_hint(prefix: &str, error: &Error) -> String {
    let board = if prefix.is_empty() {
        "baton board".to_owned()
    } else {
        format!("baton board {}", shell_word(prefix))
    };
    let watch = if prefix.is_empty() {
        "baton watch".to_owned()
    } else {
        format!("baton watch {}", shell_word(prefix))
    };
    format!(
        "{error}; re-read the board ({board}) and watch from its revision ({watch} --from \
         <the board's revision + 1>)"
    )
}

/// Resolves when the user asks the watch to stop: SIGINT (Ctrl-C) or SIGTERM.
pub(crate) async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).ok();
    let terminated = async {
        match terminate.as_mut() {
            Some(signal) => {
                signal.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminated => {}
    }
}

/// Column widths seen so far: a stream cannot know the widest cell to come, so each column
/// grows to the widest value printed yet.
#[derive(Debug, Default)]
pub struct Columns {
    revision: usize,
    key: usize,
    actor: usize,
}

/// One event as one line: `rev 1207  tasks/42  claimed    by codex@b  token 1207  detail`
/// for tables, or the event object for JSON.
pub fn line(event: &Event, format: OutputFormat, columns: &mut Columns) -> String {
    match format {
        OutputFormat::Json => {
            let mut line = serde_json::to_string(event)
                .expect("an event serializes to JSON: no maps with non-string keys");
            line.push('\n');
            line
        }
        OutputFormat::Table => {
            let revision = event.revision.to_string();
            let actor = match &event.actor {
                Some(actor) => format!("by {actor}"),
                None => "-".to_owned(),
            };
            let token = match event.token {
                0 => "-".to_owned(),
                token => token.to_string(),
            };
            columns.revision = columns.revision.max(revision.chars().count());
            columns.key = columns.key.max(event.key.chars().count());
            columns.actor = columns.actor.max(actor.chars().count());
            let line = format!(
                "rev {revision:<rw$}  {key:<kw$}  {kind:<KIND_WIDTH$}  {actor:<aw$}  token {token}  \
                 {detail}",
                key = event.key,
                kind = event.kind,
                detail = event.detail,
                rw = columns.revision,
                kw = columns.key,
                aw = columns.actor,
            );
            format!("{}\n", line.trim_end())
        }
    }
}

/// One event as the command's output, for the JSON schema test.
#[cfg(test)]
pub fn rendered(event: &Event, format: OutputFormat) -> Rendered {
    Rendered {
        stdout: line(event, format, &mut Columns::default()),
        verdict: Verdict::Ok,
        error_line: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn sample_event(actor: bool) -> Event {
        Event {
            revision: 1207,
            key: "tasks/42".into(),
            kind: "claimed".into(),
            actor: actor.then(|| baton_client::ActorInfo {
                name: "codex@b".into(),
                client_id: "a41c0c2e".into(),
                principal: None,
            }),
            token: 1207,
            at_unix_ms: 1_795_950_005_863,
            detail: String::new(),
            recorded_before_format_4: false,
            status_set: None,
        }
    }

    #[test]
    fn table_lines_align_on_the_widest_values_seen() {
        let mut columns = Columns::default();
        let first = line(&sample_event(true), OutputFormat::Table, &mut columns);
        assert_eq!(
            first,
            "rev 1207  tasks/42  claimed    by codex@b (client a41c0c2e)  token 1207\n"
        );
        let expired = Event {
            revision: 1300,
            key: "tasks/7".into(),
            kind: "expired".into(),
            actor: None,
            token: 1207,
            detail: "renewed 3 times".into(),
            ..sample_event(false)
        };
        assert_eq!(
            line(&expired, OutputFormat::Table, &mut columns),
            "rev 1300  tasks/7   expired    -                             token 1207  renewed 3 times\n"
        );
        let assigned = Event {
            revision: 1301,
            key: "tasks/1000".into(),
            kind: "assigned".into(),
            token: 0,
            detail: "to alice".into(),
            ..sample_event(true)
        };
        assert_eq!(
            line(&assigned, OutputFormat::Table, &mut columns),
            "rev 1301  tasks/1000  assigned   by codex@b (client a41c0c2e)  token -  to alice\n"
        );
    }

    #[test]
    fn json_lines_are_the_event_object() {
        let out = line(
            &sample_event(true),
            OutputFormat::Json,
            &mut Columns::default(),
        );
        assert!(out.ends_with('\n') && out.lines().count() == 1);
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            value,
            json!({
                "revision": 1207,
                "key": "tasks/42",
                "kind": "claimed",
                "actor": {"name": "codex@b", "client_id": "a41c0c2e", "principal": null},
                "recorded_before_format_4": false,
                "token": 1207,
                "at_unix_ms": 1_795_950_005_863u64,
                "detail": "",
                "status_set": null
            })
        );
    }

    #[test]
    fn the_compacted_hint_names_the_commands_to_run() {
        let error = Error::Compacted {
            requested: 3,
            first_available: 40,
        };
        let hint = compacted_hint("tasks/", &error);
        assert!(hint.starts_with("compacted: revision 3 "), "{hint}");
        assert!(
            hint.ends_with(
                "re-read the board (baton board tasks/) and watch from its revision (baton \
                 watch tasks/ --from <the board's revision + 1>)"
            ),
            "{hint}"
        );
        assert!(compacted_hint("", &error).contains("(baton board)"));
    }
}

//! `baton access set FILE | clear | show`: the permissions policy every node enforces.

use anyhow::Context;

use super::args::{AccessCommand, OutputFormat};
use super::exit::Verdict;
use super::output::Rendered;
use super::table;
use baton_client::{AccessView, Client, ReadMode};

pub async fn run(
    client: &Client,
    command: AccessCommand,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let view = match command {
        AccessCommand::Set { file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading the policy {}", file.display()))?;
            client.set_access(&text).await?
        }
        AccessCommand::Clear => client.clear_access().await?,
        AccessCommand::Show { stale } => {
            client
                .access(if stale {
                    ReadMode::Stale
                } else {
                    ReadMode::Linearizable
                })
                .await?
        }
    };
    Ok(render(&view, format))
}

fn render(view: &AccessView, format: OutputFormat) -> Rendered {
    let mut text = match &view.policy {
        Some(policy) if view.bootstrap => format!(
            "permissions version 0: the cluster has none yet; this node enforces its \
             --access-policy until `baton access set`:\n{policy}"
        ),
        Some(policy) => format!("permissions version {}:\n{policy}", view.version),
        None => format!(
            "permissions version {}: no policy; every authenticated principal may do \
             everything (an anonymous one all but admin)\n",
            view.version
        ),
    };
    if !view.audit.is_empty() {
        text.push_str("\nchanges (latest last):\n");
        let rows: Vec<Vec<String>> = view
            .audit
            .iter()
            .map(|a| {
                vec![
                    a.version.to_string(),
                    a.revision.to_string(),
                    a.at_unix_ms.to_string(),
                    a.by.clone(),
                    a.what.clone(),
                ]
            })
            .collect();
        text.push_str(&table::render(
            &["VERSION", "REVISION", "AT (UNIX MS)", "BY", "WHAT"],
            &rows,
        ));
    }
    Rendered::new(format, view, text, Verdict::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_client::AccessChange;

    #[test]
    fn the_policy_and_its_changes_are_shown() {
        let view = AccessView {
            version: 2,
            policy: Some("[[rule]]\nwho = [\"ops\"]\n".into()),
            audit: vec![AccessChange {
                version: 2,
                revision: 40,
                at_unix_ms: 1_700_000_000_000,
                by: "ops".into(),
                what: "1 rules, 0 groups, 0 name lists".into(),
            }],
            revision: 40,
            bootstrap: false,
        };
        let text = render(&view, OutputFormat::Table).stdout;
        assert!(
            text.starts_with("permissions version 2:\n[[rule]]"),
            "{text}"
        );
        assert!(text.contains("ops") && text.contains("1 rules"), "{text}");
        let json = render(&view, OutputFormat::Json).stdout;
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["version"], 2);
        assert_eq!(v["audit"][0]["by"], "ops");
        let none = AccessView {
            policy: None,
            audit: vec![],
            ..view
        };
        assert!(render(&none, OutputFormat::Table)
            .stdout
            .contains("no policy"));
        let boot = AccessView {
            version: 0,
            policy: Some("[[rule]]\n".into()),
            audit: vec![],
            revision: 3,
            bootstrap: true,
        };
        let text = render(&boot, OutputFormat::Table).stdout;
        assert!(
            text.contains("this node enforces its --access-policy"),
            "{text}"
        );
    }
}

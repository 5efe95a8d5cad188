//! `baton cluster members | add | remove | snapshot | backup`.

use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use super::args::{ClusterCommand, OutputFormat};
use super::exit::Verdict;
use super::output::Rendered;
use super::table;
use baton_client::{Client, Membership, SnapshotTaken};

/// How long `cluster add`, `remove`, `snapshot` and `backup` keep at it when `--timeout` is
/// not given: a new member may need a while to catch up.
pub const CLUSTER_CHANGE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(120);

/// The first line of every backup file (the node writes the format; see `baton_node::backup`).
pub use baton_proto::limits::BACKUP_MAGIC;

pub async fn run(
    client: &Client,
    command: ClusterCommand,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    Ok(match command {
        ClusterCommand::Status => unreachable!("status is rendered by the caller"),
        ClusterCommand::Members => members(&client.members().await?, format),
        ClusterCommand::Add { node_id, addr } => {
            members(&client.add_member(node_id, &addr).await?, format)
        }
        ClusterCommand::Remove { node_id } => {
            members(&client.remove_member(node_id).await?, format)
        }
        ClusterCommand::Snapshot => {
            let mut taken = Vec::new();
            for endpoint in client.endpoints() {
                taken.push(client.snapshot_at(endpoint).await?);
            }
            #[derive(Serialize)]
            struct Json<'a> {
                snapshots: &'a [SnapshotTaken],
            }
            let rows: Vec<Vec<String>> = taken
                .iter()
                .map(|t| {
                    vec![
                        t.node_id.to_string(),
                        t.endpoint.clone(),
                        t.snapshot_index.to_string(),
                        t.snapshot_bytes.to_string(),
                    ]
                })
                .collect();
            let text = table::render(&["ID", "ENDPOINT", "SNAPSHOT INDEX", "BYTES"], &rows);
            Rendered::new(format, Json { snapshots: &taken }, text, Verdict::Ok)
        }
        ClusterCommand::Backup { file } => {
            let bytes = client.backup().await?;
            let header = check_backup(&bytes).context("the node sent a damaged backup")?;
            write_durably(&file, &bytes)
                .with_context(|| format!("writing the backup to {}", file.display()))?;
            #[derive(Serialize)]
            struct Json<'a> {
                file: String,
                bytes: usize,
                header: &'a serde_json::Value,
            }
            let text = format!(
                "wrote {} ({} bytes): {} leases, {} keys, revision {}, cluster {}\n",
                file.display(),
                bytes.len(),
                header["leases"],
                header["keys"],
                header["revision"],
                header["cluster_name"]
            );
            let json = Json {
                file: file.display().to_string(),
                bytes: bytes.len(),
                header: &header,
            };
            Rendered::new(format, json, text, Verdict::Ok)
        }
    })
}

fn members(m: &Membership, format: OutputFormat) -> Rendered {
    let rows: Vec<Vec<String>> = m
        .members
        .iter()
        .map(|member| {
            let role = if member.voter { "voter" } else { "learner" };
            let leads = if m.leader_id == Some(member.id) {
                "yes"
            } else {
                ""
            };
            vec![
                member.id.to_string(),
                member.addr.clone(),
                role.to_owned(),
                leads.to_owned(),
            ]
        })
        .collect();
    let text = table::render(&["ID", "ADDR", "ROLE", "LEADER"], &rows);
    Rendered::new(format, m, text, Verdict::Ok)
}

/// Checks a backup's framing, length and checksum; returns its header.
pub fn check_backup(bytes: &[u8]) -> anyhow::Result<serde_json::Value> {
    let rest = bytes
        .strip_prefix(BACKUP_MAGIC)
        .context("not a baton backup")?;
    let end = rest
        .iter()
        .position(|b| *b == b'\n')
        .context("no header line")?;
    let header: serde_json::Value = serde_json::from_slice(&rest[..end])?;
    let state = &rest[end + 1..];
    anyhow::ensure!(
        header["state_bytes"].as_u64() == Some(state.len() as u64),
        "truncated: the header says {} bytes of state, got {}",
        header["state_bytes"],
        state.len()
    );
    anyhow::ensure!(
        header["state_crc32"].as_u64() == Some(u64::from(crc32fast::hash(state))),
        "checksum mismatch"
    );
    Ok(header)
}

/// Writes FILE.tmp, fsyncs it, renames it to FILE and fsyncs the directory.
fn write_durably(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_with_a_bad_length_or_checksum_is_refused() {
        let state = b"some state";
        let header = serde_json::json!({
            "state_bytes": state.len(),
            "state_crc32": crc32fast::hash(state),
        });
        let mut good = BACKUP_MAGIC.to_vec();
        good.extend(serde_json::to_vec(&header).unwrap());
        good.push(b'\n');
        good.extend(state);
        assert!(check_backup(&good).is_ok());
        assert!(check_backup(&good[..good.len() - 1]).is_err());
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(check_backup(&flipped).is_err());
        assert!(check_backup(b"nope").is_err());
    }
}

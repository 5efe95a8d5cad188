//! `baton cluster status | members | add | remove | snapshot | backup`.

use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use super::args::{ClusterCommand, OutputFormat};
use super::exit::Verdict;
use super::output::Rendered;
use super::table;
use std::collections::{BTreeMap, HashSet};

use baton_client::{normalize_endpoint, Client, ClusterStatus, Membership, SnapshotTaken};
use futures::future::join_all;

use super::output::{NodeDown, NodeRow};

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

/// `baton cluster status`: the rows of [`cluster_status`], unless no node answered and one
/// refused this client's credentials: then that refusal, as every other command reports it
/// (exit 1, "not authenticated: ... give --tls-cert ..."), not "no node answered" (exit 4),
/// which would send the user looking for an outage.
pub async fn cluster_status_command(client: &Client) -> Result<Vec<NodeRow>, baton_client::Error> {
    let (rows, refusal) = status_rows(client).await;
    match refusal {
        Some(refusal) if !rows.iter().any(|row| row.reachable) => Err(refusal),
        _ => Ok(rows),
    }
}

/// Asks every configured endpoint for its status, then every member those answers list that
/// was not asked yet, all in parallel; one row per node, sorted by id.
pub async fn cluster_status(client: &Client) -> Vec<NodeRow> {
    status_rows(client).await.0
}

/// [`cluster_status`]'s rows and the first refusal of this client's credentials, if any node
/// refused them.
async fn status_rows(client: &Client) -> (Vec<NodeRow>, Option<baton_client::Error>) {
    let asked = client.endpoints();
    let mut answers = ask_all(client, asked).await;

    let members: Vec<String> = answers
        .iter()
        .filter_map(|(_, answer)| answer.as_ref().ok())
        .flat_map(|status| status.members.iter())
        .filter_map(|member| normalize_endpoint(&member.addr).ok())
        .collect();
    let mut seen: HashSet<String> = asked.iter().cloned().collect();
    let unasked: Vec<String> = members
        .into_iter()
        .filter(|addr| seen.insert(addr.clone()))
        .collect();
    answers.extend(ask_all(client, &unasked).await);

    let refusal = answers.iter().find_map(|(_, answer)| match answer {
        Err(error) if credentials_refused(error).is_some() => Some(error.clone()),
        _ => None,
    });
    (node_rows(answers), refusal)
}

/// Whether `error` is a node refusing this client's credentials (it is up), and which way.
fn credentials_refused(error: &baton_client::Error) -> Option<NodeDown> {
    match error {
        baton_client::Error::Unauthenticated(_) => Some(NodeDown::Unauthenticated),
        baton_client::Error::PermissionDenied(_) => Some(NodeDown::PermissionDenied),
        _ => None,
    }
}

type StatusAnswer = (String, Result<ClusterStatus, baton_client::Error>);

async fn ask_all(client: &Client, endpoints: &[String]) -> Vec<StatusAnswer> {
    let answers = join_all(endpoints.iter().map(|e| client.status_of(e))).await;
    endpoints.iter().cloned().zip(answers).collect()
}

/// Merges answers into one row per node: a node reached at two addresses (an endpoint
/// and its member address) shows once, and an unreachable node takes its id from any
/// member list that names its address.
fn node_rows(answers: Vec<StatusAnswer>) -> Vec<NodeRow> {
    let member_ids: BTreeMap<String, u64> = answers
        .iter()
        .filter_map(|(_, answer)| answer.as_ref().ok())
        .flat_map(|status| status.members.iter())
        .filter_map(|m| Some((normalize_endpoint(&m.addr).ok()?, m.id)))
        .collect();

    let mut rows: Vec<NodeRow> = Vec::new();
    let mut ids_seen: HashSet<u64> = HashSet::new();
    for (addr, answer) in answers {
        match answer {
            Ok(status) => {
                if ids_seen.insert(status.node_id) {
                    rows.push(NodeRow {
                        id: Some(status.node_id),
                        addr,
                        reachable: true,
                        status: Some(status),
                        error: None,
                        down: None,
                    });
                }
            }
            Err(error) => rows.push(NodeRow {
                id: member_ids.get(&addr).copied(),
                addr,
                reachable: false,
                status: None,
                down: Some(credentials_refused(&error).unwrap_or(NodeDown::Unreachable)),
                // For one node, "the cluster is unavailable" would overstate it: say why
                // this node did not answer.
                error: Some(match error {
                    baton_client::Error::Unavailable { last } => last,
                    other => other.to_string(),
                }),
            }),
        }
    }
    // An unreachable address whose member id answered at another address is the same node.
    rows.retain(|row| row.reachable || !row.id.is_some_and(|id| ids_seen.contains(&id)));
    rows.sort_by(|a, b| (a.id.is_none(), a.id, &a.addr).cmp(&(b.id.is_none(), b.id, &b.addr)));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_client::Member;

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

    fn status(node_id: u64, members: &[(u64, &str)]) -> ClusterStatus {
        ClusterStatus {
            endpoint: String::new(),
            node_id,
            cluster_name: "baton".into(),
            state: "follower".into(),
            leader_id: Some(1),
            leader_addr: None,
            term: 1,
            last_log_index: 1,
            applied_index: 1,
            members: members
                .iter()
                .map(|(id, addr)| Member {
                    id: *id,
                    addr: (*addr).into(),
                    voter: true,
                })
                .collect(),
            leases: 0,
        }
    }

    fn unreachable() -> Result<ClusterStatus, baton_client::Error> {
        Err(baton_client::Error::Unavailable {
            last: "refused".into(),
        })
    }

    #[test]
    fn node_rows_are_one_per_node_sorted_by_id_with_unreachable_ids_from_members() {
        let members = [(1, "a:1"), (2, "b:2"), (3, "c:3")];
        let rows = node_rows(vec![
            ("b:2".into(), Ok(status(2, &members))),
            ("localhost:1".into(), Ok(status(1, &members))),
            ("a:1".into(), Ok(status(1, &members))),
            ("c:3".into(), unreachable()),
            ("d:4".into(), unreachable()),
        ]);
        let summary: Vec<(Option<u64>, &str, bool)> = rows
            .iter()
            .map(|r| (r.id, r.addr.as_str(), r.reachable))
            .collect();
        assert_eq!(
            summary,
            [
                (Some(1), "localhost:1", true),
                (Some(2), "b:2", true),
                (Some(3), "c:3", false),
                (None, "d:4", false),
            ]
        );
    }
}

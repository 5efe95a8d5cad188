//! The MCP tests' agents: each a real `baton mcp` child process over stdio, driven by
//! rmcp's own client, and the calls a model makes of it. Shared by the MCP test files
//! (`mod common; mod mcp_common;`), apart from `common` so that the other test files do not
//! build rmcp's client.

#![allow(dead_code)]

use std::path::Path;
use std::process::Stdio;

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

use crate::common::{cli_bin, Cluster};

pub type Session = RunningService<RoleClient, ()>;

/// Starts `baton mcp` as session `session` claiming as `holder`, in `dir`; its stderr
/// goes to `dir/SESSION.log`.
pub async fn agent(
    cluster: &Cluster,
    session: &str,
    holder: &str,
    extra: &[&str],
    dir: &Path,
) -> Session {
    ().serve(agent_transport(cluster, session, holder, extra, dir))
        .await
        .unwrap()
}

/// `baton mcp` as a child process, as [`agent`] starts it.
pub fn agent_transport(
    cluster: &Cluster,
    session: &str,
    holder: &str,
    extra: &[&str],
    dir: &Path,
) -> TokioChildProcess {
    let mut command = tokio::process::Command::new(cli_bin());
    command
        .arg("--endpoints")
        .arg(cluster.endpoints.join(","))
        .args(["mcp", "--holder", holder])
        .args(extra)
        .env("BATON_CLIENT_ID", session)
        .env("BATON_LOG", "info")
        .env_remove("BATON_HOLDER")
        .current_dir(dir);
    let log = std::fs::File::create(dir.join(format!("{session}.log"))).unwrap();
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    transport
}

/// Calls `tool` with `args` (a JSON object) and returns the whole result.
pub async fn call_raw(
    session: &rmcp::Peer<RoleClient>,
    tool: &str,
    args: Value,
) -> rmcp::model::CallToolResult {
    session
        .call_tool(
            CallToolRequestParams::new(tool.to_owned())
                .with_arguments(args.as_object().cloned().unwrap_or_default()),
        )
        .await
        .unwrap()
}

/// Calls `tool` and returns its structured result (`{"result", "notices"}`); a tool error
/// fails the test with its text.
pub async fn call(session: &rmcp::Peer<RoleClient>, tool: &str, args: Value) -> Value {
    let result = call_raw(session, tool, args).await;
    assert_ne!(result.is_error, Some(true), "{tool} failed: {result:?}");
    match result.structured_content {
        Some(content) => content,
        None => panic!("{tool} gave no structured content: {:?}", result.content),
    }
}

/// Calls `tool` and returns the text of the tool error it must answer with.
pub async fn call_refused(session: &rmcp::Peer<RoleClient>, tool: &str, args: Value) -> String {
    let result = call_raw(session, tool, args).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "{tool} did not fail: {result:?}"
    );
    serde_json::to_string(&result.content).unwrap()
}

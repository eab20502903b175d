//! `leasehold mcp`: the operator tools over the Model Context Protocol's stdio transport, for a
//! local MCP client that starts it as a subprocess. Each tool call is one call of a replica's
//! HTTP API through [`crate::client`], with `LEASEHOLD_SERVER` and `LEASEHOLD_API_KEY`: the
//! same tools, arguments and results as `/mcp` ([`crate::api::mcp`]).
//!
//! Invariant: standard output carries only the protocol's messages (logs go to standard error),
//! and the API key is never printed.

use std::sync::Arc;

use clap::Args;
use reqwest::Method;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServiceExt};
use serde_json::Value;

use crate::api::mcp::{ApiAnswer, ApiRequest, Caller, Tools};
use crate::client::{Client, ClientError, Trust};

/// Where the tools call, and as whom.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// Base URL of the service (a replica or its balancer).
    #[arg(long, env = "LEASEHOLD_SERVER", hide_env_values = true)]
    pub server: String,
    /// API key (`ak_...`); the tools act with its role.
    #[arg(long, env = "LEASEHOLD_API_KEY", hide_env_values = true)]
    pub key: String,
    /// A PEM file of CA certificates to trust beside the system's.
    #[arg(long, env = "LEASEHOLD_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<std::path::PathBuf>,
}

/// Serve the tools on standard input and output until the client closes them.
///
/// # Errors
/// The CA file cannot be read, or the transport fails.
pub async fn run(args: McpArgs) -> anyhow::Result<()> {
    let client = Client::with_trust(args.server, Some(args.key), &Trust::ca(args.ca_cert))?;
    let tools = Tools::new(Arc::new(Remote { client }));
    let running = tools
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("mcp over stdio: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| anyhow::anyhow!("mcp over stdio: {e}"))?;
    Ok(())
}

/// Sends a tool's call to a replica over HTTP.
struct Remote {
    client: Client,
}

impl Caller for Remote {
    async fn call(&self, request: ApiRequest, _: &RequestContext<RoleServer>) -> ApiAnswer {
        let method = Method::from_bytes(request.method.as_str().as_bytes()).unwrap_or(Method::GET);
        let headers: Vec<(&str, &str)> = request
            .idempotency_key
            .as_deref()
            .map(|k| ("Idempotency-Key", k))
            .into_iter()
            .collect();
        match self
            .client
            .call::<Value, Value>(method, &request.target, request.body.as_ref(), &headers)
            .await
        {
            Ok((status, body)) => ApiAnswer {
                status: status.as_u16(),
                body,
            },
            Err(ClientError::Api {
                status,
                code,
                message,
                state,
            }) => {
                let mut answer = ApiAnswer::refused(status.as_u16(), &code, message);
                if let Some(state) = state {
                    answer.body["error"]["state"] = Value::String(state);
                }
                answer
            }
            Err(e) => ApiAnswer::refused(
                503,
                "unavailable",
                format!("could not reach {}: {e}", self.client.base()),
            ),
        }
    }
}

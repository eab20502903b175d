//! Operator tools for agents: the Model Context Protocol server of the contract's v1.2 part B.
//! The same fourteen tools are served two ways: at `/mcp` of every replica over the Streamable
//! HTTP transport ([`endpoint`]), and over stdio by `leasehold mcp`
//! ([`crate::commands::mcp`]), which calls a replica through the client library.
//!
//! Invariant: a tool is one call of the HTTP API with the caller's own credential
//! ([`catalogue`] builds it, a [`Caller`] sends it): `/mcp` sends it through this replica's own
//! router in-process, `leasehold mcp` over HTTP. Either way the route's handler runs with its
//! authentication, role checks, validation and deadline, so no rule is implemented twice, and
//! nothing of a session is kept between requests (any replica serves any request).

pub mod catalogue;
pub mod endpoint;

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

pub use catalogue::{ApiAnswer, ApiRequest};

/// The protocol versions served: 2025-06-18 (the first with structured tool results) and later.
pub const PROTOCOL_VERSIONS: &[ProtocolVersion] = &[
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
    ProtocolVersion::V_2026_07_28,
];

/// Sends a tool's API call as the caller of the MCP request and returns the API's answer.
pub trait Caller: Send + Sync + 'static {
    /// `context` is the MCP request's (over HTTP it carries the HTTP request's parts, with the
    /// caller's credential).
    fn call(
        &self,
        request: ApiRequest,
        context: &RequestContext<RoleServer>,
    ) -> impl Future<Output = ApiAnswer> + Send;
}

/// The MCP server: lists the tools, and answers a tool call with what its API call answered.
pub struct Tools<C> {
    caller: Arc<C>,
}

impl<C> Clone for Tools<C> {
    fn clone(&self) -> Self {
        Self {
            caller: self.caller.clone(),
        }
    }
}

impl<C: Caller> Tools<C> {
    pub fn new(caller: Arc<C>) -> Self {
        Self { caller }
    }
}

const INSTRUCTIONS: &str = "leasehold runs jobs on self-hosted runners. Dispatch with \
dispatch_job, follow with get_job (wait_ms) and job_events, stop with cancel_job, run again with \
retry_job. See who can run jobs with list_runners and pool_summary; approve repositories for \
runners with list_repo_targets and approve_repo_target. Each tool is one call of the HTTP API \
with your API key's role; a refused call is an error result whose text begins with the API's \
error code (forbidden, not_found, bad_request, ...).";

impl<C: Caller> ServerHandler for Tools<C> {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("leasehold", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(INSTRUCTIONS.into());
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(PROTOCOL_VERSIONS)
    }

    /// Silent: rmcp's default logs every client's handshake, a line per `/mcp` client.
    async fn on_initialized(&self, _context: NotificationContext<RoleServer>) {}

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(catalogue::tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(built) = catalogue::request(&request.name, request.arguments.as_ref()) else {
            return Err(ErrorData::invalid_params(
                format!("no tool named {:?}", request.name),
                None,
            ));
        };
        let (api, call) = match built {
            Ok(built) => built,
            Err(refused) => return Ok(refused.into()),
        };
        let answer = self.caller.call(api, &context).await;
        Ok(catalogue::result(call, answer).into())
    }
}

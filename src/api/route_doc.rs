//! What the OpenAPI document says about a route, and a route itself: the types the route table
//! (`routes.rs`), the document (`openapi.rs`, `reference.rs`) and the MCP tools' catalogue
//! (`mcp/catalogue.rs`) share, in a room of their own so that none of them imports another
//! for them.

use std::sync::Arc;

use axum::http::Method;
use axum::routing::MethodRouter;
use utoipa::openapi::{RefOr, Schema};
use utoipa::ToSchema;

use super::AppState;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// No credential (health, metrics, enrolment by join code, the page's files).
    Open,
    /// An API key of any role.
    Member,
    /// An API key with role `admin`.
    Admin,
    /// A runner token.
    Runner,
}

/// Named schemas of a document's components.
pub type Schemas = Vec<(String, RefOr<Schema>)>;

/// A wire type a route takes or answers: its schema name, and how to add its schema and those
/// of every type it names to a document's components (so the components are derived from the
/// route table, never listed by hand).
#[derive(Clone, Copy)]
pub struct WireType {
    pub name: fn() -> std::borrow::Cow<'static, str>,
    pub schemas: fn(&mut Schemas),
}

impl std::fmt::Debug for WireType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&(self.name)())
    }
}

fn with_dependencies<T: ToSchema>(out: &mut Schemas) {
    out.push((T::name().into_owned(), T::schema()));
    T::schemas(out);
}

impl WireType {
    pub fn of<T: ToSchema>() -> Self {
        Self {
            name: T::name,
            schemas: with_dependencies::<T>,
        }
    }

    /// Add its schema and its dependencies' to `out`.
    pub fn collect(self, out: &mut Schemas) {
        (self.schemas)(out);
    }
}

/// A query parameter: name, JSON type, description.
pub type Query = (&'static str, &'static str, &'static str);

/// What the document says about one route.
#[derive(Debug, Clone)]
pub struct Doc {
    pub summary: &'static str,
    pub auth: Auth,
    /// The wire type of the JSON body, if it takes one.
    pub body: Option<WireType>,
    /// Status of the success answer.
    pub ok: u16,
    /// The wire type of the success answer (`None`: no body, or not JSON).
    pub answer: Option<WireType>,
    /// Media type of a non-JSON success answer.
    pub media: Option<&'static str>,
    pub query: &'static [Query],
    /// Contract codes of the 4xx answers this route gives beyond the common ones.
    pub errors: &'static [&'static str],
}

impl Doc {
    pub(crate) const fn new(summary: &'static str, auth: Auth) -> Self {
        Self {
            summary,
            auth,
            body: None,
            ok: 200,
            answer: None,
            media: None,
            query: &[],
            errors: &[],
        }
    }
    pub(crate) fn body<T: ToSchema>(mut self) -> Self {
        self.body = Some(WireType::of::<T>());
        self
    }
    pub(crate) fn answer<T: ToSchema>(mut self, ok: u16) -> Self {
        self.ok = ok;
        self.answer = Some(WireType::of::<T>());
        self
    }
    pub(crate) const fn empty(mut self, ok: u16) -> Self {
        self.ok = ok;
        self
    }
    pub(crate) const fn media(mut self, media: &'static str) -> Self {
        self.media = Some(media);
        self
    }
    pub(crate) const fn query(mut self, query: &'static [Query]) -> Self {
        self.query = query;
        self
    }
    pub(crate) const fn errors(mut self, errors: &'static [&'static str]) -> Self {
        self.errors = errors;
        self
    }
}

/// One route: method and path template (axum's `{param}` form, which is also OpenAPI's).
pub struct Route {
    pub method: Method,
    pub path: &'static str,
    pub doc: Doc,
    /// `None` while the handler is written elsewhere (documented from the contract).
    pub handler: Option<MethodRouter<Arc<AppState>>>,
}

pub(crate) fn route(
    method: Method,
    path: &'static str,
    handler: MethodRouter<Arc<AppState>>,
    doc: Doc,
) -> Route {
    Route {
        method,
        path,
        doc,
        handler: Some(handler),
    }
}

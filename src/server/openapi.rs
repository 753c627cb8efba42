//! `GET /v1/openapi.json`: the OpenAPI 3.1 description of every HTTP route.
//!
//! The document is written by hand in `docs/openapi.json` (where readers
//! and generators find it) and compiled into the binary, so the gateway
//! serves exactly the file the repository holds. It cannot drift from the
//! router: the test below lists the routes [`super::router`] and the
//! inspector register (from their source) and compares them with the
//! document's paths, and tests/clients.rs validates the document with a
//! real OpenAPI validator and checks captured answers against it.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// The document, as kept in docs/.
pub const DOCUMENT: &str = include_str!("../../docs/openapi.json");

/// Serves [`DOCUMENT`].
pub async fn document() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        DOCUMENT,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::DOCUMENT;
    use std::collections::BTreeSet;

    /// A path template with its parameter names dropped: `/a/{x}` → `/a/{}`.
    fn shape(path: &str) -> String {
        let mut out = String::new();
        let mut inside = false;
        for c in path.chars() {
            match c {
                '{' => {
                    inside = true;
                    out.push_str("{}");
                }
                '}' => inside = false,
                c if !inside => out.push(c),
                _ => {}
            }
        }
        out
    }

    /// The paths the router registers, read from its source: every
    /// `.route("…")` of `server/mod.rs` and of the A2A face it merges
    /// (`server/a2a/mod.rs`), and the inspector's routes under
    /// its default path.
    fn routed() -> BTreeSet<String> {
        let mut paths = BTreeSet::new();
        let sources = [include_str!("mod.rs"), include_str!("a2a/mod.rs")];
        for part in sources.iter().flat_map(|s| s.split(".route(").skip(1)) {
            let path = part.trim_start().trim_start_matches('"');
            let end = path.find('"').expect("a route path literal");
            paths.insert(shape(&path[..end]));
        }
        let inspector = include_str!("inspector/mod.rs");
        for part in inspector.split("format!(\"{base}").skip(1) {
            let end = part.find('"').unwrap();
            paths.insert(format!("/inspector{}", &part[..end]));
        }
        assert!(inspector.contains(".route(\n            &base,"));
        assert!(inspector.contains(".route(&slash,"));
        paths.insert("/inspector".into());
        paths.insert("/inspector/".into());
        paths
    }

    #[test]
    fn every_route_the_router_serves_is_in_the_document_and_nothing_else() {
        let doc: serde_json::Value = serde_json::from_str(DOCUMENT).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        let documented: BTreeSet<String> = doc["paths"]
            .as_object()
            .unwrap()
            .keys()
            .map(|p| shape(p))
            .collect();
        let routed = routed();
        assert!(routed.len() > 15, "the source was read: {routed:?}");
        assert_eq!(
            routed, documented,
            "docs/openapi.json and the router disagree"
        );
    }
}

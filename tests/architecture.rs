//! The cut of the workspace, as `docs/architecture.md` §0 draws it, read from the manifests:
//! a dependency that points the wrong way fails here, before anyone reads the picture again.

use std::{collections::BTreeSet, path::Path};

/// The normal dependencies of the package in `dir` (relative to the workspace root).
fn dependencies(dir: &str) -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(dir)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let manifest: toml::Table = text.parse().unwrap();
    manifest
        .get("dependencies")
        .and_then(|d| d.as_table())
        .map(|d| d.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn the_engine_names_nothing_that_does_io() {
    let allowed: BTreeSet<&str> = ["serde", "thiserror", "jiff", "croner"].into();
    let deps = dependencies("crates/engine");
    let extra: Vec<&String> = deps
        .iter()
        .filter(|d| !allowed.contains(d.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "the engine is pure (docs/architecture.md §0); it depends on {extra:?}"
    );
}

#[test]
fn the_wire_names_no_server() {
    let deps = dependencies("crates/wire");
    for server in [
        "autoscaled",
        "sled",
        "tonic-health",
        "tonic-reflection",
        "opentelemetry",
        "opentelemetry_sdk",
        "hyper",
        "rustls",
        "tokio-rustls",
    ] {
        assert!(
            !deps.contains(server),
            "the wire crate depends on {server}: a server part (docs/architecture.md §0)"
        );
    }
    assert!(deps.contains("autoscaled-engine"));
}

#[test]
fn the_tools_the_agent_and_the_fixtures_do_not_link_the_server() {
    for dir in ["crates/ctl", "crates/agent", "crates/fixtures"] {
        let deps = dependencies(dir);
        assert!(
            !deps.contains("autoscaled"),
            "{dir} depends on the server package: use autoscaled-wire (docs/architecture.md §0)"
        );
        assert!(deps.contains("autoscaled-wire"), "{dir}");
    }
}

#[test]
fn the_architecture_page_draws_every_member() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    let section = page
        .split("## 0. The workspace")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .unwrap();
    for member in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("crates")).unwrap() {
        let name = member.unwrap().file_name().into_string().unwrap();
        assert!(
            section.contains(&format!("crates/{name}")),
            "docs/architecture.md §0 does not draw crates/{name}"
        );
    }
}

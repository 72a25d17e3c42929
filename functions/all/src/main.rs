//! The bootstrap of every function in `template.yaml`. A release build links the SDK and the library once per binary
//! and takes about a minute of link-time optimisation for each: one binary for twelve functions is one link, where
//! twelve binaries took twelve. Which function a process is comes from its Handler, which the `provided.al2023`
//! runtime gives the bootstrap as `_HANDLER`; the names are those of the functions' own binaries (`saga-begin`,
//! `saga-stage`, ...), which the local stack runs one by one.

// The handlers' futures, built in their libraries, are laid out here, past the compiler's default query depth (128).
#![recursion_limit = "256"]

use saga_lambda::{Error, Phase};

/// What a Handler names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Function {
    Phase(Phase),
    Stage,
    Status,
    Events,
    Sweeper,
}

const FUNCTIONS: [(&str, Function); 12] = [
    ("saga-begin", Function::Phase(Phase::Begin)),
    ("saga-lock", Function::Phase(Phase::Lock)),
    ("saga-save", Function::Phase(Phase::Save)),
    ("saga-apply", Function::Phase(Phase::Apply)),
    ("saga-commit", Function::Phase(Phase::Commit)),
    ("saga-complete", Function::Phase(Phase::Complete)),
    ("saga-rollback", Function::Phase(Phase::Rollback)),
    ("saga-release", Function::Phase(Phase::Release)),
    ("saga-stage", Function::Stage),
    ("saga-status", Function::Status),
    ("saga-events", Function::Events),
    ("saga-sweeper", Function::Sweeper),
];

fn function_of(handler: &str) -> Result<Function, String> {
    FUNCTIONS.iter().find(|(name, _)| *name == handler).map(|(_, f)| *f).ok_or_else(|| {
        let names: Vec<&str> = FUNCTIONS.iter().map(|(name, _)| *name).collect();
        format!("configuration: the function's Handler is {handler:?}; it must be one of {}", names.join(", "))
    })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let handler = std::env::var("_HANDLER").unwrap_or_default();
    match function_of(&handler)? {
        Function::Phase(phase) => saga_lambda::serve(phase).await,
        Function::Stage => saga_stage::run().await,
        Function::Status => saga_status::run().await,
        Function::Events => saga_events::run().await,
        Function::Sweeper => saga_sweeper::run().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The functions' own packages, the template's Handlers and the table above name the same twelve functions.
    #[test]
    fn every_handler_is_a_function_and_every_function_is_deployed() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let table: std::collections::BTreeSet<&str> = FUNCTIONS.iter().map(|(name, _)| *name).collect();
        assert_eq!(table.len(), FUNCTIONS.len(), "a name twice");

        let mut packages = std::collections::BTreeSet::new();
        for dir in std::fs::read_dir(root.join("functions")).expect("functions/") {
            let dir = dir.expect("an entry").path();
            if dir.join("src/main.rs").exists() {
                let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
                let name = manifest.lines().find_map(|l| l.strip_prefix("name = ")).expect("a name");
                packages.insert(name.trim_matches('"').to_string());
            }
        }
        packages.remove("saga-functions");
        assert_eq!(packages.iter().map(String::as_str).collect::<std::collections::BTreeSet<_>>(), table);

        let template = std::fs::read_to_string(root.join("template.yaml")).expect("template.yaml");
        let resources = template.split("\nResources:").nth(1).expect("Resources");
        let handlers: Vec<&str> =
            resources.lines().filter_map(|l| l.trim().strip_prefix("Handler: ")).map(str::trim).collect();
        assert_eq!(handlers.iter().copied().collect::<std::collections::BTreeSet<_>>(), table);
        assert_eq!(handlers.len(), table.len(), "two functions with one Handler");
        let binaries: Vec<&str> =
            resources.lines().filter_map(|l| l.trim().strip_prefix("Binary: ")).map(str::trim).collect();
        assert!(binaries.len() == table.len() && binaries.iter().all(|b| *b == "saga-functions"), "{binaries:?}");

        assert!(function_of("bootstrap").unwrap_err().contains("saga-begin, saga-lock"));
        assert_eq!(function_of("saga-status"), Ok(Function::Status));
    }
}

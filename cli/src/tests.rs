//! The CLI's commands and flags, held to docs/cli.md's synopsis.

use std::collections::BTreeSet;

use clap::CommandFactory;

/// The long flags `command` takes (`--help` aside).
fn flags(command: &clap::Command) -> BTreeSet<String> {
    command
        .get_arguments()
        .filter(|a| !a.is_global_set())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

/// The synopsis docs/cli.md shows: each line's command and the long flags it names.
fn documented() -> Vec<(String, BTreeSet<String>)> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md")).unwrap();
    let block = page.split("```\ndynamo-saga [").nth(1).expect("docs/cli.md opens with the synopsis");
    let block = format!("dynamo-saga [{}", block.split("```").next().unwrap());
    block
        .lines()
        .map(|line| {
            let line = line.split('#').next().unwrap().trim();
            let words: Vec<&str> = line.split_whitespace().collect();
            let name = if words.first() == Some(&"dynamo-saga") {
                words.get(1).filter(|w| !w.starts_with('[')).unwrap_or(&"").to_string()
            } else {
                words.first().unwrap_or(&"").to_string()
            };
            let flags: BTreeSet<String> = line
                .split(|c: char| c.is_whitespace() || "[]|".contains(c))
                .filter(|w| w.starts_with("--"))
                .map(str::to_string)
                .collect();
            (name, flags)
        })
        .filter(|(name, flags)| !name.is_empty() || !flags.is_empty())
        .collect()
}

/// docs/cli.md's synopsis names every command the CLI has and every long flag of each, and nothing else; its first
/// line names the global flags.
#[test]
fn the_cli_and_docs_cli_md_agree_on_every_command_and_flag() {
    let cli = crate::Cli::command();
    let docs = documented();
    let global: BTreeSet<String> = cli
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .filter(|f| f != "--help" && f != "--version" && f != "--verbose")
        .collect();
    assert_eq!(docs[0], (String::new(), global), "the first line's global flags");
    let commands: BTreeSet<String> = cli.get_subcommands().map(|c| c.get_name().to_string()).collect();
    let named: BTreeSet<String> = docs[1..].iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(named, commands, "the commands docs/cli.md shows");
    for (name, flags_shown) in &docs[1..] {
        let command = cli.find_subcommand(name).unwrap();
        assert_eq!(flags_shown, &flags(command), "{name}'s flags in docs/cli.md");
    }
}

/// The check reads a flag the help has and the page lacks, and a command the page shows and the CLI lacks.
#[test]
fn the_check_sees_a_disagreement() {
    let cli = crate::Cli::command();
    let submit = cli.find_subcommand("submit").unwrap();
    assert!(flags(submit).contains("--no-follow"));
    let page_flags: BTreeSet<String> = ["--state-machine", "--in-process"].map(String::from).into();
    assert_ne!(page_flags, flags(submit), "a missing --no-follow is a difference");
    assert!(cli.find_subcommand("launch").is_none());
}

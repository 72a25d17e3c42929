//! The README's picture of the state machine is the one generated from `statemachine/transaction.asl.json`.
//! After changing the definition: `UPDATE_DIAGRAM=1 cargo test -p dynamo-saga-tests --test diagram`.

use harness::diagram::{mermaid, splice};
use serde_json::Value;

#[test]
fn the_readme_diagram_matches_the_state_machine_definition() {
    let root = harness::root();
    let asl: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("statemachine/transaction.asl.json")).unwrap())
            .unwrap();
    let diagram = mermaid(&asl);
    // Every state is drawn.
    for name in asl["States"].as_object().unwrap().keys() {
        assert!(diagram.contains(&format!("  {name}")), "{name} is missing from the diagram");
    }
    let readme_path = root.join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let expected = splice(&readme, &diagram).expect("README.md has the diagram markers");
    if std::env::var("UPDATE_DIAGRAM").is_ok_and(|v| v == "1") {
        std::fs::write(&readme_path, &expected).unwrap();
        return;
    }
    assert!(readme == expected, "README.md's state machine diagram is out of date: run UPDATE_DIAGRAM=1 cargo test -p dynamo-saga-tests --test diagram");
}

#[test]
fn choice_rules_become_short_labels() {
    let asl = serde_json::json!({"StartAt": "R", "States": {
        "R": {"Type": "Choice", "Choices": [
            {"And": [{"Variable": "$.Step", "StringEquals": "Wait"}, {"Variable": "$.WaitSeconds", "IsPresent": true}], "Next": "W"}],
            "Default": "F"},
        "W": {"Type": "Wait", "Seconds": 1, "Next": "R"},
        "F": {"Type": "Fail", "Error": "Oops"}}});
    let d = mermaid(&asl);
    assert!(d.contains("R -->|\"Step = Wait and has WaitSeconds\"| W"), "{d}");
    assert!(d.contains("R -->|otherwise| F"), "{d}");
    assert!(d.contains("F[[\"F: Oops\"]]"), "{d}");
}

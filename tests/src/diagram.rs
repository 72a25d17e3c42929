//! A picture of the state machine: a Mermaid flowchart (GitHub renders it in the README) generated from
//! `statemachine/transaction.asl.json`. `tests/diagram.rs` keeps the README's copy equal to it.

use serde_json::Value;

/// The README lines between which the generated diagram lives.
pub const BEGIN: &str =
    "<!-- state machine diagram: generated from statemachine/transaction.asl.json by tests/diagram.rs -->";
pub const END: &str = "<!-- end of the state machine diagram -->";

/// A short label for a Choice rule: `Step = Lock`, `Step = Wait and has WaitSeconds`.
fn rule(r: &Value) -> String {
    if let Some(all) = r.get("And").and_then(Value::as_array) {
        return all.iter().map(rule).collect::<Vec<_>>().join(" and ");
    }
    if let Some(any) = r.get("Or").and_then(Value::as_array) {
        return any.iter().map(rule).collect::<Vec<_>>().join(" or ");
    }
    if let Some(not) = r.get("Not") {
        return format!("not {}", rule(not));
    }
    let var = r["Variable"].as_str().unwrap_or("?").trim_start_matches("$.");
    let test = r.as_object().into_iter().flatten().find(|(k, _)| !matches!(k.as_str(), "Variable" | "Next"));
    match test {
        Some((k, v)) if k == "IsPresent" => format!("{}{var}", if v == true { "has " } else { "no " }),
        Some((k, v)) if k.ends_with("Equals") => {
            format!("{var} = {}", v.as_str().map(String::from).unwrap_or_else(|| v.to_string()))
        }
        Some((k, v)) => format!("{var} {k} {v}"),
        None => var.to_string(),
    }
}

fn node(name: &str, state: &Value) -> String {
    let t = state["Type"].as_str().unwrap_or("");
    match t {
        "Task" => format!("{name}[\"{name}\"]"),
        "Choice" => format!("{name}{{\"{name}\"}}"),
        "Wait" => format!("{name}([\"{name}: wait\"])"),
        "Pass" => format!("{name}[/\"{name}\"/]"),
        "Succeed" => format!("{name}((\"{name}\"))"),
        "Fail" => format!("{name}[[\"{name}: {}\"]]", state["Error"].as_str().unwrap_or("fail")),
        other => format!("{name}[\"{name} ({other})\"]"),
    }
}

/// The flowchart of a state machine definition (JSONPath ASL, top-level states).
pub fn mermaid(asl: &Value) -> String {
    let states = asl["States"].as_object().expect("States");
    let mut out = vec!["```mermaid".to_string(), "flowchart TD".to_string()];
    out.push(format!("  start((start)) --> {}", asl["StartAt"].as_str().expect("StartAt")));
    for (name, s) in states {
        out.push(format!("  {}", node(name, s)));
    }
    for (name, s) in states {
        if let Some(next) = s["Next"].as_str() {
            out.push(format!("  {name} --> {next}"));
        }
        for c in s["Choices"].as_array().into_iter().flatten() {
            out.push(format!("  {name} -->|\"{}\"| {}", rule(c), c["Next"].as_str().unwrap_or("?")));
        }
        if let Some(d) = s["Default"].as_str() {
            out.push(format!("  {name} -->|otherwise| {d}"));
        }
        for c in s["Catch"].as_array().into_iter().flatten() {
            let errors: Vec<&str> =
                c["ErrorEquals"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            out.push(format!("  {name} -.->|\"{}\"| {}", errors.join(", "), c["Next"].as_str().unwrap_or("?")));
        }
    }
    out.push("```".to_string());
    out.join("\n")
}

/// `text` with the part between [`BEGIN`] and [`END`] replaced by `diagram`; `None` when the markers are missing.
pub fn splice(text: &str, diagram: &str) -> Option<String> {
    let start = text.find(BEGIN)? + BEGIN.len();
    let end = text[start..].find(END)? + start;
    Some(format!("{}\n{diagram}\n{}", &text[..start], &text[end..]))
}

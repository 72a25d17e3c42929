// placeholder until the parser lands
use std::collections::BTreeSet;
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElem { Name(String), Placeholder(String), Index(u32) }
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path(pub Vec<PathElem>);
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClauseKind { Set, Remove, Add, Delete }
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExprRefs { pub name_placeholders: BTreeSet<String>, pub value_placeholders: BTreeSet<String>, pub paths: Vec<Path> }
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateExpr { pub refs: ExprRefs, pub clauses: Vec<(ClauseKind, String)>, pub targets: Vec<(ClauseKind, Path)> }
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError { pub message: String, pub position: Option<usize> }
impl std::fmt::Display for ExprError { fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(&self.message) } }
impl std::error::Error for ExprError {}
fn refs(e: &str) -> ExprRefs {
    let mut r = ExprRefs::default();
    for tok in e.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '#' || c == ':')) {
        if tok.starts_with('#') { r.name_placeholders.insert(tok.to_string()); }
        if tok.starts_with(':') { r.value_placeholders.insert(tok.to_string()); }
    }
    r
}
pub fn parse_condition(expr: &str) -> Result<ExprRefs, ExprError> { Ok(refs(expr)) }
pub fn parse_update(expr: &str) -> Result<UpdateExpr, ExprError> { Ok(UpdateExpr { refs: refs(expr), clauses: vec![], targets: vec![] }) }
pub fn add_actions(expr: &str, kind: ClauseKind, extra: &str) -> Result<String, ExprError> {
    assert_eq!(kind, ClauseKind::Set);
    let up = expr.to_uppercase();
    if let Some(i) = up.find("SET ") { Ok(format!("{} {}, {}", &expr[..i+4], extra, &expr[i+4..])) } else { Ok(format!("{expr} SET {extra}")) }
}

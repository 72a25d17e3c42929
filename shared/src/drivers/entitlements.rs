//! Caller entitlements: which callers of a shared stack may name which of its allowed tables.
//!
//! The stack's roles write the callers' tables, so without entitlements every caller of `POST /transactions` and every
//! sender of a `TransactWriteItems` event may write every table of `AllowedTables`, whatever its own IAM identity may
//! touch. Entitlements (`SAGA_CALLER_ENTITLEMENTS`, the template's `CallerEntitlements`) say who may name what, and the
//! API and events functions check a request against them before anything is written.
//!
//! The setting is a list of entries separated by `;`, each `CALLER=TABLE,TABLE,...`:
//!
//! - `CALLER` is an IAM principal ARN for callers of the API, matched as IAM's `ArnLike` matches (each of the six
//!   colon-separated parts on its own, `*` for any run of characters, `?` for one), against the caller's ARN as API
//!   Gateway gives it (`requestContext.identity.userArn`). A role's session calls as
//!   `arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION`; the role's own ARN without its path,
//!   `arn:aws:iam::ACCOUNT:role/ROLE`, also names every session of it.
//! - or `event:ACCOUNT:SOURCE` for EventBridge senders: the event's `account` (the account that put it, which
//!   EventBridge sets) and its `source`, each with the same wildcards.
//! - `TABLE` is a table name, or a prefix ending in `*` (`orders-*`), as `AllowedTables` names them: the caller may
//!   write it and read it. `read:TABLE` lets the caller read it only, with a snapshot read (`POST
//!   /transactions/reads`). A request may name a table only when `AllowedTables` allows it and an entry matching the
//!   caller lists it.
//!
//! Entries for the same caller add up. An empty setting leaves every caller free to name every allowed table.

use serde_json::Value;

use crate::constants::ENV_CALLER_ENTITLEMENTS;
use crate::error::{Denied, TxError};

/// Who sent a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller<'a> {
    /// A caller of the API, by the ARN of its IAM principal (`None`: API Gateway named none).
    Principal(Option<&'a str>),
    /// The sender of an EventBridge event: the event's account and source.
    Event { account: &'a str, source: &'a str },
}

impl std::fmt::Display for Caller<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caller::Principal(Some(arn)) => f.write_str(arn),
            Caller::Principal(None) => f.write_str("a caller API Gateway did not identify"),
            Caller::Event { account, source } => write!(f, "events of source {source:?} from account {account}"),
        }
    }
}

/// The entitlements of a stack's callers (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entitlements {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    who: Who,
    /// Each table pattern, and whether the caller may only read it (`read:TABLE`).
    tables: Vec<(String, bool)>,
}

/// What a request does with the tables it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Write,
    Read,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Who {
    /// The six parts of an ARN pattern.
    Principal([String; 6]),
    Event {
        account: String,
        source: String,
    },
}

impl Entitlements {
    /// The entitlements `text` sets; `None` for an empty setting (every caller may name every allowed table).
    pub fn parse(text: &str) -> Result<Option<Self>, String> {
        let mut entries = Vec::new();
        for raw in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let (who, tables) =
                raw.split_once('=').ok_or_else(|| format!("{raw:?} is not CALLER=TABLE,TABLE,... (no '=')"))?;
            let who = who.trim();
            let who = if let Some(rest) = who.strip_prefix("event:") {
                let (account, source) = rest
                    .split_once(':')
                    .filter(|(a, s)| !a.is_empty() && !s.is_empty())
                    .ok_or_else(|| format!("{who:?} is not event:ACCOUNT:SOURCE"))?;
                Who::Event { account: account.to_string(), source: source.to_string() }
            } else {
                Who::Principal(arn_parts(who).ok_or_else(|| {
                    format!("{who:?} is neither an IAM principal ARN (arn:PARTITION:SERVICE::ACCOUNT:RESOURCE) nor event:ACCOUNT:SOURCE")
                })?)
            };
            let tables: Vec<(String, bool)> = tables
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| match t.strip_prefix("read:") {
                    Some(read) => (read.trim().to_string(), true),
                    None => (t.to_string(), false),
                })
                .collect();
            if tables.is_empty() {
                return Err(format!("{raw:?} names no table"));
            }
            if let Some((t, _)) = tables.iter().find(|(t, _)| t.is_empty()) {
                return Err(format!("{raw:?}: read:{t} names no table"));
            }
            entries.push(Entry { who, tables });
        }
        Ok((!entries.is_empty()).then_some(Entitlements { entries }))
    }

    /// The entitlements `SAGA_CALLER_ENTITLEMENTS` sets, read through `lookup`; an error naming the variable when it
    /// cannot be read.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, TxError> {
        let text = lookup(ENV_CALLER_ENTITLEMENTS).unwrap_or_default();
        Self::parse(&text).map_err(|e| TxError::Internal(format!("{ENV_CALLER_ENTITLEMENTS}: {e}")))
    }

    /// The table patterns every entry matching `caller` lists for `access` (a table it may write it may also read).
    fn tables_of<'a>(&'a self, caller: &Caller<'_>, access: Access) -> Vec<&'a str> {
        self.entries
            .iter()
            .filter(|e| e.who.matches(caller))
            .flat_map(|e| e.tables.iter())
            .filter(|(_, read_only)| access == Access::Read || !read_only)
            .map(|(t, _)| t.as_str())
            .collect()
    }

    /// Whether `caller` may write each table of `tables` (the action it is named by, `None` for the `Parent`): the
    /// first it may not is refused with `AccessDenied` naming it.
    pub fn check<'t>(
        &self,
        caller: &Caller<'_>,
        tables: impl IntoIterator<Item = (Option<usize>, &'t str)>,
    ) -> Result<(), TxError> {
        self.check_access(caller, Access::Write, tables)
    }

    /// Whether `caller` may `access` each table of `tables`, as [`Entitlements::check`].
    pub fn check_access<'t>(
        &self,
        caller: &Caller<'_>,
        access: Access,
        tables: impl IntoIterator<Item = (Option<usize>, &'t str)>,
    ) -> Result<(), TxError> {
        let mine = self.tables_of(caller, access);
        let verb = match access {
            Access::Write => "write",
            Access::Read => "read",
        };
        for (action, table) in tables {
            if !mine.iter().any(|p| table_matches(p, table)) {
                let whose = match action {
                    Some(i) => format!("TransactItems[{i}]"),
                    None => "Parent".to_string(),
                };
                let message = if mine.is_empty() {
                    format!(
                        "{whose}: {caller} may not {verb} table {table}: no entry of {ENV_CALLER_ENTITLEMENTS} names it"
                    )
                } else {
                    format!("{whose}: {caller} may not {verb} table {table}: its entitlements name {}", mine.join(", "))
                };
                return Err(TxError::AccessDenied(Denied { action, table: table.to_string(), message }));
            }
        }
        Ok(())
    }
}

/// Checks `request` (a request's JSON, whole or a chunk of its `TransactItems`, or `TransactItems` itself) for
/// `caller` when `entitlements` are set: every table its actions name, and its `Parent`'s. Parts that are not where a
/// table name belongs are left to the request's own validation.
pub fn check_request(entitlements: Option<&Entitlements>, caller: &Caller<'_>, request: &Value) -> Result<(), TxError> {
    let Some(e) = entitlements else { return Ok(()) };
    let items = match request {
        Value::Array(items) => Some(items),
        other => other.get("TransactItems").and_then(Value::as_array),
    };
    let actions = items.into_iter().flatten().enumerate().filter_map(|(i, item)| {
        let op = item.as_object()?.values().next()?;
        Some((Some(i), op.get("TableName")?.as_str()?))
    });
    let parent = request.get("Parent").and_then(|p| p.get("TableName")).and_then(Value::as_str).map(|t| (None, t));
    e.check(caller, actions.chain(parent))
}

/// Checks a snapshot read's request (`{"TransactItems": [{"Get": {"TableName", ...}}]}`) for `caller` when
/// `entitlements` are set: every table it reads, which an entry must list as a table the caller may write or read.
pub fn check_read(entitlements: Option<&Entitlements>, caller: &Caller<'_>, request: &Value) -> Result<(), TxError> {
    let Some(e) = entitlements else { return Ok(()) };
    let gets = request.get("TransactItems").and_then(Value::as_array).into_iter().flatten().enumerate();
    let tables = gets.filter_map(|(i, g)| Some((Some(i), g.get("Get")?.get("TableName")?.as_str()?)));
    e.check_access(caller, Access::Read, tables)
}

impl Who {
    fn matches(&self, caller: &Caller<'_>) -> bool {
        match (self, caller) {
            (Who::Principal(pattern), Caller::Principal(Some(arn))) => {
                principal_names(arn).iter().any(|name| arn_parts(name).is_some_and(|parts| arn_like(pattern, &parts)))
            }
            (Who::Event { account, source }, Caller::Event { account: a, source: s }) => {
                glob(account, a) && glob(source, s)
            }
            _ => false,
        }
    }
}

/// The names a caller's ARN stands for: itself, and for a role's session (`arn:P:sts::A:assumed-role/ROLE/SESSION`)
/// the role (`arn:P:iam::A:role/ROLE`, which API Gateway gives without its path).
fn principal_names(arn: &str) -> Vec<String> {
    let mut names = vec![arn.to_string()];
    if let Some(parts) = arn_parts(arn) {
        if parts[2] == "sts" {
            if let Some((role, _session)) = parts[5].strip_prefix("assumed-role/").and_then(|r| r.split_once('/')) {
                names.push(format!("arn:{}:iam::{}:role/{role}", parts[1], parts[4]));
            }
        }
    }
    names
}

/// An ARN's six parts (`arn`, partition, service, Region, account, resource); the resource keeps any colons.
fn arn_parts(arn: &str) -> Option<[String; 6]> {
    let mut it = arn.splitn(6, ':');
    let parts: [String; 6] = std::array::from_fn(|_| it.next().unwrap_or("\u{0}").to_string());
    (parts[0] == "arn" && !parts.iter().any(|p| p.contains('\u{0}')) && !parts[5].is_empty()).then_some(parts)
}

/// IAM's `ArnLike`: each part matched on its own.
fn arn_like(pattern: &[String; 6], arn: &[String; 6]) -> bool {
    pattern.iter().zip(arn).all(|(p, a)| glob(p, a))
}

/// `*` matches any run of characters, `?` one character; everything else itself.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // The classic two-pointer match with backtracking to the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// A table pattern as `AllowedTables` writes them: a name, or a prefix ending in `*`.
fn table_matches(pattern: &str, table: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => table.starts_with(prefix),
        None => pattern == table,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ORDERS_ROLE: &str = "arn:aws:iam::111122223333:role/orders-service";

    fn entitlements(text: &str) -> Entitlements {
        Entitlements::parse(text).unwrap().expect("entries")
    }

    fn request(tables: &[&str]) -> Value {
        let items: Vec<Value> =
            tables.iter().map(|t| json!({"Put": {"TableName": t, "Item": {"pk": {"S": "a"}}}})).collect();
        json!({ "TransactItems": items })
    }

    #[test]
    fn a_read_entry_lets_its_caller_read_and_not_write() {
        let e = entitlements(&format!("{ORDERS_ROLE}=Orders,read:Inventory,read:ledger-*"));
        let caller = Caller::Principal(Some(ORDERS_ROLE));
        let gets = |tables: &[&str]| {
            let items: Vec<Value> =
                tables.iter().map(|t| json!({"Get": {"TableName": t, "Key": {"pk": {"S": "a"}}}})).collect();
            json!({ "TransactItems": items })
        };
        assert!(check_read(Some(&e), &caller, &gets(&["Orders", "Inventory", "ledger-2026"])).is_ok());
        let err = check_request(Some(&e), &caller, &request(&["Orders", "Inventory"])).unwrap_err();
        let TxError::AccessDenied(d) = &err else { panic!("{err:?}") };
        assert_eq!((d.action, d.table.as_str()), (Some(1), "Inventory"));
        assert!(err.to_string().contains("may not write table Inventory: its entitlements name Orders"), "{err}");
        let err = check_read(Some(&e), &caller, &gets(&["Orders", "Payments"])).unwrap_err();
        assert!(
            err.to_string().contains("TransactItems[1]: ") && err.to_string().contains("may not read table Payments")
        );
        assert!(check_read(None, &caller, &gets(&["Payments"])).is_ok(), "no entitlements: every allowed table");
        assert!(Entitlements::parse(&format!("{ORDERS_ROLE}=read:")).unwrap_err().contains("names no table"));
    }

    #[test]
    fn an_empty_setting_sets_no_entitlements() {
        assert_eq!(Entitlements::parse("").unwrap(), None);
        assert_eq!(Entitlements::parse(" ; ;").unwrap(), None);
        assert_eq!(Entitlements::from_vars(|_| None).unwrap(), None);
    }

    #[test]
    fn a_malformed_entry_is_refused_with_what_is_wrong() {
        for (text, says) in [
            ("arn:aws:iam::1:role/x", "no '='"),
            ("arn:aws:iam::1:role/x=", "names no table"),
            ("arn:aws:iam=Orders", "neither an IAM principal ARN"),
            ("orders-service=Orders", "neither an IAM principal ARN"),
            ("event:111122223333=Orders", "event:ACCOUNT:SOURCE"),
            ("event::orders=Orders", "event:ACCOUNT:SOURCE"),
        ] {
            let e = Entitlements::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        let e = Entitlements::from_vars(|_| Some("nonsense".into())).unwrap_err();
        assert!(e.to_string().contains(ENV_CALLER_ENTITLEMENTS), "{e}");
    }

    #[test]
    fn a_role_names_its_sessions_and_a_session_pattern_names_only_matching_sessions() {
        let e = entitlements(&format!(
            "{ORDERS_ROLE}=Orders,order-lines-*; arn:aws:sts::111122223333:assumed-role/payments/batch-*=Payments"
        ));
        let session = Caller::Principal(Some("arn:aws:sts::111122223333:assumed-role/orders-service/i-0abc"));
        assert!(check_request(Some(&e), &session, &request(&["Orders", "order-lines-2026"])).is_ok());
        let err = check_request(Some(&e), &session, &request(&["Orders", "Payments"])).unwrap_err();
        assert_eq!(err.name(), "AccessDenied");
        let TxError::AccessDenied(d) = &err else { panic!("{err:?}") };
        assert_eq!((d.action, d.table.as_str()), (Some(1), "Payments"));
        assert!(err.to_string().contains("TransactItems[1]") && err.to_string().contains("Orders, order-lines-*"));

        let batch = Caller::Principal(Some("arn:aws:sts::111122223333:assumed-role/payments/batch-7"));
        assert!(check_request(Some(&e), &batch, &request(&["Payments"])).is_ok());
        let other = Caller::Principal(Some("arn:aws:sts::111122223333:assumed-role/payments/web-1"));
        let err = check_request(Some(&e), &other, &request(&["Payments"])).unwrap_err();
        assert!(err.to_string().contains("no entry of SAGA_CALLER_ENTITLEMENTS"), "{err}");
        let elsewhere = Caller::Principal(Some("arn:aws:sts::444455556666:assumed-role/orders-service/s"));
        assert!(check_request(Some(&e), &elsewhere, &request(&["Orders"])).is_err(), "another account's role");
        assert!(check_request(Some(&e), &Caller::Principal(None), &request(&["Orders"])).is_err());
    }

    #[test]
    fn wildcards_match_within_each_part_of_an_arn() {
        let e = entitlements("arn:aws:iam::*:user/ops-?=Orders");
        let user = |arn: &'static str| Caller::Principal(Some(arn));
        assert!(check_request(Some(&e), &user("arn:aws:iam::111122223333:user/ops-a"), &request(&["Orders"])).is_ok());
        for arn in ["arn:aws:iam::111122223333:user/ops-ab", "arn:aws-cn:iam::111122223333:user/ops-a"] {
            assert!(check_request(Some(&e), &user(arn), &request(&["Orders"])).is_err(), "{arn}");
        }
        // The account part's `*` does not reach into the resource: each part is matched on its own.
        let e = entitlements("arn:aws:iam::111122223333:*=Orders");
        assert!(check_request(Some(&e), &user("arn:aws:iam::111122223333:user/a"), &request(&["Orders"])).is_ok());
        assert!(
            check_request(Some(&e), &user("arn:aws:sts::111122223333:assumed-role/r/s"), &request(&["Orders"])).is_ok(),
            "the session's role is an iam ARN of that account"
        );
    }

    #[test]
    fn events_are_entitled_by_account_and_source_and_the_parent_counts() {
        let e = entitlements("event:111122223333:dynamo-saga.orders=Orders,Inventory; event:*:dynamo-saga.audit=Audit");
        let orders = Caller::Event { account: "111122223333", source: "dynamo-saga.orders" };
        let mut body = request(&["Orders"]);
        body["Parent"] = json!({"TableName": "Inventory", "Key": {"pk": {"S": "p"}}});
        assert!(check_request(Some(&e), &orders, &body).is_ok());
        body["Parent"]["TableName"] = json!("Audit");
        let err = check_request(Some(&e), &orders, &body).unwrap_err();
        let TxError::AccessDenied(d) = &err else { panic!("{err:?}") };
        assert_eq!((d.action, d.table.as_str()), (None, "Audit"));
        assert!(err.to_string().starts_with("Parent: "), "{err}");
        let foreign = Caller::Event { account: "444455556666", source: "dynamo-saga.orders" };
        assert!(check_request(Some(&e), &foreign, &request(&["Orders"])).is_err());
        let audit = Caller::Event { account: "444455556666", source: "dynamo-saga.audit" };
        assert!(check_request(Some(&e), &audit, &request(&["Audit"])).is_ok());
        let principal = Caller::Principal(Some(ORDERS_ROLE));
        assert!(
            check_request(Some(&e), &principal, &request(&["Orders"])).is_err(),
            "an event entry names no principal"
        );
    }

    #[test]
    fn without_entitlements_and_for_chunks_and_unreadable_parts() {
        let anyone = Caller::Principal(None);
        assert!(check_request(None, &anyone, &request(&["Anything"])).is_ok());
        let e = entitlements(&format!("{ORDERS_ROLE}=Orders"));
        let orders = Caller::Principal(Some(ORDERS_ROLE));
        // A chunk of the staging API is TransactItems alone.
        let chunk = request(&["Orders", "Payments"])["TransactItems"].clone();
        let err = check_request(Some(&e), &orders, &chunk).unwrap_err();
        assert!(err.to_string().contains("Payments"), "{err}");
        // What is not a table name is for validation to refuse.
        let odd = json!({"TransactItems": [{"Put": {"TableName": 7}}, "x", {"Put": {"TableName": "Orders"}}]});
        assert!(check_request(Some(&e), &orders, &odd).is_ok());
    }

    #[test]
    fn glob_matches_runs_and_single_characters() {
        for (p, t, m) in [
            ("*", "", true),
            ("a*c", "abbbc", true),
            ("a*c", "abbb", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*.orders", "dynamo-saga.orders", true),
            ("a**b", "ab", true),
            ("", "", true),
            ("", "a", false),
        ] {
            assert_eq!(glob(p, t), m, "{p} ~ {t}");
        }
    }
}

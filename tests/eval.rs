//! The update evaluator ([`dynamo_saga::eval`]) against DynamoDB Local: thousands of random updates, each run on
//! DynamoDB Local with `UpdateItem` and by the evaluator on the item as DynamoDB stored it. Both must accept or
//! refuse alike, refuse for the same reason, and accept with the same item.
//!
//! The cases are drawn with a seeded RNG (`EVAL_SEED` replaces the seed, `EVAL_CASES` the number of cases) from
//! scenarios that each aim at a rule: random updates of every action and function on random documents, numbers at
//! the limits of range and precision, key and index key attributes, items near 400 KB, placeholders and values
//! DynamoDB refuses. Every outcome is counted, and every kind of refusal must have happened a few times, so that a
//! generator that drifts cannot leave a rule untested.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ReturnValue, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use dynamo_saga::eval::{apply_update, item_size, EvalErrorKind, IndexKey, KeyTypes, MAX_ITEM_BYTES};
use dynamo_saga::expr::is_reserved_word;
use dynamo_saga::value::{item_to_json, Item};
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Attributes the generator writes and reads; `aa`, `bb` and `cc` share a hash bucket in DynamoDB Local, so that
/// the order it reports errors in is tested within a bucket as well as across buckets.
const ATTRS: [&str; 14] = ["a", "b", "c", "d", "m", "l", "s", "n", "x", "y", "aa", "bb", "cc", "zq"];
const MAP_KEYS: [&str; 5] = ["x", "y", "z", "w", "aa"];
const STRINGS: [&str; 7] = ["a", "b", "c", "", "zz", "0", "é"];
const NUMBERS: [&str; 24] = [
    "0",
    "1",
    "2",
    "-1",
    "7",
    "10",
    "100",
    "1.5",
    "1.50",
    "2.0",
    "0.0",
    "-0",
    "3.25",
    "1e2",
    "4E+1",
    "1.5e-3",
    "0.001",
    "-2.5",
    "123456789",
    "1E+10",
    "25",
    "+5",
    ".5",
    "5.",
];
/// Numbers at DynamoDB's limits of magnitude and precision, valid each of them.
const EDGE_NUMBERS: [&str; 18] = [
    "9.9999999999999999999999999999999999999E+125",
    "-9.9999999999999999999999999999999999999E+125",
    "1E+125",
    "5E+125",
    "1E-130",
    "-1E-130",
    "1.5E-130",
    "9.9E-130",
    "12345678901234567890123456789012345678",
    "99999999999999999999999999999999999999",
    "-99999999999999999999999999999999999999",
    "1.2345678901234567890123456789012345678",
    "0.1",
    "1E+30",
    "1E-8",
    "1E-7",
    "1E+100",
    "1234567890123456789012345678901234567800000",
];
/// A number, an operator and an operand whose result is just inside or just outside DynamoDB's limits.
const ARITHMETIC_EDGES: [(&str, &str, &str); 14] = [
    ("5E+125", "+", "5E+125"),
    ("9E+125", "+", "1E+125"),
    ("-9E+125", "-", "1E+125"),
    ("9.9999999999999999999999999999999999999E+125", "-", "1E+88"),
    ("9.9999999999999999999999999999999999999E+125", "+", "1E+88"),
    ("1.5E-130", "-", "1E-130"),
    ("9.9E-130", "-", "9.8E-130"),
    ("-1.5E-130", "+", "1E-130"),
    ("1E-130", "-", "1E-130"),
    ("2E-130", "-", "1E-130"),
    ("12345678901234567890123456789012345678", "+", "0.1"),
    ("99999999999999999999999999999999999999", "+", "1"),
    ("1E+30", "+", "1E-7"),
    ("1E+30", "+", "1E-8"),
];
/// Numbers DynamoDB refuses in a request.
const BAD_NUMBERS: [&str; 8] =
    ["1E+126", "1e-131", "123456789012345678901234567890123456789", "abc", "", "0x5", " 5", "1e"];

fn key_types() -> KeyTypes {
    KeyTypes {
        key: vec![("pk".into(), 'S'), ("sk".into(), 'N')],
        index_keys: vec![
            IndexKey::new("by-gs", "gs", 'S', false),
            IndexKey::new("by-gs", "gn", 'N', true),
            IndexKey::new("by-gb", "gb", 'B', false),
            IndexKey::new("by-gb", "gr", 'S', true),
        ],
    }
}

/// The table: `pk` (S) and `sk` (N), an index on `gs` (S) and `gn` (N), another on `gb` (B) and `gr` (S). Only global indexes:
/// DynamoDB Local does not check the type of a local secondary index key on `UpdateItem`, where DynamoDB does.
async fn create_table(client: &Client, name: &str) {
    let key = |n: &str, t: KeyType| KeySchemaElement::builder().attribute_name(n).key_type(t).build().unwrap();
    let def = |n: &str, t: ScalarAttributeType| {
        AttributeDefinition::builder().attribute_name(n).attribute_type(t).build().unwrap()
    };
    let index = |name: &str, keys: Vec<KeySchemaElement>| {
        GlobalSecondaryIndex::builder()
            .index_name(name)
            .set_key_schema(Some(keys))
            .projection(Projection::builder().projection_type(ProjectionType::KeysOnly).build())
            .build()
            .unwrap()
    };
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .attribute_definitions(def("pk", ScalarAttributeType::S))
        .attribute_definitions(def("sk", ScalarAttributeType::N))
        .attribute_definitions(def("gs", ScalarAttributeType::S))
        .attribute_definitions(def("gn", ScalarAttributeType::N))
        .attribute_definitions(def("gb", ScalarAttributeType::B))
        .attribute_definitions(def("gr", ScalarAttributeType::S))
        .global_secondary_indexes(index("by-gs", vec![key("gs", KeyType::Hash), key("gn", KeyType::Range)]))
        .global_secondary_indexes(index("by-gb", vec![key("gb", KeyType::Hash), key("gr", KeyType::Range)]))
        .send()
        .await
        .unwrap();
}

/// One update to run both ways.
#[derive(Debug, Clone)]
struct Case {
    id: usize,
    scenario: &'static str,
    key: Item,
    /// The item's attributes besides the key; `None` when no item has the key.
    before: Option<Item>,
    /// Whether the item is written with `UpdateItem` (numbers kept as written) rather than `PutItem`.
    create_by_update: bool,
    expr: String,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Number,
    Str,
    List,
    Map,
    NumberSet,
    StringSet,
    BinarySet,
    Any,
}

/// The generator of one case: its RNG, and the placeholders it has defined so far.
struct Gen<'r> {
    rng: &'r mut StdRng,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
    /// The paths the case's actions write so far, which later actions mostly keep clear of.
    targets: Vec<Vec<Elem>>,
    /// Whether to draw what DynamoDB mostly accepts: paths the item has, operands of the type wanted, small numbers.
    friendly: bool,
}

impl Gen<'_> {
    fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from.choose(self.rng).unwrap()
    }

    fn number(&mut self) -> String {
        if self.friendly {
            self.pick(&NUMBERS).to_string()
        } else if self.chance(0.2) {
            self.pick(&EDGE_NUMBERS).to_string()
        } else if self.chance(0.2) {
            format!("{}", self.rng.gen_range(-1000..1000))
        } else {
            self.pick(&NUMBERS).to_string()
        }
    }

    fn number_set(&mut self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for _ in 0..self.rng.gen_range(1..5) {
            let n = self.number();
            let v = n.parse::<f64>().ok();
            if !out.iter().any(|x| x.parse::<f64>().ok() == v) {
                out.push(n);
            }
        }
        out
    }

    fn string_set(&mut self) -> Vec<String> {
        let mut out: Vec<String> = STRINGS.iter().map(|s| s.to_string()).collect();
        out.shuffle(self.rng);
        out.truncate(self.rng.gen_range(1..4));
        out
    }

    fn binary_set(&mut self) -> Vec<Blob> {
        let mut out: Vec<Vec<u8>> = vec![vec![0], vec![1], vec![1, 2], vec![], vec![255]];
        out.shuffle(self.rng);
        out.truncate(self.rng.gen_range(1..4));
        out.into_iter().map(Blob::new).collect()
    }

    /// A random valid value; `depth` bounds the nesting of maps and lists.
    fn value(&mut self, kind: Kind, depth: usize) -> AttributeValue {
        let kind = if kind == Kind::Any {
            let kinds = [
                (Kind::Number, 25),
                (Kind::Str, 15),
                (Kind::List, if depth < 3 { 12 } else { 0 }),
                (Kind::Map, if depth < 3 { 12 } else { 0 }),
                (Kind::NumberSet, 10),
                (Kind::StringSet, 8),
                (Kind::BinarySet, 5),
                (Kind::Any, 13),
            ];
            kinds.choose_weighted(self.rng, |k| k.1).unwrap().0
        } else {
            kind
        };
        match kind {
            Kind::Number => AttributeValue::N(self.number()),
            Kind::Str => AttributeValue::S(self.pick(&STRINGS).to_string()),
            Kind::List => {
                AttributeValue::L((0..self.rng.gen_range(0..5)).map(|_| self.value(Kind::Any, depth + 1)).collect())
            }
            Kind::Map => {
                let n = self.rng.gen_range(0..4);
                AttributeValue::M(
                    (0..n).map(|_| (self.pick(&MAP_KEYS).to_string(), self.value(Kind::Any, depth + 1))).collect(),
                )
            }
            Kind::NumberSet => AttributeValue::Ns(self.number_set()),
            Kind::StringSet => AttributeValue::Ss(self.string_set()),
            Kind::BinarySet => AttributeValue::Bs(self.binary_set()),
            Kind::Any => match self.rng.gen_range(0..4) {
                0 => AttributeValue::Bool(self.chance(0.5)),
                1 => AttributeValue::Null(true),
                2 => AttributeValue::B(Blob::new(vec![7u8; self.rng.gen_range(0..3)])),
                _ => AttributeValue::S(format!("s{}", self.rng.gen_range(0..100))),
            },
        }
    }

    /// The kind of an existing value, so that actions on it are often of a type it takes.
    fn kind_of(v: Option<&AttributeValue>) -> Kind {
        match v {
            Some(AttributeValue::N(_)) => Kind::Number,
            Some(AttributeValue::S(_)) => Kind::Str,
            Some(AttributeValue::L(_)) => Kind::List,
            Some(AttributeValue::M(_)) => Kind::Map,
            Some(AttributeValue::Ns(_)) => Kind::NumberSet,
            Some(AttributeValue::Ss(_)) => Kind::StringSet,
            Some(AttributeValue::Bs(_)) => Kind::BinarySet,
            _ => Kind::Any,
        }
    }

    fn item(&mut self) -> Item {
        let mut item = Item::new();
        for _ in 0..self.rng.gen_range(0..7) {
            let name = self.pick(&ATTRS).to_string();
            let v = self.value(Kind::Any, 0);
            item.insert(name, v);
        }
        if self.chance(0.15) {
            item.insert("gs".into(), AttributeValue::S(format!("g{}", self.rng.gen_range(0..9))));
            item.insert("gn".into(), AttributeValue::N(self.rng.gen_range(0..9).to_string()));
        }
        if self.chance(0.1) {
            item.insert("gb".into(), AttributeValue::B(Blob::new(vec![self.rng.gen_range(0..9)])));
        }
        item
    }

    /// An attribute name as the expression writes it: a placeholder for reserved words and often otherwise.
    fn name(&mut self, name: &str) -> String {
        let bare = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if bare && !is_reserved_word(name) && !self.chance(0.3) {
            return name.to_string();
        }
        let ph = format!("#n{}", self.names.len());
        self.names.insert(ph.clone(), name.to_string());
        ph
    }

    fn value_ph(&mut self, v: AttributeValue) -> String {
        let ph = format!(":v{}", self.values.len());
        self.values.insert(ph.clone(), v);
        ph
    }

    fn path_text(&mut self, path: &[Elem]) -> String {
        let mut out = String::new();
        for e in path {
            match e {
                Elem::Name(n) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    let n = self.name(n);
                    out.push_str(&n);
                }
                Elem::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    /// A document path into `item`: most often to something it has, often one level further into a map or a list
    /// (or into a value that is neither), sometimes past a list's end or through an attribute it does not have.
    fn path(&mut self, item: &Item) -> Vec<Elem> {
        // Sorted: a HashMap's order changes from run to run, and a seed must draw the same cases every time.
        let mut existing: Vec<&String> = item.keys().filter(|k| ATTRS.contains(&k.as_str())).collect();
        existing.sort();
        let head = if !existing.is_empty() && self.chance(if self.friendly { 0.95 } else { 0.7 }) {
            existing.choose(self.rng).unwrap().to_string()
        } else {
            self.pick(&ATTRS).to_string()
        };
        let mut path = vec![Elem::Name(head.clone())];
        let mut at = item.get(&head);
        while self.chance(if path.len() == 1 { 0.4 } else { 0.25 }) && path.len() < 4 {
            if self.friendly && !matches!(at, Some(AttributeValue::L(_) | AttributeValue::M(_))) {
                break;
            }
            let e = match at {
                Some(AttributeValue::L(l)) if !self.chance(0.1) => {
                    let choices = [0, l.len().saturating_sub(1), l.len(), l.len() + 2];
                    Elem::Index(*choices.choose(self.rng).unwrap())
                }
                Some(AttributeValue::M(m)) if !self.chance(0.1) => {
                    let mut keys: Vec<&String> = m.keys().collect();
                    keys.sort();
                    if !keys.is_empty() && self.chance(0.7) {
                        Elem::Name(keys.choose(self.rng).unwrap().to_string())
                    } else {
                        Elem::Name(self.pick(&MAP_KEYS).to_string())
                    }
                }
                _ if self.chance(0.5) => Elem::Index(self.rng.gen_range(0..3)),
                _ => Elem::Name(self.pick(&MAP_KEYS).to_string()),
            };
            at = match (&e, at) {
                (Elem::Index(i), Some(AttributeValue::L(l))) => l.get(*i),
                (Elem::Name(n), Some(AttributeValue::M(m))) => m.get(n),
                _ => None,
            };
            path.push(e);
        }
        path
    }

    fn at<'i>(item: &'i Item, path: &[Elem]) -> Option<&'i AttributeValue> {
        let Elem::Name(head) = &path[0] else { return None };
        let mut v = item.get(head);
        for e in &path[1..] {
            v = match (e, v) {
                (Elem::Index(i), Some(AttributeValue::L(l))) => l.get(*i),
                (Elem::Name(n), Some(AttributeValue::M(m))) => m.get(n),
                _ => None,
            };
        }
        v
    }

    /// An operand of a SET action of about the given kind: a value, a path, or a function of them.
    fn operand(&mut self, item: &Item, kind: Kind, depth: usize) -> String {
        let r = self.rng.gen_range(0..100);
        if r < 45 || depth > 2 || (self.friendly && r < 75) {
            let v = if self.chance(0.9) || self.friendly { self.value(kind, 1) } else { self.value(Kind::Any, 1) };
            self.value_ph(v)
        } else if r < 75 {
            let p = self.path(item);
            self.path_text(&p)
        } else if r < 97 {
            let p = self.path(item);
            let p = self.path_text(&p);
            let o = self.operand(item, kind, depth + 1);
            format!("if_not_exists({p}, {o})")
        } else {
            // Nested, which DynamoDB refuses: list_append may only be the whole value of a SET action.
            let a = self.operand(item, Kind::List, depth + 1);
            let b = self.operand(item, Kind::List, depth + 1);
            format!("list_append({a}, {b})")
        }
    }

    /// Records a path an action writes.
    fn claim(&mut self, path: Vec<Elem>) {
        self.targets.push(path);
    }

    /// A path for an action to write: one that overlaps no other action's, but now and then one that does (which
    /// DynamoDB refuses).
    fn target(&mut self, item: &Item) -> Vec<Elem> {
        let mut path = self.path(item);
        for _ in 0..16 {
            if !self.targets.iter().any(|q| overlap(q, &path)) || self.chance(0.02) {
                break;
            }
            path = self.path(item);
        }
        self.claim(path.clone());
        path
    }

    /// One random action on `item`, and the clause it belongs to.
    fn action(&mut self, item: &Item) -> (&'static str, String) {
        let path = self.target(item);
        let kind = Self::kind_of(Self::at(item, &path));
        let target = self.path_text(&path);
        match self.rng.gen_range(0..100) {
            0..=29 => {
                let o = self.operand(item, Kind::Any, 0);
                ("SET", format!("{target} = {o}"))
            }
            30..=44 => {
                let a = if kind == Kind::Number && self.chance(0.6) {
                    target.clone()
                } else {
                    self.operand(item, Kind::Number, 1)
                };
                let b = self.operand(item, Kind::Number, 1);
                let op = if self.chance(0.5) { "+" } else { "-" };
                let (a, b) = if self.chance(0.3) { (b, a) } else { (a, b) };
                ("SET", format!("{target} = {a} {op} {b}"))
            }
            45..=54 => {
                let a = if self.chance(0.6) { target.clone() } else { self.operand(item, Kind::List, 1) };
                let b = self.operand(item, Kind::List, 1);
                let (a, b) = if self.chance(0.3) { (b, a) } else { (a, b) };
                ("SET", format!("{target} = list_append({a}, {b})"))
            }
            55..=69 => ("REMOVE", target),
            70..=84 => {
                let k = match kind {
                    Kind::Number | Kind::NumberSet | Kind::StringSet | Kind::BinarySet if self.chance(0.8) => kind,
                    _ => *[Kind::Number, Kind::NumberSet, Kind::StringSet, Kind::BinarySet, Kind::Str, Kind::List]
                        .choose(self.rng)
                        .unwrap(),
                };
                let v = self.value(k, 1);
                let v = self.value_ph(v);
                ("ADD", format!("{target} {v}"))
            }
            _ => {
                let k = match kind {
                    Kind::NumberSet | Kind::StringSet | Kind::BinarySet if self.chance(0.8) => kind,
                    _ => *[Kind::NumberSet, Kind::StringSet, Kind::BinarySet, Kind::Number].choose(self.rng).unwrap(),
                };
                let v = match (k, Self::at(item, &path)) {
                    // Often the elements the set has, so that a DELETE empties it.
                    (Kind::NumberSet, Some(AttributeValue::Ns(ns))) if self.chance(0.4) => {
                        AttributeValue::Ns(ns.clone())
                    }
                    (Kind::StringSet, Some(AttributeValue::Ss(ss))) if self.chance(0.4) => {
                        AttributeValue::Ss(ss.clone())
                    }
                    _ => self.value(k, 1),
                };
                let v = self.value_ph(v);
                ("DELETE", format!("{target} {v}"))
            }
        }
    }

    /// An expression of the actions, grouped by clause, the clauses in a random order.
    fn expression(&mut self, actions: Vec<(&'static str, String)>) -> String {
        let mut clauses: Vec<(&str, Vec<String>)> = Vec::new();
        for (clause, text) in actions {
            match clauses.iter_mut().find(|(c, _)| *c == clause) {
                Some((_, v)) => v.push(text),
                None => clauses.push((clause, vec![text])),
            }
        }
        clauses.shuffle(self.rng);
        clauses.iter().map(|(c, v)| format!("{c} {}", v.join(", "))).collect::<Vec<_>>().join(" ")
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Elem {
    Name(String),
    Index(usize),
}

/// Whether DynamoDB refuses two paths in one update: one a prefix of the other, or one element used both as a map
/// and as a list.
fn overlap(p: &[Elem], q: &[Elem]) -> bool {
    let common = p.iter().zip(q).take_while(|(a, b)| a == b).count();
    common == p.len() || common == q.len() || matches!(p[common], Elem::Index(_)) != matches!(q[common], Elem::Index(_))
}

fn n(s: &str) -> AttributeValue {
    AttributeValue::N(s.to_string())
}

/// Draws one case of a scenario chosen by weight.
fn case(id: usize, rng: &mut StdRng) -> Case {
    const SCENARIOS: [(&str, u32); 13] = [
        ("random", 40),
        ("near other limits", 8),
        ("numbers", 14),
        ("sets", 8),
        ("lists", 8),
        ("key", 3),
        ("index keys", 6),
        ("near 400 KB", 7),
        ("placeholders", 4),
        ("bad values", 4),
        ("nested keys", 3),
        ("bad key or syntax", 3),
        ("many actions", 4),
    ];
    let scenario = SCENARIOS.choose_weighted(rng, |s| s.1).unwrap().0;
    let create_by_update = rng.gen_bool(0.5);
    let mut key = Item::from([
        ("pk".to_string(), AttributeValue::S(format!("c{id}"))),
        ("sk".to_string(), n(&(id % 7).to_string())),
    ]);
    let mut g = Gen { rng, names: HashMap::new(), values: HashMap::new(), targets: Vec::new(), friendly: false };
    let mut before = if g.chance(0.85) { Some(g.item()) } else { None };
    let item = before.clone().unwrap_or_default();
    let random_actions = |g: &mut Gen, item: &Item, n: usize| (0..n).map(|_| g.action(item)).collect::<Vec<_>>();
    let expr = match scenario {
        "random" => {
            g.friendly = g.chance(0.5);
            let k = g.rng.gen_range(1..5);
            let a = random_actions(&mut g, &item, k);
            g.expression(a)
        }
        "numbers" => {
            let mut item = item;
            let name = g.pick(&["a", "n", "aa"]).to_string();
            g.claim(vec![Elem::Name(name.clone())]);
            g.claim(vec![Elem::Name("b".into())]);
            let t = g.name(&name);
            let action = if g.chance(0.5) {
                // A number and an operand chosen to land just inside or just outside a limit.
                let (start, op, other) = *ARITHMETIC_EDGES.choose(g.rng).unwrap();
                item.insert(name.clone(), n(start));
                let v = g.value_ph(n(other));
                match (op, g.chance(0.5)) {
                    ("+", true) => ("ADD", format!("{t} {v}")),
                    ("+", false) => ("SET", format!("{t} = {v} + {t}")),
                    _ => ("SET", format!("{t} = {t} - {v}")),
                }
            } else {
                let start = if g.chance(0.7) { g.pick(&EDGE_NUMBERS).to_string() } else { g.number() };
                item.insert(name.clone(), n(&start));
                let other = g.pick(&EDGE_NUMBERS).to_string();
                let v = g.value_ph(n(&other));
                match g.rng.gen_range(0..5) {
                    0 => ("SET", format!("{t} = {t} + {v}")),
                    1 => ("SET", format!("{t} = {t} - {v}")),
                    2 => ("ADD", format!("{t} {v}")),
                    3 => {
                        let w = g.pick(&EDGE_NUMBERS).to_string();
                        let w = g.value_ph(n(&w));
                        ("SET", format!("b = {v} - {w}"))
                    }
                    _ => ("SET", format!("b = if_not_exists(zq, {v}) + {t}")),
                }
            };
            let mut actions = vec![action];
            if g.chance(0.3) {
                actions.push(g.action(&item));
            }
            before = Some(item);
            g.expression(actions)
        }
        "sets" => {
            let mut item = item;
            let name = g.pick(&["a", "s", "bb"]).to_string();
            g.claim(vec![Elem::Name(name.clone())]);
            let kind = *[Kind::NumberSet, Kind::StringSet, Kind::BinarySet].choose(g.rng).unwrap();
            let set = g.value(kind, 0);
            item.insert(name.clone(), set);
            let t = g.name(&name);
            // Equal numbers written differently, so that a union that adds nothing is tried.
            let v = match kind {
                Kind::NumberSet if g.chance(0.4) => AttributeValue::Ns(vec!["1".into(), "2.0".into(), "1E+1".into()]),
                _ => {
                    let k = if g.chance(0.85) { kind } else { Kind::NumberSet };
                    g.value(k, 0)
                }
            };
            let v = g.value_ph(v);
            let clause = if g.chance(0.5) { "ADD" } else { "DELETE" };
            let mut actions = vec![(clause, format!("{t} {v}"))];
            if g.chance(0.3) {
                actions.push(g.action(&item));
            }
            before = Some(item);
            g.expression(actions)
        }
        "lists" => {
            let mut item = item;
            let len = g.rng.gen_range(0..5);
            let list = AttributeValue::L((0..len).map(|i| n(&i.to_string())).collect());
            g.claim(vec![Elem::Name("l".into())]);
            item.insert("l".into(), list);
            let mut actions = Vec::new();
            let mut used = Vec::new();
            for _ in 0..g.rng.gen_range(1..4) {
                let i = g.rng.gen_range(0..len + 3);
                if used.contains(&i) {
                    continue;
                }
                used.push(i);
                let l = g.name("l");
                if g.chance(0.5) {
                    actions.push(("REMOVE", format!("{l}[{i}]")));
                } else {
                    let v = g.value(Kind::Any, 1);
                    let v = g.value_ph(v);
                    actions.push(("SET", format!("{l}[{i}] = {v}")));
                }
            }
            before = Some(item);
            g.expression(actions)
        }
        "key" => {
            let k = g.pick(&["pk", "sk"]).to_string();
            g.claim(vec![Elem::Name(k.clone())]);
            let t = g.name(&k);
            let v = if k == "pk" { AttributeValue::S("z".into()) } else { n("1") };
            let v = g.value_ph(v);
            let action = match g.rng.gen_range(0..4) {
                0 => ("SET", format!("{t} = {v}")),
                1 => ("REMOVE", t),
                2 => ("ADD", format!("{t} {v}")),
                _ => ("SET", format!("{t}.x = {v}")),
            };
            let mut actions = vec![action];
            if g.chance(0.5) {
                actions.push(g.action(&item));
            }
            g.expression(actions)
        }
        "index keys" => {
            let k = g.pick(&["gs", "gn", "gb"]).to_string();
            g.claim(vec![Elem::Name(k.clone())]);
            let t = g.name(&k);
            let v = match g.rng.gen_range(0..7) {
                0 => AttributeValue::S(String::new()),
                1 => AttributeValue::B(Blob::new(Vec::<u8>::new())),
                2 => n("3"),
                3 => AttributeValue::S("g".into()),
                4 => AttributeValue::B(Blob::new(vec![1u8])),
                5 => AttributeValue::Ss(vec!["g".into()]),
                _ => AttributeValue::L(vec![]),
            };
            let clause = if g.chance(0.2) { "ADD" } else { "SET" };
            let v = g.value_ph(v);
            let mut actions =
                vec![if clause == "ADD" { ("ADD", format!("{t} {v}")) } else { ("SET", format!("{t} = {v}")) }];
            if g.chance(0.3) {
                actions.push(g.action(&item));
            }
            g.expression(actions)
        }
        "near other limits" => {
            let deep = |levels: usize| {
                (0..levels)
                    .fold(AttributeValue::S("x".into()), |v, _| AttributeValue::M(HashMap::from([("a".into(), v)])))
            };
            let around = |g: &mut Gen, limit: usize| limit + g.rng.gen_range(0..3) - 1;
            match g.rng.gen_range(0..6) {
                0 => {
                    // An index key around its index's limit: 2,048 bytes for a partition key, 1,024 for a sort key.
                    let k = g.pick(&["gs", "gb", "gr"]).to_string();
                    g.claim(vec![Elem::Name(k.clone())]);
                    let t = g.name(&k);
                    let v = match k.as_str() {
                        "gs" => AttributeValue::S("g".repeat(around(&mut g, 2048))),
                        "gb" => AttributeValue::B(Blob::new(vec![7u8; around(&mut g, 2048)])),
                        _ => AttributeValue::S("r".repeat(around(&mut g, 1024))),
                    };
                    let v = g.value_ph(v);
                    let set =
                        if g.chance(0.3) { format!("{t} = if_not_exists({t}, {v})") } else { format!("{t} = {v}") };
                    g.expression(vec![("SET", set)])
                }
                1 => {
                    // A value nesting around 31 lists and maps.
                    let levels = around(&mut g, 31);
                    let v = g.value_ph(deep(levels));
                    g.expression(vec![("SET", format!("d = {v}"))])
                }
                2 => {
                    // The same through list_append.
                    let levels = around(&mut g, 30);
                    let (a, b) =
                        (g.value_ph(AttributeValue::L(vec![])), g.value_ph(AttributeValue::L(vec![deep(levels)])));
                    g.expression(vec![("SET", format!("l = list_append({a}, {b})"))])
                }
                3 => {
                    // A value written 20 levels down into a deep item.
                    let mut item = item;
                    item.insert("d".into(), deep(25));
                    before = Some(item);
                    let levels = around(&mut g, 11);
                    let v = g.value_ph(deep(levels));
                    g.expression(vec![("SET", format!("d{} = {v}", ".a".repeat(20)))])
                }
                4 => {
                    // A name over 65,535 bytes, or a long one under it (DynamoDB Local fails on reading an item with
                    // a name over 50,000 bytes, so the accepted edge itself is tried in tests/refusals.rs only).
                    let name = "n".repeat(*[50_000, 65_536, 65_537].choose(g.rng).unwrap());
                    g.names.insert("#long".into(), name);
                    let v = g.value_ph(AttributeValue::S("x".into()));
                    g.expression(vec![("SET", format!("#long = {v}"))])
                }
                _ => {
                    // A placeholder around 255 bytes, with its # or :.
                    let len = around(&mut g, 255);
                    if g.chance(0.5) {
                        let ph = format!("#{}", "p".repeat(len - 1));
                        g.names.insert(ph.clone(), "a".into());
                        let v = g.value_ph(AttributeValue::S("x".into()));
                        g.expression(vec![("SET", format!("{ph} = {v}"))])
                    } else {
                        let ph = format!(":{}", "p".repeat(len - 1));
                        g.values.insert(ph.clone(), AttributeValue::S("x".into()));
                        g.expression(vec![("SET", format!("a = {ph}"))])
                    }
                }
            }
        }
        "near 400 KB" => {
            let mut item = item;
            item.insert("a".into(), n(g.pick(&["1", "99", "-5", "1.5", "0"])));
            let margin = g.rng.gen_range(0..24);
            let mut full = item.clone();
            full.extend(key.clone());
            let rest = item_size(&full) + "big".len();
            if g.chance(0.15) {
                // A value too large by itself: refused before the item is read.
                let v = g.value_ph(AttributeValue::S("y".repeat(MAX_ITEM_BYTES + margin - 8)));
                before = Some(item);
                g.expression(vec![("SET", format!("huge = {v}"))])
            } else {
                item.insert("big".into(), AttributeValue::S("x".repeat(MAX_ITEM_BYTES - rest - margin)));
                let mut actions = Vec::new();
                match g.rng.gen_range(0..5) {
                    0 => {
                        let len = g.rng.gen_range(0..24);
                        let v = g.value_ph(AttributeValue::S("q".repeat(len)));
                        actions.push(("SET", format!("b = {v}")));
                    }
                    1 => {
                        let v = g.pick(&["1", "100", "99", "-1", "0.5", "12345678901234567890"]).to_string();
                        let v = g.value_ph(n(&v));
                        actions.push(("ADD", format!("a {v}")));
                    }
                    2 => {
                        let v = g.value_ph(AttributeValue::Ss(vec!["abcdefgh".into(), "ij".into()]));
                        actions.push(("ADD", format!("c {v}")));
                    }
                    3 => actions.push(("SET", "d = a".into())),
                    _ => {
                        let v = g.value_ph(AttributeValue::L(vec![n("1"), AttributeValue::S("xy".into())]));
                        actions.push(("SET", format!("e = {v}")));
                    }
                }
                if !actions.iter().any(|(_, a)| a.starts_with("a ")) && g.chance(0.3) {
                    actions.push(("REMOVE", "a".into()));
                }
                before = Some(item);
                g.expression(actions)
            }
        }
        "placeholders" => {
            let k = g.rng.gen_range(1..3);
            let mut a = random_actions(&mut g, &item, k);
            match g.rng.gen_range(0..4) {
                0 => {
                    g.values.insert(":unused".into(), n("1"));
                }
                1 => {
                    g.names.insert("#unused".into(), "a".into());
                }
                2 => a.push(("SET", "zq = :undefined".into())),
                _ => {
                    let v = g.value_ph(n("1"));
                    a.push(("SET", format!("#undefined = {v}")));
                }
            }
            g.expression(a)
        }
        "bad values" => {
            let v = match g.rng.gen_range(0..6) {
                0 | 1 => n(g.pick(&BAD_NUMBERS)),
                2 => AttributeValue::Ns(vec!["1".into(), "1.0".into()]),
                3 => AttributeValue::Ss(vec![]),
                4 => AttributeValue::L(vec![AttributeValue::Ns(vec![g.pick(&BAD_NUMBERS).to_string()])]),
                _ => AttributeValue::Bs(vec![Blob::new(vec![1u8]), Blob::new(vec![1u8])]),
            };
            let v = g.value_ph(v);
            let t = g.pick(&ATTRS).to_string();
            g.claim(vec![Elem::Name(t.clone())]);
            let mut actions = vec![("SET", format!("{t} = {v}"))];
            if g.chance(0.5) {
                actions.push(g.action(&item));
            }
            g.expression(actions)
        }
        "many actions" => {
            // More attributes than a Java HashMap holds at its first capacity, some of them non-ASCII, and a few
            // actions that fail: the error reported is the first in DynamoDB Local's walk.
            let mut item = item;
            item.insert("s".into(), AttributeValue::S("text".into()));
            g.claim(vec![Elem::Name("s".into())]);
            let mut actions = Vec::new();
            for i in 0..g.rng.gen_range(10..40) {
                let name = if i % 5 == 3 { format!("é{i}") } else { format!("f{i}") };
                let t = g.name(&name);
                let v = n(&i.to_string());
                actions.push(match g.rng.gen_range(0..12) {
                    0 => ("SET", format!("{t} = absent{i}")),
                    1 => ("SET", format!("{t}.x = {}", g.value_ph(v))),
                    2 => {
                        let s = g.name("s");
                        ("SET", format!("{t} = {s} + {}", g.value_ph(v)))
                    }
                    3 => ("REMOVE", format!("{t}[1].y")),
                    _ => ("SET", format!("{t} = {}", g.value_ph(v))),
                });
            }
            before = Some(item);
            g.expression(actions)
        }
        "nested keys" => {
            let k = g.pick(&["pk", "sk", "gs", "gn"]).to_string();
            let t = g.name(&k);
            let v = g.value_ph(n("1"));
            if g.chance(0.5) {
                g.expression(vec![("SET", format!("a = {t}.x"))])
            } else {
                g.expression(vec![("SET", format!("{t}.x = {v}"))])
            }
        }
        _ => {
            if g.chance(0.5) {
                match g.rng.gen_range(0..3) {
                    0 => {
                        key.remove("sk");
                    }
                    1 => {
                        key.insert("sk".into(), AttributeValue::S("1".into()));
                    }
                    _ => {
                        key.insert("pk".into(), AttributeValue::S(String::new()));
                    }
                }
                before = None;
                let a = random_actions(&mut g, &item, 1);
                g.expression(a)
            } else {
                let a = random_actions(&mut g, &item, 1);
                let e = g.expression(a);
                let broken = [format!("{e},"), format!("{e} SET"), e.replacen(' ', " = ", 1), format!("{e} {e}")];
                broken.choose(g.rng).unwrap().clone()
            }
        }
    };
    Case { id, scenario, key, before, create_by_update, expr, names: g.names, values: g.values }
}

/// The reason a DynamoDB `ValidationException` names, by its message.
fn classify(message: &str) -> EvalErrorKind {
    use EvalErrorKind::*;
    let rules: [(&str, EvalErrorKind); 25] = [
        ("secondary index key", IndexKeyEmpty),
        ("Size limit exceeded", IndexKeySize),
        ("Nesting Levels have exceeded supported limits", NestingTooDeep),
        ("ExpressionAttributeNames contains invalid", InvalidAttributeName),
        ("ExpressionAttributeValues contains invalid key", InvalidAttributeName),
        ("The provided key element does not match the schema", InvalidKey),
        ("The number of conditions on the keys is invalid", InvalidKey),
        ("Type mismatch for key", InvalidKey),
        ("The AttributeValue for a key attribute cannot contain", InvalidKey),
        ("ExpressionAttributeValues contains invalid value", InvalidValue),
        ("Incorrect operand type for operator or function", IncorrectOperandType),
        ("unused in expressions", UnusedPlaceholder),
        ("Invalid UpdateExpression", InvalidExpression),
        ("Item size to update has exceeded", ItemTooLarge),
        ("Item size has exceeded", ItemTooLarge),
        ("Cannot update attribute", KeyAttributeUpdate),
        ("Key attributes must be scalars", NestedKeyAccess),
        ("document path provided in the update expression is invalid", InvalidDocumentPath),
        ("refers to an attribute that does not exist", MissingAttribute),
        ("An operand in the update expression has an incorrect data type", OperandType),
        ("Number overflow", NumberOverflow),
        ("Number underflow", NumberUnderflow),
        ("precision up to 38", NumberPrecision),
        ("Type mismatch for Index Key", IndexKeyType),
        ("Invalid attribute value type", IndexKeyType),
    ];
    rules
        .iter()
        .find(|(m, _)| message.contains(m))
        .map(|(_, k)| *k)
        .unwrap_or_else(|| panic!("unclassified DynamoDB error: {message}"))
}

/// An item in a form that compares equal whatever order DynamoDB gives set elements in.
fn normal(item: &Item) -> serde_json::Value {
    fn sort(v: &mut serde_json::Value) {
        if let serde_json::Value::Object(m) = v {
            for (k, x) in m.iter_mut() {
                if let ("SS" | "NS" | "BS", serde_json::Value::Array(a)) = (k.as_str(), &mut *x) {
                    a.sort_by_key(|e| e.to_string());
                } else {
                    sort(x);
                }
            }
        } else if let serde_json::Value::Array(a) = v {
            a.iter_mut().for_each(sort);
        }
    }
    let mut v = item_to_json(item);
    sort(&mut v);
    v
}

/// What happened to one case.
struct Outcome {
    case: Case,
    /// The item before, as DynamoDB stored it.
    stored: Option<Item>,
    dynamodb: Result<Item, String>,
    evaluator: Result<Item, dynamo_saga::eval::EvalError>,
}

async fn run_case(client: Arc<Client>, table: Arc<String>, keys: Arc<KeyTypes>, c: Case) -> Outcome {
    let mut stored = None;
    if let Some(before) = &c.before {
        if c.create_by_update && !before.is_empty() {
            let mut names = HashMap::new();
            let mut values = HashMap::new();
            let mut sets = Vec::new();
            let mut attrs: Vec<(&String, &AttributeValue)> = before.iter().collect();
            attrs.sort_by_key(|(k, _)| k.as_str());
            for (i, (k, v)) in attrs.into_iter().enumerate() {
                names.insert(format!("#a{i}"), k.clone());
                values.insert(format!(":a{i}"), v.clone());
                sets.push(format!("#a{i} = :a{i}"));
            }
            client
                .update_item()
                .table_name(table.as_str())
                .set_key(Some(c.key.clone()))
                .update_expression(format!("SET {}", sets.join(", ")))
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
                .send()
                .await
                .unwrap_or_else(|e| panic!("case {}: writing the item: {:?}", c.id, e.into_service_error()));
        } else {
            let mut item = before.clone();
            item.extend(c.key.clone());
            client
                .put_item()
                .table_name(table.as_str())
                .set_item(Some(item))
                .send()
                .await
                .unwrap_or_else(|e| panic!("case {}: writing the item: {:?}", c.id, e.into_service_error()));
        }
        let got = client
            .get_item()
            .table_name(table.as_str())
            .set_key(Some(c.key.clone()))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        stored = got.item;
    }
    let mut req = client
        .update_item()
        .table_name(table.as_str())
        .set_key(Some(c.key.clone()))
        .update_expression(c.expr.clone())
        .return_values(ReturnValue::AllNew);
    if !c.names.is_empty() {
        req = req.set_expression_attribute_names(Some(c.names.clone()));
    }
    if !c.values.is_empty() {
        req = req.set_expression_attribute_values(Some(c.values.clone()));
    }
    let dynamodb = match req.send().await {
        Ok(out) => {
            let returned = out.attributes.unwrap_or_default();
            let got = client
                .get_item()
                .table_name(table.as_str())
                .set_key(Some(c.key.clone()))
                .consistent_read(true)
                .send()
                .await
                .unwrap();
            let after = got.item.unwrap_or_default();
            assert_eq!(normal(&returned), normal(&after), "case {}: ALL_NEW is not the item stored", c.id);
            Ok(after)
        }
        Err(e) => {
            let e = e.into_service_error();
            Err(e.meta().message().map(str::to_owned).unwrap_or_else(|| format!("{e:?}")))
        }
    };
    let evaluator = apply_update(stored.as_ref(), &c.key, &c.expr, &c.names, &c.values, &keys);
    Outcome { case: c, stored, dynamodb, evaluator }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn evaluator_agrees_with_dynamodb_local() {
    let seed: u64 = std::env::var("EVAL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20_240_611);
    let cases: usize = std::env::var("EVAL_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(4000);
    let client = Arc::new(harness::client().await);
    let table = Arc::new(format!("t-eval-{}", std::process::id()));
    create_table(&client, &table).await;
    // The key types the evaluator checks against are those the library reads from DescribeTable, as the protocol
    // will use it: the same attributes and types as the table was created with (DynamoDB Local lists its indexes in
    // an order of its own).
    let store = dynamo_saga::Store::new((*client).clone(), dynamo_saga::Config::new("unused"));
    let described = store.schema(&dynamo_saga::store::Meter::default(), &table).await.unwrap().key_types();
    let sorted = |k: &KeyTypes| {
        let mut i = k.index_keys.clone();
        i.sort();
        (k.key.clone(), i)
    };
    assert_eq!(sorted(&described), sorted(&key_types()), "the table's description gives every key and index key type");
    let keys = Arc::new(described);
    let mut rng = StdRng::seed_from_u64(seed);
    let all: Vec<Case> = (0..cases).map(|i| case(i, &mut rng)).collect();
    let started = Instant::now();
    let outcomes: Vec<Outcome> = futures::stream::iter(all)
        .map(|c| run_case(client.clone(), table.clone(), keys.clone(), c))
        .buffer_unordered(16)
        .collect()
        .await;
    let elapsed = started.elapsed();

    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_scenario: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for o in &outcomes {
        *by_scenario.entry(o.case.scenario).or_default() += 1;
        let verdict = match (&o.dynamodb, &o.evaluator) {
            (Ok(d), Ok(e)) if normal(d) == normal(e) => Ok("accepted".to_string()),
            (Err(m), Err(e)) if classify(m) == e.kind => Ok(format!("{:?}", e.kind)),
            _ => Err(()),
        };
        match verdict {
            Ok(k) => *counts.entry(k).or_default() += 1,
            Err(()) => failures.push(o),
        }
    }
    for o in failures.iter().take(12) {
        let c = &o.case;
        eprintln!(
            "MISMATCH case {} ({}): {}\n  names {:?}\n  values {:?}\n  before {}\n  DynamoDB: {}\n  evaluator: {}\n",
            c.id,
            c.scenario,
            c.expr,
            c.names,
            c.values
                .iter()
                .map(|(k, v)| (k, item_to_json(&Item::from([("v".to_string(), v.clone())]))["v"].to_string()))
                .collect::<BTreeMap<_, _>>(),
            o.stored.as_ref().map(|i| summary(&normal(i))).unwrap_or_else(|| "(absent)".into()),
            match &o.dynamodb {
                Ok(i) => summary(&normal(i)),
                Err(m) => format!("refused ({:?}): {m}", classify(m)),
            },
            match &o.evaluator {
                Ok(i) => summary(&normal(i)),
                Err(e) => format!("refused ({:?}): {}", e.kind, e.message),
            },
        );
    }
    let accepted = counts.get("accepted").copied().unwrap_or(0);
    harness::report(format!(
        "update evaluator vs DynamoDB Local: {} random updates (seed {seed}) in {:.1} s, {} disagreements; {accepted} \
         accepted, {} refused",
        outcomes.len(),
        elapsed.as_secs_f64(),
        failures.len(),
        outcomes.len() - accepted - failures.len(),
    ));
    let refused: BTreeMap<&String, &usize> = counts.iter().filter(|(k, _)| *k != "accepted").collect();
    harness::report(format!("update evaluator vs DynamoDB Local, refusals by kind: {refused:?}"));
    println!("cases by scenario: {by_scenario:?}");
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree with DynamoDB Local (first ones above)",
        failures.len(),
        outcomes.len()
    );
    assert!(accepted >= cases / 4, "too few accepted updates: {counts:?}");
    for kind in EvalErrorKind::ALL {
        let n = counts.get(&format!("{kind:?}")).copied().unwrap_or(0);
        assert!(n >= 3, "only {n} cases refused as {kind:?}: the generator no longer reaches that rule ({counts:?})");
    }
}

/// A short form of an item for mismatch reports: big strings abbreviated.
fn summary(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if s.len() > 600 {
        format!("{}... ({} chars)", &s[..600], s.len())
    } else {
        s
    }
}

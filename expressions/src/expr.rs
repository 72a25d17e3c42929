//! Parsing and validation of DynamoDB expressions: condition, update and projection expressions.
//!
//! DynamoDB rejects a malformed expression only when the request reaches it, and by then other items of the same
//! saga may already be written. Parsing here, with the grammar and the extra rules DynamoDB documents (reserved words,
//! placeholder shape, overlapping update paths, the 4096-byte limit), lets a request be refused before anything is
//! written, and reports what the expression refers to so that its ExpressionAttributeNames and
//! ExpressionAttributeValues can be checked against it.
//!
//! Every error message is complete by itself (it names the offending text and, where there is one, the byte offset),
//! because it is shown as is to whoever wrote the expression.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

/// DynamoDB's limit on the length of any one expression string.
pub const MAX_EXPR_BYTES: usize = 4096;
/// Most elements of a document path (`a.b[0]` has three).
pub const MAX_PATH_ELEMENTS: usize = 32;
/// Most operators in an update expression, as DynamoDB counts them there: each `+` and `-`.
pub const MAX_OPERATORS: usize = 300;
/// DynamoDB's limit on the number of operands of `IN`.
const MAX_IN_OPERANDS: usize = 100;
/// Bounds the parser's recursion so that a hostile expression cannot overflow the stack.
const MAX_DEPTH: usize = 100;
const KEYWORDS: [&str; 9] = ["AND", "OR", "NOT", "BETWEEN", "IN", "SET", "REMOVE", "ADD", "DELETE"];
const COMPARATORS: [&str; 6] = ["=", "<>", "<", "<=", ">", ">="];
const CONDITION_FUNCTIONS: [&str; 5] =
    ["attribute_exists", "attribute_not_exists", "attribute_type", "begins_with", "contains"];
const UPDATE_FUNCTIONS: [&str; 2] = ["if_not_exists", "list_append"];
/// Longest first, so that `<>` and `<=` are not read as `<`.
const SYMBOLS: [&str; 14] = ["<>", "<=", ">=", "(", ")", "[", "]", ",", ".", "=", "<", ">", "+", "-"];

/// One element of a document path, as written in the expression.
///
/// Kept as written (placeholders unresolved) because the expression is validated before, and independently of, the
/// request's ExpressionAttributeNames; the caller resolves placeholders when it needs real attribute names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElem {
    /// A bare attribute name.
    Name(String),
    /// An attribute name placeholder, `#x`, including the `#`.
    Placeholder(String),
    /// A list index, `[n]`.
    Index(u32),
}

/// A document path (`a.#b[2].c`), so that callers can see which attributes an expression reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path(pub Vec<PathElem>);

/// Written as in an expression, so that error messages show the path the user wrote.
impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            match e {
                PathElem::Name(s) | PathElem::Placeholder(s) => write!(f, "{}{s}", if i > 0 { "." } else { "" })?,
                PathElem::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// The four clauses of an update expression; each may appear at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[rustfmt::skip]
pub enum ClauseKind { Set, Remove, Add, Delete }

impl ClauseKind {
    fn keyword(self) -> &'static str {
        match self {
            ClauseKind::Set => "SET",
            ClauseKind::Remove => "REMOVE",
            ClauseKind::Add => "ADD",
            ClauseKind::Delete => "DELETE",
        }
    }
    fn from_word(w: &str) -> Option<Self> {
        [ClauseKind::Set, ClauseKind::Remove, ClauseKind::Add, ClauseKind::Delete]
            .into_iter()
            .find(|k| k.keyword().eq_ignore_ascii_case(w))
    }
}

/// What an expression refers to: enough to check placeholders and attribute names against the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExprRefs {
    /// Attribute name placeholders as written, with the `#`: each must be defined in ExpressionAttributeNames.
    pub name_placeholders: BTreeSet<String>,
    /// Value placeholders as written, with the `:`: each must be defined in ExpressionAttributeValues.
    pub value_placeholders: BTreeSet<String>,
    /// Every document path used, in order of appearance, so that attributes the library owns can be kept out of them.
    pub paths: Vec<Path>,
}

/// A validated update expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateExpr {
    pub refs: ExprRefs,
    /// Each clause's keyword and the text of its actions (without the keyword), trimmed, in the order written.
    pub clauses: Vec<(ClauseKind, String)>,
    /// Paths written by SET / REMOVE / ADD / DELETE actions (targets only), in order.
    pub targets: Vec<(ClauseKind, Path)>,
    /// Every action in full, in the order written, so that the update can be evaluated ([`crate::eval`]).
    pub actions: Vec<Action>,
}

/// An operand of the value a SET action assigns, with placeholders as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// The value at a document path of the item before the update.
    Path(Path),
    /// A value placeholder, `:v`, including the `:`.
    Value(String),
    /// `if_not_exists(path, operand)`: the value at the path if there is one, else the operand.
    IfNotExists(Path, Box<Operand>),
    /// `list_append(operand, operand)`: the elements of the first list, then those of the second.
    ListAppend(Box<Operand>, Box<Operand>),
}

/// The value a SET action assigns: one operand, or the sum or difference of two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetValue {
    Operand(Operand),
    Plus(Operand, Operand),
    Minus(Operand, Operand),
}

/// One action of an update expression; the value placeholders of ADD and DELETE include the `:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Set(Path, SetValue),
    Remove(Path),
    Add(Path, String),
    Delete(Path, String),
}

impl Action {
    /// The document path the action writes.
    pub fn target(&self) -> &Path {
        match self {
            Action::Set(p, _) | Action::Remove(p) | Action::Add(p, _) | Action::Delete(p, _) => p,
        }
    }
}

/// Why an expression was rejected.
///
/// `message` is complete and meant for the end user; `position` repeats the byte offset, when there is one, for
/// tools that want to point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    pub message: String,
    pub position: Option<usize>,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExprError {}

fn err(message: String, position: Option<usize>) -> ExprError {
    ExprError { message, position }
}

/// Parses a ConditionExpression (a FilterExpression has the same grammar).
pub fn parse_condition(expr: &str) -> Result<Arc<ExprRefs>, ExprError> {
    static SEEN: Memo<ExprRefs> = Memo::new();
    SEEN.get(expr, |expr| {
        let mut p = Parser::new(expr)?;
        p.or()?;
        p.finish()?;
        Ok(p.refs)
    })
}

/// Parses an UpdateExpression, including the checks DynamoDB makes beyond syntax (one clause of each kind, no two
/// actions on overlapping paths).
pub fn parse_update(expr: &str) -> Result<Arc<UpdateExpr>, ExprError> {
    static SEEN: Memo<UpdateExpr> = Memo::new();
    SEEN.get(expr, |expr| {
        let parsed = parse_update_spans(expr)?.0;
        let operators = parsed
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Set(_, SetValue::Plus(..) | SetValue::Minus(..))))
            .count();
        if operators > MAX_OPERATORS {
            return Err(err(format!("The expression contains too many operators; operator count: {operators}"), None));
        }
        Ok(parsed)
    })
}

/// Expressions parsed before, by their text, with what parsing them came to. A transaction's actions mostly share a
/// handful of expressions, and each action's is parsed when the request is checked, when its item is locked and when
/// it is applied: parsing each text once takes that work out of every item a phase writes. Past [`MEMO_ENTRIES`]
/// texts it forgets them all and starts again.
struct Memo<T> {
    seen: OnceLock<Mutex<Parsed<T>>>,
}

/// What parsing each text came to.
type Parsed<T> = HashMap<String, Result<Arc<T>, ExprError>>;

/// Most expression texts a [`Memo`] keeps.
const MEMO_ENTRIES: usize = 1024;

impl<T> Memo<T> {
    const fn new() -> Self {
        Memo { seen: OnceLock::new() }
    }

    fn get(&self, key: &str, parse: impl FnOnce(&str) -> Result<T, ExprError>) -> Result<Arc<T>, ExprError> {
        let seen = self.seen.get_or_init(Default::default);
        // A poisoned lock held only a map of finished parses: it is as good as it was.
        if let Some(known) = seen.lock().unwrap_or_else(|p| p.into_inner()).get(key) {
            return known.clone();
        }
        let parsed = parse(key).map(Arc::new);
        let mut map = seen.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MEMO_ENTRIES {
            map.clear();
        }
        map.insert(key.to_string(), parsed.clone());
        parsed
    }
}

/// Parses a ProjectionExpression: comma-separated paths.
///
/// Like DynamoDB, refuses two overlapping paths (`a, a.b`), which it would reject.
pub fn parse_projection(expr: &str) -> Result<ExprRefs, ExprError> {
    let mut p = Parser::new(expr)?;
    let mut seen: Vec<Path> = Vec::new();
    loop {
        let (path, at) = p.path()?;
        check_overlap(&seen, &path, at)?;
        seen.push(path);
        if !p.eat(",") {
            break;
        }
    }
    p.finish()?;
    Ok(p.refs)
}

/// Returns an update expression equal to `expr` with `extra` (the text of one or more comma-separated actions) added
/// to its `kind` clause, creating the clause when absent. `expr` may be empty (then the result is just the new
/// clause). Used to add the library's own bookkeeping attributes to a caller's update in a single call.
///
/// The caller's text is kept byte for byte (the actions are inserted at the end of the clause), and the result is
/// parsed again, so an `extra` that touches a path the caller also writes is refused here rather than by DynamoDB.
pub fn add_actions(expr: &str, kind: ClauseKind, extra: &str) -> Result<String, ExprError> {
    static SEEN: Memo<String> = Memo::new();
    let key = format!("{}\u{0}{}\u{0}{expr}", kind.keyword(), extra.trim());
    SEEN.get(&key, |_| {
        let extra = extra.trim();
        let kw = kind.keyword();
        let clause = format!("{kw} {extra}");
        let own = parse_update(&clause).map_err(|e| err(format!("in the actions to add: {}", e.message), None))?;
        if own.clauses.len() != 1 {
            return Err(err(format!("the actions to add must all belong to the {kw} clause: '{extra}'"), None));
        }
        let out = if expr.trim().is_empty() {
            clause
        } else {
            let (parsed, ends) = parse_update_spans(expr)?;
            match parsed.clauses.iter().position(|(k, _)| *k == kind) {
                Some(i) => format!("{}, {extra}{}", &expr[..ends[i]], &expr[ends[i]..]),
                None => format!("{} {clause}", expr.trim_end()),
            }
        };
        parse_update(&out)?;
        Ok(out)
    })
    .map(|out| out.as_ref().clone())
}

/// `a AND b` for two condition expressions, each in one pair of parentheses: DynamoDB rejects a condition in two
/// ("redundant parentheses"), so a side the caller already wrote in parentheses is not wrapped again.
pub fn and(a: &str, b: &str) -> String {
    format!("{} AND {}", enclosed(a), enclosed(b))
}

fn enclosed(c: &str) -> String {
    let mut c = c.trim();
    while wrapped_whole(c) {
        c = c[1..c.len() - 1].trim();
    }
    format!("({c})")
}

/// Whether `c` is `( ... )` with the first parenthesis closed by the last.
fn wrapped_whole(c: &str) -> bool {
    if !c.starts_with('(') || !c.ends_with(')') {
        return false;
    }
    let mut depth = 0;
    for (i, ch) in c.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i == c.len() - 1;
                }
            }
            _ => {}
        }
    }
    false
}

/// The condition `expr` with every attribute it reads, except the names in `keep`, replaced by the name placeholder
/// `to`: evaluated on a stored item whose attributes `to` never names, it gives what it would give on an absent
/// item. `keep` and `to` are placeholders (`#x`); nested elements (`a.b`, `a[0]`) follow their top-level name.
pub fn redirect_paths(expr: &str, keep: &[&str], to: &str) -> Result<String, ExprError> {
    parse_condition(expr)?;
    let toks = lex(expr)?;
    let mut out = String::with_capacity(expr.len());
    let mut copied = 0;
    for (i, t) in toks.iter().enumerate() {
        let nested = i > 0 && matches!(toks[i - 1].tok, Tok::Sym("."));
        let head = match &t.tok {
            Tok::NamePh(p) => !nested && !keep.contains(&p.as_str()),
            Tok::Word(w) => {
                let call = matches!(toks.get(i + 1).map(|n| &n.tok), Some(Tok::Sym("(")));
                !nested && !call && !KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(w))
            }
            _ => false,
        };
        if head {
            out.push_str(&expr[copied..t.start]);
            out.push_str(to);
            copied = t.end;
        }
    }
    out.push_str(&expr[copied..]);
    Ok(out)
}

/// Whether `word` is one of DynamoDB's reserved words (case-insensitive), which cannot be written as a bare name.
pub fn is_reserved_word(word: &str) -> bool {
    RESERVED_WORDS.binary_search_by(|w| w.bytes().cmp(word.bytes().map(|b| b.to_ascii_uppercase()))).is_ok()
}

/// Returns the parsed expression and, for each clause, the byte offset just past its last action, which is where
/// [`add_actions`] inserts.
fn parse_update_spans(expr: &str) -> Result<(UpdateExpr, Vec<usize>), ExprError> {
    let mut p = Parser::new(expr)?;
    let mut clauses: Vec<(ClauseKind, String)> = Vec::new();
    let mut ends = Vec::new();
    let mut targets: Vec<(ClauseKind, Path)> = Vec::new();
    let mut actions = Vec::new();
    while p.peek().tok != Tok::Eof {
        let t = p.peek().clone();
        let kind = if let Tok::Word(w) = &t.tok { ClauseKind::from_word(w) } else { None };
        let Some(kind) = kind else {
            let what = if clauses.is_empty() { "SET, REMOVE, ADD or DELETE" } else { "',' or a new clause" };
            return Err(p.expected(what));
        };
        if clauses.iter().any(|(k, _)| *k == kind) {
            let msg = format!("update expression has two {} clauses (second at offset {})", kind.keyword(), t.start);
            return Err(err(msg, Some(t.start)));
        }
        p.bump();
        loop {
            let (path, at) = p.path()?;
            let action = match kind {
                ClauseKind::Set => {
                    p.expect("=")?;
                    let left = p.update_operand()?;
                    let value = if p.eat("+") {
                        SetValue::Plus(left, p.update_operand()?)
                    } else if p.eat("-") {
                        SetValue::Minus(left, p.update_operand()?)
                    } else {
                        SetValue::Operand(left)
                    };
                    Action::Set(path.clone(), value)
                }
                ClauseKind::Remove => Action::Remove(path.clone()),
                ClauseKind::Add => Action::Add(path.clone(), p.value_placeholder()?),
                ClauseKind::Delete => Action::Delete(path.clone(), p.value_placeholder()?),
            };
            check_overlap(targets.iter().map(|(_, q)| q), &path, at)?;
            targets.push((kind, path));
            actions.push(action);
            if !p.eat(",") {
                break;
            }
        }
        let end = p.toks[p.pos - 1].end;
        clauses.push((kind, expr[t.end..end].trim().to_string()));
        ends.push(end);
    }
    Ok((UpdateExpr { refs: p.refs, clauses, targets, actions }, ends))
}

/// DynamoDB refuses two paths of which one is a prefix of the other, since the result would depend on the order the
/// actions are applied in, and two that use the same attribute both as a map and as a list (`a.b`, `a[0]`).
fn check_overlap<'p>(seen: impl IntoIterator<Item = &'p Path>, path: &Path, at: usize) -> Result<(), ExprError> {
    for q in seen {
        let common = q.0.iter().zip(&path.0).take_while(|(x, y)| x == y).count();
        let what = match (q.0.get(common), path.0.get(common)) {
            (None, _) | (_, None) => "overlap",
            (Some(x), Some(y)) if matches!(x, PathElem::Index(_)) != matches!(y, PathElem::Index(_)) => "conflict",
            _ => continue,
        };
        return Err(err(format!("two document paths {what}: {q} and {path} (at offset {at})"), Some(at)));
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[rustfmt::skip]
enum Tok { Word(String), NamePh(String), ValuePh(String), Num(String), Sym(&'static str), Eof }

/// A token and its byte range in the expression, which error messages and [`UpdateExpr::clauses`] quote.
#[derive(Debug, Clone)]
#[rustfmt::skip]
struct Token { tok: Tok, start: usize, end: usize }

fn is_delimiter(c: char) -> bool {
    c.is_whitespace() || "()[],.=<>+-".contains(c)
}

fn is_name_chars(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Splits the expression into tokens. A run of characters up to the next delimiter is one token, so that a bad name
/// or placeholder is reported whole (`':v$x'`) rather than as a confusing stray character.
fn lex(src: &str) -> Result<Vec<Token>, ExprError> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(c) = src[i..].chars().next() {
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        if let Some(s) = SYMBOLS.iter().find(|s| src[i..].starts_with(**s)) {
            out.push(Token { tok: Tok::Sym(s), start: i, end: i + s.len() });
            i += s.len();
            continue;
        }
        let end = src[i..].find(is_delimiter).map_or(src.len(), |n| i + n);
        let text = &src[i..end];
        let bad_name = || {
            let msg = format!(
                "'{text}' at offset {i} is not a valid attribute name: a bare name must start with a letter or \
                 underscore and contain only letters, digits and underscores; use an ExpressionAttributeNames \
                 placeholder such as #name"
            );
            err(msg, Some(i))
        };
        let tok = match c {
            '#' | ':' if !is_name_chars(&text[1..]) => {
                let msg = format!(
                    "placeholder '{text}' at offset {i} is malformed: a placeholder is '{c}' followed by one or more \
                     letters, digits or underscores"
                );
                return Err(err(msg, Some(i)));
            }
            '#' => Tok::NamePh(text.to_string()),
            ':' => Tok::ValuePh(text.to_string()),
            '0'..='9' if text.bytes().all(|b| b.is_ascii_digit()) => Tok::Num(text.to_string()),
            '0'..='9' => return Err(bad_name()),
            _ if is_name_chars(text) => Tok::Word(text.to_string()),
            _ if text.chars().count() == 1 => {
                return Err(err(format!("unexpected character '{c}' at offset {i}"), Some(i)));
            }
            _ => return Err(bad_name()),
        };
        out.push(Token { tok, start: i, end });
        i = end;
    }
    out.push(Token { tok: Tok::Eof, start: src.len(), end: src.len() });
    Ok(out)
}

/// Where a function call was found, which decides whether it is allowed and what to tell the user if not.
#[derive(Clone, Copy, PartialEq, Eq)]
#[rustfmt::skip]
enum Ctx { Condition, Operand, Update }

struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
    refs: ExprRefs,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Result<Self, ExprError> {
        if src.len() > MAX_EXPR_BYTES {
            let msg = format!("expression is {} bytes long; DynamoDB allows at most {MAX_EXPR_BYTES}", src.len());
            return Err(err(msg, None));
        }
        if src.trim().is_empty() {
            return Err(err("expression is empty".into(), None));
        }
        Ok(Parser { src, toks: lex(src)?, pos: 0, refs: ExprRefs::default(), depth: 0 })
    }

    fn peek(&self) -> &Token {
        &self.toks[self.pos]
    }

    /// Moves to the next token; never past the end-of-expression token, which stays for error messages.
    fn bump(&mut self) {
        self.pos = (self.pos + 1).min(self.toks.len() - 1);
    }

    fn describe(&self, t: &Token) -> String {
        if t.tok == Tok::Eof {
            "end of expression".into()
        } else {
            format!("'{}'", &self.src[t.start..t.end])
        }
    }

    fn expected(&self, what: &str) -> ExprError {
        let t = self.peek();
        let msg = format!("syntax error at offset {}: expected {what}, found {}", t.start, self.describe(t));
        err(msg, Some(t.start))
    }

    /// For a token that cannot be there at all (never the end of the expression, which `expected` reports).
    fn unexpected(&self) -> ExprError {
        let t = self.peek();
        err(format!("unexpected token {} at offset {}", self.describe(t), t.start), Some(t.start))
    }

    fn finish(&self) -> Result<(), ExprError> {
        if self.peek().tok == Tok::Eof {
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    fn eat(&mut self, sym: &str) -> bool {
        let hit = matches!(self.peek().tok, Tok::Sym(s) if s == sym);
        self.eat_if(hit)
    }

    fn eat_if(&mut self, hit: bool) -> bool {
        if hit {
            self.bump();
        }
        hit
    }

    fn expect(&mut self, sym: &str) -> Result<(), ExprError> {
        if self.eat(sym) {
            Ok(())
        } else {
            Err(self.expected(&format!("'{sym}'")))
        }
    }

    fn eat_keyword(&mut self, kw: &str) -> bool {
        let hit = matches!(&self.peek().tok, Tok::Word(w) if w.eq_ignore_ascii_case(kw));
        self.eat_if(hit)
    }

    /// The lower-cased function name when the next tokens are `name (`.
    fn call_name(&self) -> Option<String> {
        match (&self.peek().tok, self.toks.get(self.pos + 1).map(|t| &t.tok)) {
            (Tok::Word(w), Some(Tok::Sym("("))) => Some(w.to_ascii_lowercase()),
            _ => None,
        }
    }

    /// Parses the call at hand, `name(...)`, of a condition function. `args` has one letter per argument, so that
    /// each function's signature is written once: `p` a path, `v` a value placeholder, `c` a condition operand.
    fn call(&mut self, args: &str) -> Result<(), ExprError> {
        self.enter()?;
        self.bump();
        self.bump();
        for (i, arg) in args.chars().enumerate() {
            if i > 0 {
                self.expect(",")?;
            }
            match arg {
                'p' => self.path().map(|_| ())?,
                'v' => self.value_placeholder().map(|_| ())?,
                _ => self.condition_operand().map(|_| ())?,
            }
        }
        self.leave();
        self.expect(")")
    }

    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let at = self.peek().start;
            return Err(err(format!("expression is nested more than {MAX_DEPTH} levels deep (offset {at})"), Some(at)));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn bad_function(&self, name: &str, ctx: Ctx) -> ExprError {
        let at = self.peek().start;
        let is_condition_fn = CONDITION_FUNCTIONS.contains(&name);
        let msg = if ctx == Ctx::Update && (is_condition_fn || name == "size") {
            format!("function '{name}' at offset {at} cannot be used in an update expression")
        } else if ctx != Ctx::Update && UPDATE_FUNCTIONS.contains(&name) {
            format!("function '{name}' at offset {at} can only be used in the SET clause of an update expression")
        } else if ctx == Ctx::Operand && is_condition_fn {
            format!("function '{name}' at offset {at} is a condition and cannot be used as an operand")
        } else {
            format!("unknown function '{name}' at offset {at}")
        };
        err(msg, Some(at))
    }

    /// A document path; records it and its placeholders in `refs`. Returns the path and its offset.
    fn path(&mut self) -> Result<(Path, usize), ExprError> {
        let start = self.peek().start;
        let mut elems = vec![self.element(true)?];
        loop {
            if self.eat(".") {
                elems.push(self.element(false)?);
            } else if self.eat("[") {
                let t = self.peek().clone();
                let Tok::Num(digits) = &t.tok else {
                    return Err(self.expected("a list index (digits)"));
                };
                let n = digits.parse::<u32>().map_err(|_| {
                    err(format!("list index {digits} at offset {} is too large", t.start), Some(t.start))
                })?;
                self.bump();
                self.expect("]")?;
                elems.push(PathElem::Index(n));
            } else {
                break;
            }
        }
        if elems.len() > MAX_PATH_ELEMENTS {
            let msg = format!("The document path has too many nesting levels; nesting levels: {}", elems.len());
            return Err(err(msg, Some(start)));
        }
        let path = Path(elems);
        self.refs.paths.push(path.clone());
        Ok((path, start))
    }

    fn element(&mut self, first: bool) -> Result<PathElem, ExprError> {
        let t = self.peek().clone();
        match t.tok {
            Tok::NamePh(s) => {
                self.bump();
                self.refs.name_placeholders.insert(s.clone());
                Ok(PathElem::Placeholder(s))
            }
            Tok::Word(w) if first && KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(&w)) => Err(self.unexpected()),
            Tok::Word(w) if is_reserved_word(&w) => {
                let msg = format!(
                    "'{w}' is a reserved word: use an ExpressionAttributeNames placeholder such as #{w} (at offset {})",
                    t.start
                );
                Err(err(msg, Some(t.start)))
            }
            Tok::Word(w) => {
                self.bump();
                Ok(PathElem::Name(w))
            }
            _ if first => Err(self.expected("an attribute name or #placeholder")),
            _ => Err(self.expected("an attribute name or #placeholder after '.'")),
        }
    }

    fn value_placeholder(&mut self) -> Result<String, ExprError> {
        let Tok::ValuePh(v) = self.peek().tok.clone() else {
            return Err(self.expected("a value placeholder such as :v"));
        };
        self.refs.value_placeholders.insert(v.clone());
        self.bump();
        Ok(v)
    }

    // condition ::= disjunction; AND binds tighter than OR, NOT tighter than AND, comparisons tightest.
    fn or(&mut self) -> Result<(), ExprError> {
        self.and()?;
        while self.eat_keyword("OR") {
            self.and()?;
        }
        Ok(())
    }

    fn and(&mut self) -> Result<(), ExprError> {
        self.not()?;
        while self.eat_keyword("AND") {
            self.not()?;
        }
        Ok(())
    }

    fn not(&mut self) -> Result<(), ExprError> {
        if !self.eat_keyword("NOT") {
            return self.primary();
        }
        self.enter()?;
        self.not()?;
        self.leave();
        Ok(())
    }

    fn primary(&mut self) -> Result<(), ExprError> {
        if self.eat("(") {
            self.enter()?;
            self.or()?;
            self.leave();
            return self.expect(")");
        }
        if let Some(f) = self.call_name() {
            return match f.as_str() {
                "attribute_exists" | "attribute_not_exists" => self.call("p"),
                "attribute_type" => self.call("pv"),
                "begins_with" | "contains" => self.call("pc"),
                "size" => self.comparison(),
                _ => Err(self.bad_function(&f, Ctx::Condition)),
            };
        }
        match self.peek().tok {
            Tok::Word(_) | Tok::NamePh(_) | Tok::ValuePh(_) => self.comparison(),
            _ => Err(self.expected("a condition")),
        }
    }

    fn comparison(&mut self) -> Result<(), ExprError> {
        let start = self.peek().start;
        let is_size = self.condition_operand()?;
        let t = self.peek().clone();
        match &t.tok {
            Tok::Sym(s) if COMPARATORS.contains(s) => {
                self.bump();
                self.condition_operand()?;
            }
            Tok::Word(w) if w.eq_ignore_ascii_case("BETWEEN") => {
                self.bump();
                self.condition_operand()?;
                if !self.eat_keyword("AND") {
                    return Err(self.expected("AND (as in 'BETWEEN :low AND :high')"));
                }
                self.condition_operand()?;
            }
            Tok::Word(w) if w.eq_ignore_ascii_case("IN") => {
                self.bump();
                self.expect("(")?;
                if matches!(self.peek().tok, Tok::Sym(")")) {
                    return Err(err(format!("IN at offset {} needs at least one operand", t.start), Some(t.start)));
                }
                let mut n = 0;
                loop {
                    let at = self.peek().start;
                    self.condition_operand()?;
                    n += 1;
                    if n > MAX_IN_OPERANDS {
                        let msg = format!("IN at offset {} has more than {MAX_IN_OPERANDS} operands", t.start);
                        return Err(err(msg, Some(at)));
                    }
                    if !self.eat(",") {
                        break;
                    }
                }
                self.expect(")")?;
            }
            _ if is_size => {
                let msg =
                    format!("size() at offset {start} is not a condition by itself: compare it, as in 'size(a) > :n'");
                return Err(err(msg, Some(start)));
            }
            _ => return Err(self.expected("a comparator (=, <>, <, <=, >, >=), BETWEEN or IN")),
        }
        Ok(())
    }

    /// operand ::= path | :placeholder | size(path). Returns whether it was `size()`, which alone is no condition.
    fn condition_operand(&mut self) -> Result<bool, ExprError> {
        match self.call_name() {
            Some(f) if f == "size" => self.call("p").map(|()| true),
            Some(f) => Err(self.bad_function(&f, Ctx::Operand)),
            None if matches!(self.peek().tok, Tok::ValuePh(_)) => self.value_placeholder().map(|_| false),
            None => self.path().map(|_| false),
        }
    }

    /// operand ::= path | :placeholder | if_not_exists(path, operand) | list_append(operand, operand)
    fn update_operand(&mut self) -> Result<Operand, ExprError> {
        match self.call_name().as_deref() {
            Some("if_not_exists") => self.update_call(|p| {
                let (path, _) = p.path()?;
                p.expect(",")?;
                Ok(Operand::IfNotExists(path, Box::new(p.update_operand()?)))
            }),
            Some("list_append") => self.update_call(|p| {
                let first = p.update_operand()?;
                p.expect(",")?;
                Ok(Operand::ListAppend(Box::new(first), Box::new(p.update_operand()?)))
            }),
            Some(f) => Err(self.bad_function(f, Ctx::Update)),
            None if matches!(self.peek().tok, Tok::ValuePh(_)) => self.value_placeholder().map(Operand::Value),
            None => self.path().map(|(p, _)| Operand::Path(p)),
        }
    }

    /// Parses the update function call at hand, `name(...)`, reading its arguments with `args`.
    fn update_call(
        &mut self,
        args: impl FnOnce(&mut Self) -> Result<Operand, ExprError>,
    ) -> Result<Operand, ExprError> {
        self.enter()?;
        self.bump();
        self.bump();
        let op = args(self)?;
        self.leave();
        self.expect(")")?;
        Ok(op)
    }
}

/// DynamoDB's reserved words, upper case and sorted for binary search; from the DynamoDB Developer Guide,
/// "Reserved words in DynamoDB".
#[rustfmt::skip]
const RESERVED_WORDS: &[&str] = &[
    "ABORT", "ABSOLUTE", "ACTION", "ADD", "AFTER", "AGENT", "AGGREGATE", "ALL", "ALLOCATE", "ALTER", "ANALYZE", "AND",
    "ANY", "ARCHIVE", "ARE", "ARRAY", "AS", "ASC", "ASCII", "ASENSITIVE", "ASSERTION", "ASYMMETRIC", "AT", "ATOMIC",
    "ATTACH", "ATTRIBUTE", "AUTH", "AUTHORIZATION", "AUTHORIZE", "AUTO", "AVG", "BACK", "BACKUP", "BASE", "BATCH",
    "BEFORE", "BEGIN", "BETWEEN", "BIGINT", "BINARY", "BIT", "BLOB", "BLOCK", "BOOLEAN", "BOTH", "BREADTH", "BUCKET",
    "BULK", "BY", "BYTE", "CALL", "CALLED", "CALLING", "CAPACITY", "CASCADE", "CASCADED", "CASE", "CAST", "CATALOG",
    "CHAR", "CHARACTER", "CHECK", "CLASS", "CLOB", "CLOSE", "CLUSTER", "CLUSTERED", "CLUSTERING", "CLUSTERS",
    "COALESCE", "COLLATE", "COLLATION", "COLLECTION", "COLUMN", "COLUMNS", "COMBINE", "COMMENT", "COMMIT", "COMPACT",
    "COMPILE", "COMPRESS", "CONDITION", "CONFLICT", "CONNECT", "CONNECTION", "CONSISTENCY", "CONSISTENT", "CONSTRAINT",
    "CONSTRAINTS", "CONSTRUCTOR", "CONSUMED", "CONTINUE", "CONVERT", "COPY", "CORRESPONDING", "COUNT", "COUNTER",
    "CREATE", "CROSS", "CUBE", "CURRENT", "CURSOR", "CYCLE", "DATA", "DATABASE", "DATE", "DATETIME", "DAY",
    "DEALLOCATE", "DEC", "DECIMAL", "DECLARE", "DEFAULT", "DEFERRABLE", "DEFERRED", "DEFINE", "DEFINED", "DEFINITION",
    "DELETE", "DELIMITED", "DEPTH", "DEREF", "DESC", "DESCRIBE", "DESCRIPTOR", "DETACH", "DETERMINISTIC", "DIAGNOSTICS",
    "DIRECTORIES", "DISABLE", "DISCONNECT", "DISTINCT", "DISTRIBUTE", "DO", "DOMAIN", "DOUBLE", "DROP", "DUMP",
    "DURATION", "DYNAMIC", "EACH", "ELEMENT", "ELSE", "ELSEIF", "EMPTY", "ENABLE", "END", "EQUAL", "EQUALS", "ERROR",
    "ESCAPE", "ESCAPED", "EVAL", "EVALUATE", "EXCEEDED", "EXCEPT", "EXCEPTION", "EXCEPTIONS", "EXCLUSIVE", "EXEC",
    "EXECUTE", "EXISTS", "EXIT", "EXPLAIN", "EXPLODE", "EXPORT", "EXPRESSION", "EXTENDED", "EXTERNAL", "EXTRACT",
    "FAIL", "FALSE", "FAMILY", "FETCH", "FIELDS", "FILE", "FILTER", "FILTERING", "FINAL", "FINISH", "FIRST", "FIXED",
    "FLATTERN", "FLOAT", "FOR", "FORCE", "FOREIGN", "FORMAT", "FORWARD", "FOUND", "FREE", "FROM", "FULL", "FUNCTION",
    "FUNCTIONS", "GENERAL", "GENERATE", "GET", "GLOB", "GLOBAL", "GO", "GOTO", "GRANT", "GREATER", "GROUP", "GROUPING",
    "HANDLER", "HASH", "HAVE", "HAVING", "HEAP", "HIDDEN", "HOLD", "HOUR", "IDENTIFIED", "IDENTITY", "IF", "IGNORE",
    "IMMEDIATE", "IMPORT", "IN", "INCLUDING", "INCLUSIVE", "INCREMENT", "INCREMENTAL", "INDEX", "INDEXED", "INDEXES",
    "INDICATOR", "INFINITE", "INITIALLY", "INLINE", "INNER", "INNTER", "INOUT", "INPUT", "INSENSITIVE", "INSERT",
    "INSTEAD", "INT", "INTEGER", "INTERSECT", "INTERVAL", "INTO", "INVALIDATE", "IS", "ISOLATION", "ITEM", "ITEMS",
    "ITERATE", "JOIN", "KEY", "KEYS", "LAG", "LANGUAGE", "LARGE", "LAST", "LATERAL", "LEAD", "LEADING", "LEAVE", "LEFT",
    "LENGTH", "LESS", "LEVEL", "LIKE", "LIMIT", "LIMITED", "LINES", "LIST", "LOAD", "LOCAL", "LOCALTIME",
    "LOCALTIMESTAMP", "LOCATION", "LOCATOR", "LOCK", "LOCKS", "LOG", "LOGED", "LONG", "LOOP", "LOWER", "MAP", "MATCH",
    "MATERIALIZED", "MAX", "MAXLEN", "MEMBER", "MERGE", "METHOD", "METRICS", "MIN", "MINUS", "MINUTE", "MISSING", "MOD",
    "MODE", "MODIFIES", "MODIFY", "MODULE", "MONTH", "MULTI", "MULTISET", "NAME", "NAMES", "NATIONAL", "NATURAL",
    "NCHAR", "NCLOB", "NEW", "NEXT", "NO", "NONE", "NOT", "NULL", "NULLIF", "NUMBER", "NUMERIC", "OBJECT", "OF",
    "OFFLINE", "OFFSET", "OLD", "ON", "ONLINE", "ONLY", "OPAQUE", "OPEN", "OPERATOR", "OPTION", "OR", "ORDER",
    "ORDINALITY", "OTHER", "OTHERS", "OUT", "OUTER", "OUTPUT", "OVER", "OVERLAPS", "OVERRIDE", "OWNER", "PAD",
    "PARALLEL", "PARAMETER", "PARAMETERS", "PARTIAL", "PARTITION", "PARTITIONED", "PARTITIONS", "PATH", "PERCENT",
    "PERCENTILE", "PERMISSION", "PERMISSIONS", "PIPE", "PIPELINED", "PLAN", "POOL", "POSITION", "PRECISION", "PREPARE",
    "PRESERVE", "PRIMARY", "PRIOR", "PRIVATE", "PRIVILEGES", "PROCEDURE", "PROCESSED", "PROJECT", "PROJECTION",
    "PROPERTY", "PROVISIONING", "PUBLIC", "PUT", "QUERY", "QUIT", "QUORUM", "RAISE", "RANDOM", "RANGE", "RANK", "RAW",
    "READ", "READS", "REAL", "REBUILD", "RECORD", "RECURSIVE", "REDUCE", "REF", "REFERENCE", "REFERENCES",
    "REFERENCING", "REGEXP", "REGION", "REINDEX", "RELATIVE", "RELEASE", "REMAINDER", "RENAME", "REPEAT", "REPLACE",
    "REQUEST", "RESET", "RESIGNAL", "RESOURCE", "RESPONSE", "RESTORE", "RESTRICT", "RESULT", "RETURN", "RETURNING",
    "RETURNS", "REVERSE", "REVOKE", "RIGHT", "ROLE", "ROLES", "ROLLBACK", "ROLLUP", "ROUTINE", "ROW", "ROWS", "RULE",
    "RULES", "SAMPLE", "SATISFIES", "SAVE", "SAVEPOINT", "SCAN", "SCHEMA", "SCOPE", "SCROLL", "SEARCH", "SECOND",
    "SECTION", "SEGMENT", "SEGMENTS", "SELECT", "SELF", "SEMI", "SENSITIVE", "SEPARATE", "SEQUENCE", "SERIALIZABLE",
    "SESSION", "SET", "SETS", "SHARD", "SHARE", "SHARED", "SHORT", "SHOW", "SIGNAL", "SIMILAR", "SIZE", "SKEWED",
    "SMALLINT", "SNAPSHOT", "SOME", "SOURCE", "SPACE", "SPACES", "SPARSE", "SPECIFIC", "SPECIFICTYPE", "SPLIT", "SQL",
    "SQLCODE", "SQLERROR", "SQLEXCEPTION", "SQLSTATE", "SQLWARNING", "START", "STATE", "STATIC", "STATUS", "STORAGE",
    "STORE", "STORED", "STREAM", "STRING", "STRUCT", "STYLE", "SUB", "SUBMULTISET", "SUBPARTITION", "SUBSTRING",
    "SUBTYPE", "SUM", "SUPER", "SYMMETRIC", "SYNONYM", "SYSTEM", "TABLE", "TABLESAMPLE", "TEMP", "TEMPORARY",
    "TERMINATED", "TEXT", "THAN", "THEN", "THROUGHPUT", "TIME", "TIMESTAMP", "TIMEZONE", "TINYINT", "TO", "TOKEN",
    "TOTAL", "TOUCH", "TRAILING", "TRANSACTION", "TRANSFORM", "TRANSLATE", "TRANSLATION", "TREAT", "TRIGGER", "TRIM",
    "TRUE", "TRUNCATE", "TTL", "TUPLE", "TYPE", "UNDER", "UNDO", "UNION", "UNIQUE", "UNIT", "UNKNOWN", "UNLOGGED",
    "UNNEST", "UNPROCESSED", "UNSIGNED", "UNTIL", "UPDATE", "UPPER", "URL", "USAGE", "USE", "USER", "USERS", "USING",
    "UUID", "VACUUM", "VALUE", "VALUED", "VALUES", "VARCHAR", "VARIABLE", "VARIANCE", "VARINT", "VARYING", "VIEW",
    "VIEWS", "VIRTUAL", "VOID", "WAIT", "WHEN", "WHENEVER", "WHERE", "WHILE", "WINDOW", "WITH", "WITHIN", "WITHOUT",
    "WORK", "WRAPPED", "WRITE", "YEAR", "ZONE",
];

#[cfg(test)]
mod tests {

    #[test]
    fn redirect_paths_replaces_every_read_attribute_but_the_kept_ones() {
        let r = |e: &str| redirect_paths(e, &["#_sagaRatchet"], "#_g").unwrap();
        assert_eq!(r("attribute_not_exists(pk)"), "attribute_not_exists(#_g)");
        assert_eq!(r("attribute_exists(#k) AND size(a.b[2]) > :n"), "attribute_exists(#_g) AND size(#_g.b[2]) > :n");
        assert_eq!(r("NOT (x BETWEEN :a AND :b) or y IN (:c, :d)"), "NOT (#_g BETWEEN :a AND :b) or #_g IN (:c, :d)");
        assert_eq!(r("#a.#b = :v AND begins_with(s, :p)"), "#_g.#b = :v AND begins_with(#_g, :p)");
        assert_eq!(
            r("(v = :one) AND (attribute_not_exists(#_sagaRatchet) OR #_sagaRatchet <= :_sagaRatchet)"),
            "(#_g = :one) AND (attribute_not_exists(#_sagaRatchet) OR #_sagaRatchet <= :_sagaRatchet)"
        );
        assert!(redirect_paths("a = ", &[], "#_g").is_err());
        assert!(parse_condition(&r("contains(tags, :t) AND attribute_type(m, :ty)")).is_ok());
    }

    use super::*;

    #[test]
    fn and_puts_each_side_in_one_pair_of_parentheses() {
        assert_eq!(and("a = :a", "b = :b"), "(a = :a) AND (b = :b)");
        assert_eq!(and("(a = :a)", " ((b = :b)) "), "(a = :a) AND (b = :b)");
        assert_eq!(
            and("(a = :a) OR (b = :b)", "attribute_exists(c)"),
            "((a = :a) OR (b = :b)) AND (attribute_exists(c))"
        );
        assert_eq!(and("(a = :a OR b = :b) AND (c = :c)", "d = :d"), "((a = :a OR b = :b) AND (c = :c)) AND (d = :d)");
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }
    fn cond_err(e: &str) -> String {
        parse_condition(e).expect_err(e).message
    }
    fn update_err(e: &str) -> String {
        parse_update(e).expect_err(e).message
    }

    #[test]
    fn reserved_words_are_complete_sorted_and_case_insensitive() {
        assert_eq!(RESERVED_WORDS.len(), 573);
        assert!(RESERVED_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(["ABORT", "zone", "Status", "size", "name", "NOT", "ttl", "inNTer"].into_iter().all(is_reserved_word));
        assert!(!["", "abor", "zones", "contains", "begins_with", "myattr", "état"].into_iter().any(is_reserved_word));
    }

    #[test]
    fn valid_conditions() {
        #[rustfmt::skip]
        let valid = [
            "a = :v", "#n <> :v", "a < b", "a <= :v AND b > :w OR c >= :x", "a.b[0].#c[12] = :v", "NOT NOT a = :v",
            "(a = :v OR (b = :w AND (NOT c = :x)))", "a BETWEEN :lo AND :hi AND b = :v", "a IN (:a)",
            "a IN (:a, b.c, size(d))", "attribute_exists(a) AND attribute_not_exists(#b.c[1])", "size(a) > :n",
            "attribute_type(a, :t)", "begins_with(a.b, :p) OR contains(#l, c)", "contains(a, size(b))",
            ":n < size(#p.q[0])", "size(a) BETWEEN :x AND :y", "not a = :v and b between :x and :y or c in (:z)",
            "ATTRIBUTE_EXISTS(a) and Begins_With(b, :p)", "attribute_exists (a)", "  a=:v  ", "_private = :v",
            "contains = :v",
        ];
        for e in valid {
            assert!(parse_condition(e).is_ok(), "{e}: {:?}", parse_condition(e));
        }
        let in100 = (0..100).map(|i| format!(":v{i}")).collect::<Vec<_>>().join(", ");
        assert!(parse_condition(&format!("a IN ({in100})")).is_ok());
    }

    #[test]
    fn condition_refs() {
        let r = parse_condition("#a.b[2] = :x AND attribute_exists(c) OR size(#d) IN (:y, :x, e.#a)").unwrap();
        assert_eq!(r.name_placeholders, set(&["#a", "#d"]));
        assert_eq!(r.value_placeholders, set(&[":x", ":y"]));
        assert_eq!(r.paths[0].0, [PathElem::Placeholder("#a".into()), PathElem::Name("b".into()), PathElem::Index(2)]);
        assert_eq!(r.paths.iter().map(|p| p.to_string()).collect::<Vec<_>>(), ["#a.b[2]", "c", "#d", "e.#a"]);
    }

    #[test]
    fn invalid_conditions() {
        #[rustfmt::skip]
        let cases = [
            ("(a = :v", "expected ')'"), ("((a = :v) OR b = :w", "expected ')'"),
            ("a = :v)", "unexpected token ')' at offset 6"),
            ("a = :v AND", "expected a condition, found end of expression"),
            ("a = :v AND AND b = :w", "unexpected token 'AND' at offset 11"), ("", "expression is empty"),
            ("   ", "expression is empty"), ("a = :", "placeholder ':' at offset 4 is malformed"),
            ("a = :v$", "placeholder ':v$' at offset 4 is malformed"),
            ("# = :v", "placeholder '#' at offset 0 is malformed"), ("foo(a)", "unknown function 'foo'"),
            ("a = foo(b)", "unknown function 'foo'"), ("size(a)", "is not a condition"),
            ("size(a) AND b = :v", "is not a condition"),
            ("a = attribute_exists(b)", "is a condition and cannot be used as an operand"),
            ("contains(a, begins_with(b, :c))", "cannot be used as an operand"),
            ("list_append(a, b) = :v", "can only be used in the SET clause"),
            ("attribute_type(a, b)", "expected a value placeholder"), ("a", "expected a comparator"),
            ("a = :v b = :w", "unexpected token 'b'"),
            ("a == :v", "expected an attribute name or #placeholder, found '='"),
            ("a != :v", "unexpected character '!'"), ("a BETWEEN :x OR :y", "expected AND"),
            ("a IN ()", "needs at least one operand"), ("a IN (:x,)", "found ')'"),
            ("a[x] = :v", "expected a list index"), ("a[99999999999] = :v", "too large"), ("a. = :v", "after '.'"),
            ("[0] = :v", "expected a condition"), ("1a = :v", "'1a' at offset 0 is not a valid attribute name"),
            ("my$attr = :v", "'my$attr' at offset 0 is not a valid attribute name"),
            ("café = :v", "not a valid attribute name"),
        ];
        for (e, want) in cases {
            let got = cond_err(e);
            assert!(got.contains(want), "{e}: {got}");
        }
        let e = parse_condition("a = :v AND status = :s").unwrap_err();
        assert_eq!(
            e.message,
            "'status' is a reserved word: use an ExpressionAttributeNames placeholder such as #status (at offset 11)"
        );
        assert_eq!(e.position, Some(11));
        let e: Box<dyn std::error::Error> = Box::new(parse_condition("(a = :v OR b = :w").unwrap_err());
        assert_eq!(e.to_string(), "syntax error at offset 17: expected ')', found end of expression");
        assert!(cond_err("a.Name = :v").contains("'Name' is a reserved word"));
        assert!(cond_err("size = :v").contains("'size' is a reserved word"));
    }

    #[test]
    fn limits() {
        let in101 = (0..101).map(|i| format!(":v{i}")).collect::<Vec<_>>().join(",");
        assert!(cond_err(&format!("a IN ({in101})")).contains("more than 100 operands"));
        let long = format!("a = :v{}", " ".repeat(4091));
        let e = parse_condition(&long).unwrap_err();
        assert!(e.message.contains("4097 bytes") && e.position.is_none(), "{e}");
        assert!(parse_condition(&long[..4096]).is_ok());
        assert!(parse_update(&format!("SET a = :v{}", " ".repeat(4090))).is_err());
        let deep = format!("{}a = :v{}", "(".repeat(2000), ")".repeat(2000));
        assert!(cond_err(&deep).contains("nested more than 100"));
        assert!(cond_err(&format!("{}a = :v", "NOT ".repeat(500))).contains("nested"));
        let nested = format!("SET a = {}:v{}", "list_append(".repeat(200), ", :w)".repeat(200));
        assert!(update_err(&nested).contains("nested"));
    }

    #[test]
    fn valid_updates() {
        let u = parse_update(
            "SET a = :v, #b.c[1] = d + :n, e = :m - f, g = if_not_exists(g, :z), \
             h = list_append(if_not_exists(h, :empty), :l), i = list_append(:l, list_append(i, :l)) \
             REMOVE j, k[2]   ADD l :one DELETE #m :s",
        )
        .unwrap();
        let rest = [(ClauseKind::Remove, "j, k[2]"), (ClauseKind::Add, "l :one"), (ClauseKind::Delete, "#m :s")];
        assert_eq!(u.clauses[1..], rest.map(|(k, t)| (k, t.to_string())));
        assert_eq!(u.clauses[0].0, ClauseKind::Set);
        assert!(u.clauses[0].1.starts_with("a = :v, #b.c[1]") && u.clauses[0].1.ends_with("list_append(i, :l))"));
        let targets: Vec<String> = u.targets.iter().map(|(_, p)| p.to_string()).collect();
        assert_eq!(targets, ["a", "#b.c[1]", "e", "g", "h", "i", "j", "k[2]", "l", "#m"]);
        assert_eq!(u.targets[6].0, ClauseKind::Remove);
        assert_eq!(u.refs.name_placeholders, set(&["#b", "#m"]));
        assert_eq!(u.refs.value_placeholders, set(&[":v", ":n", ":m", ":z", ":empty", ":l", ":one", ":s"]));
        let paths: Vec<String> = u.refs.paths.iter().map(|p| p.to_string()).collect();
        assert_eq!(paths, ["a", "#b.c[1]", "d", "e", "f", "g", "g", "h", "h", "i", "i", "j", "k[2]", "l", "#m"]);

        let u = parse_update("delete s :x  set a=:v remove b").unwrap();
        let want = [(ClauseKind::Delete, "s :x"), (ClauseKind::Set, "a=:v"), (ClauseKind::Remove, "b")];
        assert_eq!(u.clauses, want.map(|(k, t)| (k, t.to_string())));
        assert!(parse_update("SET a[0] = :v, a[1] = :w, b.c = :x, b.d = :y").is_ok());
        assert!(parse_update("SET a = b").is_ok());
    }

    #[test]
    fn update_actions_in_full() {
        let u = parse_update(
            "SET a = b + :n, c = list_append(if_not_exists(c, :e), :l), g = :m - g REMOVE d[1] ADD e :one DELETE #f :s",
        )
        .unwrap();
        let p = |s: &str| Path(vec![PathElem::Name(s.into())]);
        let v = |s: &str| Operand::Value(s.into());
        let appended =
            Operand::ListAppend(Box::new(Operand::IfNotExists(p("c"), Box::new(v(":e")))), Box::new(v(":l")));
        let want = vec![
            Action::Set(p("a"), SetValue::Plus(Operand::Path(p("b")), v(":n"))),
            Action::Set(p("c"), SetValue::Operand(appended)),
            Action::Set(p("g"), SetValue::Minus(v(":m"), Operand::Path(p("g")))),
            Action::Remove(Path(vec![PathElem::Name("d".into()), PathElem::Index(1)])),
            Action::Add(p("e"), ":one".into()),
            Action::Delete(Path(vec![PathElem::Placeholder("#f".into())]), ":s".into()),
        ];
        assert_eq!(u.actions, want);
        assert_eq!(
            u.actions.iter().map(|a| a.target().to_string()).collect::<Vec<_>>(),
            ["a", "c", "g", "d[1]", "e", "#f"]
        );
    }

    #[test]
    fn invalid_updates() {
        #[rustfmt::skip]
        let cases = [
            ("", "expression is empty"),
            ("SET a = :v, b = :w SET c = :x", "update expression has two SET clauses (second at offset 19)"),
            ("remove a ADD b :v REMOVE c", "two REMOVE clauses"),
            ("SET a = :v, a.b = :w", "two document paths overlap: a and a.b"),
            ("SET a[0] = :v REMOVE a", "two document paths overlap: a[0] and a"),
            ("SET #n = :v REMOVE #n", "overlap: #n and #n"), ("ADD a.b :v DELETE a.b[1] :w", "overlap"),
            ("SET a[0].b = :v, a.c = :w", "conflict: a[0].b and a.c"),
            ("UPDATE a = :v", "expected SET, REMOVE, ADD or DELETE, found 'UPDATE'"),
            ("SET a = :v b = :w", "expected ',' or a new clause, found 'b'"), ("SET a :v", "expected '='"),
            ("SET a = :v +", "found end of expression"), ("SET a = :v + :w - :x", "found '-'"),
            ("SET a = :v,", "found end of expression"), ("SET", "found end of expression"),
            ("SET a = size(b)", "'size' at offset 8 cannot be used in an update"),
            ("SET a = if_not_exists(:v, b)", "expected an attribute name"),
            ("SET a = frob(b)", "unknown function 'frob'"), ("ADD a b", "expected a value placeholder"),
            ("DELETE a", "expected a value placeholder"), ("REMOVE a = :v", "expected ',' or a new clause, found '='"),
            ("SET status = :v", "'status' is a reserved word"), ("SET a = :v:w", "malformed"),
        ];
        for (e, want) in cases {
            let got = update_err(e);
            assert!(got.contains(want), "{e}: {got}");
        }
    }

    #[test]
    fn projections() {
        let r = parse_projection("a, b.c[1], #d, #e.f").unwrap();
        assert_eq!(r.name_placeholders, set(&["#d", "#e"]));
        assert!(r.value_placeholders.is_empty());
        assert_eq!(r.paths[1].0, [PathElem::Name("b".into()), PathElem::Name("c".into()), PathElem::Index(1)]);
        assert_eq!(r.paths.len(), 4);
        assert!(parse_projection("a, a.b").unwrap_err().message.contains("overlap"));
        assert!(parse_projection("a.b, a[1]")
            .unwrap_err()
            .message
            .contains("two document paths conflict: a.b and a[1]"));
        assert!(["", "a,", "a = :v", "a, :v", "size(a)"].into_iter().all(|e| parse_projection(e).is_err()));
        assert!(parse_projection("year").unwrap_err().message.contains("reserved"));
    }

    fn add(expr: &str, kind: ClauseKind, extra: &str) -> String {
        add_actions(expr, kind, extra).unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn add_actions_to_each_clause() {
        use ClauseKind::*;
        let base = "SET a = :v REMOVE b ADD c :n DELETE d :s";
        #[rustfmt::skip]
        let cases = [
            (base, Set, "#x = :t", "SET a = :v, #x = :t REMOVE b ADD c :n DELETE d :s"),
            (base, Remove, "e, f", "SET a = :v REMOVE b, e, f ADD c :n DELETE d :s"),
            (base, Add, "g :one", "SET a = :v REMOVE b ADD c :n, g :one DELETE d :s"),
            (base, Delete, "h :s", "SET a = :v REMOVE b ADD c :n DELETE d :s, h :s"),
            ("", Set, " #x = :t ", "SET #x = :t"), ("  ", Remove, "a", "REMOVE a"),
            ("ADD c :n", Delete, "d :s", "ADD c :n DELETE d :s"),
            ("REMOVE b  ", Set, "#x = :t", "REMOVE b SET #x = :t"),
            ("set a = :v\nremove b", Set, "#x = :t, y = :u", "set a = :v, #x = :t, y = :u\nremove b"),
        ];
        for (expr, kind, extra, want) in cases {
            let got = add(expr, kind, extra);
            assert_eq!(got, want);
            let before = if expr.trim().is_empty() { 0 } else { parse_update(expr).unwrap().targets.len() };
            assert_eq!(parse_update(&got).unwrap().targets.len(), before + extra.split(',').count(), "{got}");
        }
        let u = parse_update(&add("SET a = list_append(a, :l) REMOVE b", Set, "#_sagaApplied = :_sagaTrue")).unwrap();
        assert_eq!(u.targets[1], (Set, Path(vec![PathElem::Placeholder("#_sagaApplied".into())])));
        assert!(u.refs.value_placeholders.contains(":_sagaTrue"));
    }

    #[test]
    fn add_actions_rejects_bad_input() {
        use ClauseKind::*;
        let big = format!("SET a = :v{}", " ".repeat(4080));
        #[rustfmt::skip]
        let cases = [
            ("SET a = :v", Set, "a = :w", "error: two document paths overlap: a and a"),
            ("SET a = :v", Set, "", "error: in the actions to add"), ("SET a = ", Set, "b = :w", "found end"),
            ("SET a = :v", Set, "b = :w REMOVE c", "must all belong to the SET clause"),
            ("REMOVE a", Add, "b", "error: in the actions to add"), (&big, Set, "bb = :w", "4096"),
        ];
        for (expr, kind, extra, want) in cases {
            let got = add(expr, kind, extra);
            assert!(got.starts_with("error: ") && got.contains(want), "{extra}: {got}");
        }
    }
}

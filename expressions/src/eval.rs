//! A local evaluator of update expressions: whether DynamoDB accepts an `UpdateItem` on an item as it is now, and
//! exactly what the item becomes.
//!
//! The protocol must know, before a transaction commits, that every write it will apply afterwards is accepted: an
//! update refused after the commit point could not be taken back. [`apply_update`] evaluates an `UpdateExpression`
//! on the item as it was read (or on the key alone when the item is absent) with the rules DynamoDB applies, in the
//! order it applies them, and returns the item it would store or the `ValidationException` it would raise, as an
//! [`EvalError`] whose [`EvalErrorKind`] names the rule.
//!
//! The reference is Amazon DynamoDB Local (3.x), which the dynamo-saga workspace's differential test (`tests/eval.rs`)
//! runs thousands of random updates against. Where its behaviour is particular, the evaluator follows it and says so where it does:
//!
//! - Numbers keep the text they were written with when an update stores a value as given (`SET a = :v` with
//!   `"1.50"` stores `"1.50"`), and an arithmetic result is written out in full without exponent and with the scale
//!   of its operands (`1.50 + 1` is `"2.50"`). DynamoDB itself stores every number in a canonical form; the two agree
//!   on every number's value, which is all DynamoDB's documentation promises.
//! - A number set written from a value has each element in Java's `BigDecimal.toString` form (`4e1` is `4E+1`); a
//!   set that an `ADD` or `DELETE` changes has every element in plain form without trailing zeros (`40`), and one
//!   that the action leaves as it was keeps its text.
//! - When an update breaks several rules at once, the error reported is the one DynamoDB Local meets first: checks
//!   that need no item first (the key, the values, the expression and its placeholders, the size of what it writes,
//!   unused placeholders, key attributes), then the document walked in the order of Java's `HashMap` over the path
//!   elements, then the item size, then the index keys. Real DynamoDB may name another of the errors; it refuses
//!   the update all the same.
//! - DynamoDB Local does not check the type of a local secondary index's sort key on `UpdateItem`; DynamoDB does, and
//!   so does the evaluator, for every attribute of [`KeyTypes::index_keys`].
//!
//! Item sizes follow DynamoDB Local's arithmetic: a number's size is that of its internal encoding (one byte per two
//! significant digits, aligned on the decimal exponent, plus one, plus one for a short negative number), which the
//! documentation only approximates.

use std::collections::{HashMap, HashSet};
use std::fmt;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use bigdecimal::num_bigint::{BigInt, Sign};
use bigdecimal::BigDecimal;

use crate::expr::{self, Action, Operand, Path, PathElem, SetValue};
use crate::value::{check_map_keys, check_name, nesting, Item, MAX_NESTING_LEVELS};

/// DynamoDB's limit on an item's size, in bytes.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// Longest placeholder of ExpressionAttributeNames or ExpressionAttributeValues, with its `#` or `:`, in bytes.
pub const MAX_PLACEHOLDER_BYTES: usize = 255;
/// Longest partition key value, of the table or of an index, in bytes.
pub const MAX_PARTITION_KEY_BYTES: usize = 2048;
/// Longest sort key value, of the table or of an index, in bytes.
pub const MAX_SORT_KEY_BYTES: usize = 1024;

/// Most significant digits a DynamoDB number may have.
const MAX_DIGITS: u64 = 38;
/// Decimal exponents (of the leading digit) a non-zero DynamoDB number may have: 1E-130 to 9.99..E+125.
const MIN_EXPONENT: i64 = -130;
const MAX_EXPONENT: i64 = 125;

/// The attribute types a table's description gives for its key and its indexes' keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyTypes {
    /// The table's key attributes, partition key first, each with its type: `'S'`, `'N'` or `'B'`.
    pub key: Vec<(String, char)>,
    /// Every attribute that is a key of a global or local secondary index, in the order of the table's description
    /// (each index's partition key before its sort key): the order DynamoDB checks them in.
    pub index_keys: Vec<IndexKey>,
}

/// A key attribute of a secondary index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IndexKey {
    /// The index.
    pub index: String,
    /// The attribute.
    pub name: String,
    /// Its type: `'S'`, `'N'` or `'B'`.
    pub kind: char,
    /// Whether it is the index's sort key (at most [`MAX_SORT_KEY_BYTES`]) rather than its partition key (at most
    /// [`MAX_PARTITION_KEY_BYTES`]).
    pub sort: bool,
    /// Whether the index is a local secondary index, whose entries count toward the item's 400 KB.
    pub local: bool,
}

impl IndexKey {
    pub fn new(index: impl Into<String>, name: impl Into<String>, kind: char, sort: bool) -> Self {
        IndexKey { index: index.into(), name: name.into(), kind, sort, local: false }
    }

    /// The same key, of a local secondary index.
    pub fn of_local_index(self) -> Self {
        IndexKey { local: true, ..self }
    }

    /// The longest string or binary value the key may have, in bytes.
    pub fn max_bytes(&self) -> usize {
        if self.sort {
            MAX_SORT_KEY_BYTES
        } else {
            MAX_PARTITION_KEY_BYTES
        }
    }
}

/// Which of DynamoDB's rules an update breaks; each is a `ValidationException` in DynamoDB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EvalErrorKind {
    /// The key is not the table's key: a missing, extra or mistyped attribute, or an empty string or binary.
    InvalidKey,
    /// A value of ExpressionAttributeValues is not a valid DynamoDB value: a malformed number or one out of range or
    /// precision, an empty set, a set with duplicates.
    InvalidValue,
    /// The expression does not parse, names an undefined placeholder, or writes two overlapping paths.
    InvalidExpression,
    /// A value placeholder has a type its operator or function never takes (`:s + :n` with a string `:s`, `ADD a
    /// :list`): "Incorrect operand type for operator or function".
    IncorrectOperandType,
    /// A placeholder of ExpressionAttributeNames or ExpressionAttributeValues is not used by the expression.
    UnusedPlaceholder,
    /// An action writes a key attribute: "Cannot update attribute X. This attribute is part of the key".
    KeyAttributeUpdate,
    /// A path goes into a key attribute of the table or of an index, which must be scalars.
    NestedKeyAccess,
    /// A path the update writes goes through an absent attribute or one of the wrong type: "The document path
    /// provided in the update expression is invalid for update".
    InvalidDocumentPath,
    /// An operand reads an attribute the item does not have: "The provided expression refers to an attribute that
    /// does not exist in the item".
    MissingAttribute,
    /// An attribute of the item has a type the action or function cannot take: "An operand in the update expression
    /// has an incorrect data type".
    OperandType,
    /// An arithmetic result's magnitude is above 9.9999999999999999999999999999999999999E+125.
    NumberOverflow,
    /// An arithmetic result's magnitude is below 1E-130.
    NumberUnderflow,
    /// An arithmetic result has more than 38 significant digits.
    NumberPrecision,
    /// The item after the update is larger than 400 KB, or the names and values the update writes add up to more
    /// than that by themselves.
    ItemTooLarge,
    /// An index key attribute would get a type other than its index's.
    IndexKeyType,
    /// An index key attribute would get an empty string or binary.
    IndexKeyEmpty,
    /// An index key attribute would get a string or binary longer than its index allows: 2048 bytes for a partition
    /// key, 1024 for a sort key.
    IndexKeySize,
    /// The item would nest lists and maps deeper than 32 levels.
    NestingTooDeep,
    /// An attribute name is empty, or longer than DynamoDB allows.
    InvalidAttributeName,
}

impl EvalErrorKind {
    /// Every kind, for callers that count outcomes.
    pub const ALL: [EvalErrorKind; 19] = [
        EvalErrorKind::InvalidKey,
        EvalErrorKind::InvalidValue,
        EvalErrorKind::InvalidExpression,
        EvalErrorKind::IncorrectOperandType,
        EvalErrorKind::UnusedPlaceholder,
        EvalErrorKind::KeyAttributeUpdate,
        EvalErrorKind::NestedKeyAccess,
        EvalErrorKind::InvalidDocumentPath,
        EvalErrorKind::MissingAttribute,
        EvalErrorKind::OperandType,
        EvalErrorKind::NumberOverflow,
        EvalErrorKind::NumberUnderflow,
        EvalErrorKind::NumberPrecision,
        EvalErrorKind::ItemTooLarge,
        EvalErrorKind::IndexKeyType,
        EvalErrorKind::IndexKeyEmpty,
        EvalErrorKind::IndexKeySize,
        EvalErrorKind::NestingTooDeep,
        EvalErrorKind::InvalidAttributeName,
    ];
}

/// Why DynamoDB would refuse an update: the rule, and a message close to the `ValidationException`'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    pub kind: EvalErrorKind,
    pub message: String,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EvalError {}

fn fail<T>(kind: EvalErrorKind, message: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError { kind, message: message.into() })
}

const PATH_INVALID: &str = "The document path provided in the update expression is invalid for update";
const ATTRIBUTE_MISSING: &str = "The provided expression refers to an attribute that does not exist in the item";
const OPERAND_TYPE: &str = "An operand in the update expression has an incorrect data type";

/// The item DynamoDB stores after `UpdateItem` with this key and update on `item` (`None`: no item has the key,
/// and the update creates one from it), or the error it raises instead.
///
/// `names` and `values` are the request's ExpressionAttributeNames and ExpressionAttributeValues; `keys` the
/// types of the table's key and index key attributes. The item must be one DynamoDB stored (its numbers valid).
pub fn apply_update(
    item: Option<&Item>,
    key: &Item,
    update_expression: &str,
    names: &HashMap<String, String>,
    values: &HashMap<String, AttributeValue>,
    keys: &KeyTypes,
) -> Result<Item, EvalError> {
    let checked = check_update(key, update_expression, names, values, keys)?;
    let mut root = match item {
        Some(i) => i.clone(),
        None => key.clone(),
    };
    let before = AttributeValue::M(std::mem::take(&mut root));
    let tree = Tree::build(&checked.actions);
    let ctx = Ctx { before: &before, values: &checked.values, actions: &checked.actions };
    let AttributeValue::M(after) = ctx.apply(&tree, &before)? else { unreachable!("an item is a map") };
    let size = item_size(&after);
    if size > MAX_ITEM_BYTES {
        return fail(
            EvalErrorKind::ItemTooLarge,
            format!(
                "Item size to update has exceeded the maximum allowed size ({size} bytes; at most {MAX_ITEM_BYTES})"
            ),
        );
    }
    check_nesting(&after)?;
    check_index_keys(&after, keys)?;
    Ok(after)
}

/// An update as DynamoDB holds it once it has checked everything that needs no item: its actions with names
/// resolved, and its values converted.
pub struct CheckedUpdate {
    actions: Vec<RAction>,
    values: HashMap<String, AttributeValue>,
}

/// What DynamoDB checks of an `UpdateItem` before it reads the item, in its order: the key, the values, the
/// expression and its placeholders, the size of what it writes, unused placeholders, key attributes. An update that
/// passes may still be refused on the item it meets ([`apply_update`]); one that fails is refused whatever the item.
pub fn check_update(
    key: &Item,
    update_expression: &str,
    names: &HashMap<String, String>,
    values: &HashMap<String, AttributeValue>,
    keys: &KeyTypes,
) -> Result<CheckedUpdate, EvalError> {
    check_key(key, keys)?;
    check_placeholders(names, values)?;
    let values = convert_values(values)?;
    let parsed = expr::parse_update(update_expression).map_err(|e| EvalError {
        kind: EvalErrorKind::InvalidExpression,
        message: format!("Invalid UpdateExpression: {e}"),
    })?;
    check_list_append_placement(&parsed.actions)?;
    let actions = resolve(&parsed.actions, names, &values)?;
    check_update_size(&actions, &values)?;
    check_unused(&parsed.refs, names, values.keys())?;
    check_keys_untouched(&actions, keys)?;
    Ok(CheckedUpdate { actions, values })
}

/// Whether DynamoDB accepts `item` as a whole new item (`PutItem`): at most 400 KB, and every index key attribute it
/// has a non-empty scalar of its index's type.
pub fn check_item(item: &Item, keys: &KeyTypes) -> Result<(), EvalError> {
    let size = item_size(item);
    if size > MAX_ITEM_BYTES {
        return fail(
            EvalErrorKind::ItemTooLarge,
            format!("Item size has exceeded the maximum allowed size ({size} bytes; at most {MAX_ITEM_BYTES})"),
        );
    }
    check_names(item)?;
    check_nesting(item)?;
    check_index_keys(item, keys)
}

/// The deepest level of `item`: 1 for scalars only, one more for each list or map a value nests.
fn item_levels(item: &Item) -> usize {
    item.values().map(|v| 1 + nesting(v)).max().unwrap_or(0)
}

fn check_nesting(item: &Item) -> Result<(), EvalError> {
    let levels = item_levels(item);
    if levels > MAX_NESTING_LEVELS {
        return fail(
            EvalErrorKind::NestingTooDeep,
            format!("Nesting Levels have exceeded supported limits ({levels} levels; at most {MAX_NESTING_LEVELS})"),
        );
    }
    Ok(())
}

/// Every attribute name of a whole item, and every map key in it, is 1 to 65,535 bytes long.
fn check_names(item: &Item) -> Result<(), EvalError> {
    item.keys()
        .try_for_each(|k| check_name(k))
        .and_then(|_| check_map_keys(item))
        .map_err(|message| EvalError { kind: EvalErrorKind::InvalidAttributeName, message })
}

/// The placeholders of ExpressionAttributeNames and ExpressionAttributeValues (at most 255 bytes each, with their
/// `#` or `:`) and the names they stand for (1 to 65,535 bytes).
fn check_placeholders(
    names: &HashMap<String, String>,
    values: &HashMap<String, AttributeValue>,
) -> Result<(), EvalError> {
    let long = |map: &str, k: &String| EvalError {
        kind: EvalErrorKind::InvalidAttributeName,
        message: format!(
            "{map} contains invalid key: The expression attribute map contains a key that is too long; size of key: {}",
            k.len()
        ),
    };
    let mut sorted: Vec<(&String, &String)> = names.iter().collect();
    sorted.sort();
    for (k, name) in sorted {
        if k.len() > MAX_PLACEHOLDER_BYTES {
            return Err(long("ExpressionAttributeNames", k));
        }
        check_name(name).map_err(|m| EvalError {
            kind: EvalErrorKind::InvalidAttributeName,
            message: format!("ExpressionAttributeNames contains invalid value: {m} for key {k}"),
        })?;
    }
    match values.keys().filter(|k| k.len() > MAX_PLACEHOLDER_BYTES).min() {
        Some(k) => Err(long("ExpressionAttributeValues", k)),
        None => Ok(()),
    }
}

/// Whether `item` comes within a tenth of one of DynamoDB's limits (its size, counted twice where a local index may
/// copy it, its nesting, the length of a key or an index key), or has a number of 37 or 38 digits: where a
/// disagreement between these rules and DynamoDB would show first, so that a caller that must not guess wrong asks
/// DynamoDB itself about such an item.
pub fn near_limits(item: &Item, keys: &KeyTypes) -> bool {
    let near = |size: usize, max: usize| size * 10 >= max * 9;
    let bytes = |v: &AttributeValue| match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::B(b) => b.as_ref().len(),
        _ => 0,
    };
    let table_keys = keys
        .key
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name, if i == 0 { MAX_PARTITION_KEY_BYTES } else { MAX_SORT_KEY_BYTES }));
    let index_keys = keys.index_keys.iter().map(|k| (&k.name, k.max_bytes()));
    // A local index's entry may hold the whole item again, within the same 400 KB.
    let copies = if keys.index_keys.iter().any(|k| k.local) { 2 } else { 1 };
    near(copies * item_size(item), MAX_ITEM_BYTES)
        || item_levels(item) + 3 > MAX_NESTING_LEVELS
        || table_keys.chain(index_keys).any(|(name, max)| item.get(name).is_some_and(|v| near(bytes(v), max)))
        || item.values().any(long_number)
}

/// A number of 37 digits or more, anywhere in `v`.
fn long_number(v: &AttributeValue) -> bool {
    let digits = |n: &String| n.chars().filter(char::is_ascii_digit).count() >= 37;
    match v {
        AttributeValue::N(n) => digits(n),
        AttributeValue::Ns(ns) => ns.iter().any(digits),
        AttributeValue::L(l) => l.iter().any(long_number),
        AttributeValue::M(m) => m.values().any(long_number),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Numbers, as Java's BigDecimal holds them: DynamoDB Local parses, adds and prints numbers with it.

/// Parses a number as Java's `new BigDecimal(String)` does: an optional sign, digits with at most one decimal point,
/// an optional exponent. (Java also takes non-ASCII decimal digits, which DynamoDB Local therefore accepts; they are
/// refused here, as real DynamoDB refuses them.)
fn parse_number(s: &str) -> Option<BigDecimal> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => {
            let e = &body[i + 1..];
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (&body[..i], e.parse::<i32>().ok()?)
        }
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut unscaled = BigInt::parse_bytes(digits.as_bytes(), 10)?;
    if neg {
        unscaled = -unscaled;
    }
    let scale = frac.len() as i64 - i64::from(exp);
    i32::try_from(scale).ok()?;
    Some(BigDecimal::new(unscaled, scale))
}

/// The number's digits without sign, as Java's `BigInteger.toString` gives them for the unscaled value.
fn coefficient(d: &BigDecimal) -> (bool, String, i64) {
    let (int, scale) = d.as_bigint_and_exponent();
    (int.sign() == Sign::Minus, int.magnitude().to_str_radix(10), scale)
}

/// Java's `BigDecimal.precision()`: the number of digits of the unscaled value (1 for zero).
fn precision(d: &BigDecimal) -> i64 {
    coefficient(d).1.len() as i64
}

/// Java's `BigDecimal.stripTrailingZeros()`: zero becomes `0` with scale 0.
fn strip_trailing_zeros(d: &BigDecimal) -> BigDecimal {
    let (mut int, mut scale) = d.as_bigint_and_exponent();
    if int.sign() == Sign::NoSign {
        return BigDecimal::new(int, 0);
    }
    let ten = BigInt::from(10);
    while (&int % &ten).sign() == Sign::NoSign {
        int /= &ten;
        scale -= 1;
    }
    BigDecimal::new(int, scale)
}

/// Java's `BigDecimal.toPlainString()`: no exponent; the scale decides the number of decimals.
fn to_plain_string(d: &BigDecimal) -> String {
    let (neg, digits, scale) = coefficient(d);
    let sign = if neg { "-" } else { "" };
    if scale <= 0 {
        if digits == "0" {
            return "0".into();
        }
        return format!("{sign}{digits}{}", "0".repeat(-scale as usize));
    }
    let scale = scale as usize;
    if digits.len() > scale {
        format!("{sign}{}.{}", &digits[..digits.len() - scale], &digits[digits.len() - scale..])
    } else {
        format!("{sign}0.{}{digits}", "0".repeat(scale - digits.len()))
    }
}

/// Java's `BigDecimal.toString()`: plain when the scale is not negative and the exponent is at least -6, else
/// scientific with one digit before the point (`4E+1`, `1.5E-10`).
fn to_java_string(d: &BigDecimal) -> String {
    let (neg, digits, scale) = coefficient(d);
    let adjusted = -scale + (digits.len() as i64 - 1);
    if scale >= 0 && adjusted >= -6 {
        return to_plain_string(d);
    }
    let sign = if neg { "-" } else { "" };
    let point = if digits.len() > 1 { format!(".{}", &digits[1..]) } else { String::new() };
    let exp_sign = if adjusted >= 0 { "+" } else { "" };
    format!("{sign}{}{point}E{exp_sign}{adjusted}", &digits[..1])
}

/// The exact sum or difference, with the larger scale of the two, as Java's `BigDecimal.add` and `subtract` give it.
fn add_exact(a: &BigDecimal, b: &BigDecimal, negate_b: bool) -> BigDecimal {
    let (x, sx) = a.as_bigint_and_exponent();
    let (mut y, sy) = b.as_bigint_and_exponent();
    if negate_b {
        y = -y;
    }
    let scale = sx.max(sy);
    let align = |v: BigInt, s: i64| v * BigInt::from(10).pow((scale - s) as u32);
    BigDecimal::new(align(x, sx) + align(y, sy), scale)
}

/// DynamoDB's rules for a number: at most 38 significant digits, then a magnitude from 1E-130 up to but excluding
/// 1E+126. Returns the kind and message of the rule broken.
fn number_rule(d: &BigDecimal) -> Result<(), (EvalErrorKind, &'static str)> {
    if precision(&strip_trailing_zeros(d)) > MAX_DIGITS as i64 {
        return Err((EvalErrorKind::NumberPrecision, "DynamoDB only supports precision up to 38 digits"));
    }
    if d.sign() != Sign::NoSign {
        let exponent = precision(d) - d.as_bigint_and_exponent().1 - 1;
        if exponent > MAX_EXPONENT {
            let msg = "Number overflow. Attempting to store a number with magnitude larger than supported range";
            return Err((EvalErrorKind::NumberOverflow, msg));
        }
        if exponent < MIN_EXPONENT {
            let msg = "Number underflow. Attempting to store a number with magnitude smaller than supported range";
            return Err((EvalErrorKind::NumberUnderflow, msg));
        }
    }
    Ok(())
}

/// A number DynamoDB stored; its validity is the caller's promise ([`apply_update`]'s `item`).
fn stored_number(s: &str) -> BigDecimal {
    parse_number(s).unwrap_or_else(|| BigDecimal::from(0))
}

/// The size of a number as DynamoDB Local counts it: the length of its order-preserving encoding, a byte of
/// exponent and one byte per two digits of the significand, the digits aligned so that the decimal exponent is
/// even, and for a negative number of fewer than 20 digit bytes a terminator.
fn number_size(s: &str) -> usize {
    let d = stored_number(s);
    if d.sign() == Sign::NoSign {
        return 1;
    }
    let stripped = strip_trailing_zeros(&d.abs());
    let (_, digits, scale) = coefficient(&stripped);
    let exponent = digits.len() as i64 - scale;
    let len = digits.len() + usize::from(exponent % 2 != 0);
    let bytes = len.div_ceil(2);
    bytes + 1 + usize::from(d.sign() == Sign::Minus && bytes < 20)
}

// ---------------------------------------------------------------------------------------------------------------
// Sizes.

/// An attribute value's size by DynamoDB Local's rules (see [`crate::value::value_size`] for the documented ones).
fn value_size(av: &AttributeValue) -> usize {
    crate::value::value_size_with(av, number_size)
}

/// An item's size: each attribute's name and value.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

// ---------------------------------------------------------------------------------------------------------------
// Checks made before the item is read.

fn type_letters(av: &AttributeValue) -> &'static str {
    match av {
        AttributeValue::S(_) => "S",
        AttributeValue::N(_) => "N",
        AttributeValue::B(_) => "B",
        AttributeValue::Bool(_) => "BOOL",
        AttributeValue::Null(_) => "NULL",
        AttributeValue::M(_) => "M",
        AttributeValue::L(_) => "L",
        AttributeValue::Ss(_) => "SS",
        AttributeValue::Ns(_) => "NS",
        AttributeValue::Bs(_) => "BS",
        _ => "unknown",
    }
}

fn check_key(key: &Item, keys: &KeyTypes) -> Result<(), EvalError> {
    let count = || fail(EvalErrorKind::InvalidKey, "The number of conditions on the keys is invalid");
    if key.len() != keys.key.len() {
        return count();
    }
    for (name, t) in &keys.key {
        let Some(v) = key.get(name) else { return count() };
        let actual = type_letters(v);
        if actual.len() != 1 || !actual.starts_with(*t) {
            return fail(
                EvalErrorKind::InvalidKey,
                format!("One or more parameter values were invalid: Type mismatch for key {name} expected: {t} actual: {actual}"),
            );
        }
        let empty = match v {
            AttributeValue::S(s) => s.is_empty().then_some("string"),
            AttributeValue::B(b) => b.as_ref().is_empty().then_some("binary"),
            _ => None,
        };
        if let Some(what) = empty {
            let msg = format!(
                "One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain \
                 an empty {what} value. Key: {name}"
            );
            return fail(EvalErrorKind::InvalidKey, msg);
        }
        if let AttributeValue::N(n) = v {
            check_value_number(n).map_err(|m| EvalError { kind: EvalErrorKind::InvalidKey, message: m })?;
        }
    }
    Ok(())
}

/// A number of a request's values: the message DynamoDB gives when it is not valid.
fn check_value_number(s: &str) -> Result<BigDecimal, String> {
    let d = parse_number(s).ok_or("A value provided cannot be converted into a number")?;
    number_rule(&d).map_err(|(_, m)| m.to_string())?;
    Ok(d)
}

/// Validates the request's values as DynamoDB does on receipt, and converts them to the form an update stores:
/// numbers as written, number set elements in Java's `BigDecimal.toString` form.
fn convert_values(values: &HashMap<String, AttributeValue>) -> Result<HashMap<String, AttributeValue>, EvalError> {
    let mut names: Vec<&String> = values.keys().collect();
    names.sort();
    let mut out = HashMap::with_capacity(values.len());
    for name in names {
        if 1 + nesting(&values[name]) > MAX_NESTING_LEVELS {
            return fail(EvalErrorKind::NestingTooDeep, "Nesting Levels have exceeded supported limits");
        }
        let v = convert_value(&values[name]).map_err(|m| EvalError {
            kind: EvalErrorKind::InvalidValue,
            message: format!("ExpressionAttributeValues contains invalid value: {m} for key {name}"),
        })?;
        out.insert(name.clone(), v);
    }
    Ok(out)
}

fn convert_value(v: &AttributeValue) -> Result<AttributeValue, String> {
    let dup = |t: &str| {
        format!("One or more parameter values were invalid: Input collection of type {t} contains duplicates.")
    };
    Ok(match v {
        AttributeValue::N(n) => {
            check_value_number(n)?;
            v.clone()
        }
        AttributeValue::Null(false) => return Err("Null attribute value types must have the value of true".into()),
        AttributeValue::Ns(ns) => {
            if ns.is_empty() {
                return Err("One or more parameter values were invalid: An number set  may not be empty".into());
            }
            let mut seen: Vec<BigDecimal> = Vec::with_capacity(ns.len());
            for n in ns {
                let d = check_value_number(n)?;
                if seen.contains(&d) {
                    return Err("Input collection contains duplicates".into());
                }
                seen.push(d);
            }
            AttributeValue::Ns(seen.iter().map(to_java_string).collect())
        }
        AttributeValue::Ss(ss) => {
            if ss.is_empty() {
                return Err("One or more parameter values were invalid: An string set  may not be empty".into());
            }
            if ss.iter().collect::<HashSet<_>>().len() != ss.len() {
                return Err(dup("SS"));
            }
            v.clone()
        }
        AttributeValue::Bs(bs) => {
            if bs.is_empty() {
                return Err("One or more parameter values were invalid: Binary sets should not be empty".into());
            }
            if bs.iter().map(Blob::as_ref).collect::<HashSet<_>>().len() != bs.len() {
                return Err(dup("BS"));
            }
            v.clone()
        }
        AttributeValue::M(m) => {
            AttributeValue::M(m.iter().map(|(k, x)| Ok((k.clone(), convert_value(x)?))).collect::<Result<_, String>>()?)
        }
        AttributeValue::L(l) => AttributeValue::L(l.iter().map(convert_value).collect::<Result<_, _>>()?),
        _ => v.clone(),
    })
}

/// A path element with its placeholder replaced by the attribute name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Elem {
    Name(String),
    Index(usize),
}

type RPath = Vec<Elem>;

/// An operand with names resolved; values stay placeholders, looked up in the converted values.
#[derive(Debug)]
enum ROperand {
    Path(RPath),
    Value(String),
    IfNotExists(RPath, Box<ROperand>),
    ListAppend(Box<ROperand>, Box<ROperand>),
}

#[derive(Debug)]
enum RValue {
    Operand(ROperand),
    Plus(ROperand, ROperand),
    Minus(ROperand, ROperand),
}

#[derive(Debug)]
enum RAction {
    Set(RPath, RValue),
    Remove(RPath),
    Add(RPath, String),
    Delete(RPath, String),
}

impl RAction {
    fn target(&self) -> &RPath {
        match self {
            RAction::Set(p, _) | RAction::Remove(p) | RAction::Add(p, _) | RAction::Delete(p, _) => p,
        }
    }
}

/// Resolves placeholders and checks what DynamoDB checks of the expression before reading the item, in its order.
///
/// DynamoDB Local takes the actions last written first, twice: once to place each target path in a tree (a name
/// placeholder there must be defined, and no two paths may overlap), then to validate each action's operands (every
/// placeholder defined, each value of a type its operator or function takes, `if_not_exists` not defaulting a path to
/// itself). The first error met is reported.
fn resolve(
    actions: &[Action],
    names: &HashMap<String, String>,
    values: &HashMap<String, AttributeValue>,
) -> Result<Vec<RAction>, EvalError> {
    let r = Resolver { names, values };
    let mut targets: Vec<RPath> = Vec::with_capacity(actions.len());
    for a in actions.iter().rev() {
        let path = r.path(a.target())?;
        for q in &targets {
            check_overlap(q, &path)?;
        }
        targets.push(path);
    }
    let mut out: Vec<RAction> =
        actions.iter().rev().zip(targets).map(|(a, t)| r.action(a, t)).collect::<Result<_, _>>()?;
    out.reverse();
    Ok(out)
}

/// Two target paths of which one is a prefix of the other, or that use one element both as a map and as a list.
fn check_overlap(p: &RPath, q: &RPath) -> Result<(), EvalError> {
    let common = p.iter().zip(q).take_while(|(x, y)| x == y).count();
    let what = match (p.get(common), q.get(common)) {
        (None, _) | (_, None) => "overlap",
        (Some(x), Some(y)) if matches!(x, Elem::Index(_)) != matches!(y, Elem::Index(_)) => "conflict",
        _ => return Ok(()),
    };
    fail(
        EvalErrorKind::InvalidExpression,
        format!(
            "Invalid UpdateExpression: Two document paths {what} with each other; must remove or rewrite one of these \
             paths; path one: {}, path two: {}",
            path_text(p),
            path_text(q)
        ),
    )
}

struct Resolver<'a> {
    names: &'a HashMap<String, String>,
    values: &'a HashMap<String, AttributeValue>,
}

impl Resolver<'_> {
    fn path(&self, p: &Path) -> Result<RPath, EvalError> {
        p.0.iter()
            .map(|e| match e {
                PathElem::Name(n) => Ok(Elem::Name(n.clone())),
                PathElem::Index(i) => Ok(Elem::Index(*i as usize)),
                PathElem::Placeholder(ph) => match self.names.get(ph) {
                    Some(n) => Ok(Elem::Name(n.clone())),
                    None => fail(
                        EvalErrorKind::InvalidExpression,
                        format!(
                            "Invalid UpdateExpression: An expression attribute name used in the document path is not \
                             defined; attribute name: {ph}"
                        ),
                    ),
                },
            })
            .collect()
    }

    fn value(&self, v: &str) -> Result<&AttributeValue, EvalError> {
        match self.values.get(v) {
            Some(x) => Ok(x),
            None => fail(
                EvalErrorKind::InvalidExpression,
                format!(
                    "Invalid UpdateExpression: An expression attribute value used in expression is not defined; \
                     attribute value: {v}"
                ),
            ),
        }
    }

    /// An operand with its placeholders resolved; then, for a function, the types of its value operands.
    fn operand(&self, o: &Operand) -> Result<ROperand, EvalError> {
        Ok(match o {
            Operand::Path(p) => ROperand::Path(self.path(p)?),
            Operand::Value(v) => {
                self.value(v)?;
                ROperand::Value(v.clone())
            }
            Operand::IfNotExists(p, o) => {
                let (path, o) = (self.path(p)?, self.operand(o)?);
                if matches!(&o, ROperand::Path(q) if *q == path) {
                    return fail(
                        EvalErrorKind::InvalidExpression,
                        format!(
                            "Invalid UpdateExpression: The first operand must be distinct from the remaining operands \
                             for this operator or function; operator: if_not_exists, first operand: {}",
                            path_text(&path)
                        ),
                    );
                }
                ROperand::IfNotExists(path, Box::new(o))
            }
            Operand::ListAppend(a, b) => {
                let (a, b) = (self.operand(a)?, self.operand(b)?);
                self.value_types("list_append", [&a, &b], |v| matches!(v, AttributeValue::L(_)))?;
                ROperand::ListAppend(Box::new(a), Box::new(b))
            }
        })
    }

    /// DynamoDB knows the types of value placeholders before reading the item, and refuses one that `op` never
    /// takes.
    fn value_types(
        &self,
        op: &str,
        operands: [&ROperand; 2],
        ok: impl Fn(&AttributeValue) -> bool,
    ) -> Result<(), EvalError> {
        for o in operands {
            if let ROperand::Value(v) = o {
                let v = &self.values[v];
                if !ok(v) {
                    return fail(
                        EvalErrorKind::IncorrectOperandType,
                        format!(
                            "Invalid UpdateExpression: Incorrect operand type for operator or function; operator or \
                             function: {op}, operand type: {}",
                            type_letters(v)
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// The value of an ADD or DELETE action: defined, and a number or a set (ADD) or a set (DELETE).
    fn action_value(&self, v: &str, clause: &str) -> Result<String, EvalError> {
        let value = self.value(v)?;
        let ok = if clause == "ADD" { matches!(value, AttributeValue::N(_)) || is_set(value) } else { is_set(value) };
        if ok {
            return Ok(v.to_string());
        }
        fail(
            EvalErrorKind::IncorrectOperandType,
            format!(
                "Invalid UpdateExpression: Incorrect operand type for operator or function; operator: {clause}, \
                 operand type: {}, typeSet: ALLOWED_FOR_{clause}_OPERAND",
                long_type_name(value)
            ),
        )
    }

    fn action(&self, a: &Action, target: RPath) -> Result<RAction, EvalError> {
        let is_number = |v: &AttributeValue| matches!(v, AttributeValue::N(_));
        Ok(match a {
            Action::Set(_, SetValue::Operand(o)) => RAction::Set(target, RValue::Operand(self.operand(o)?)),
            Action::Set(_, SetValue::Plus(x, y)) => {
                let (x, y) = (self.operand(x)?, self.operand(y)?);
                self.value_types("+", [&x, &y], is_number)?;
                RAction::Set(target, RValue::Plus(x, y))
            }
            Action::Set(_, SetValue::Minus(x, y)) => {
                let (x, y) = (self.operand(x)?, self.operand(y)?);
                self.value_types("-", [&x, &y], is_number)?;
                RAction::Set(target, RValue::Minus(x, y))
            }
            Action::Remove(_) => RAction::Remove(target),
            Action::Add(_, v) => RAction::Add(target, self.action_value(v, "ADD")?),
            Action::Delete(_, v) => RAction::Delete(target, self.action_value(v, "DELETE")?),
        })
    }
}

/// `list_append` may only be the whole value of a SET action: DynamoDB refuses it as an operand of another function
/// or of `+` and `-` ("The function is not allowed to be used this way in an expression"). The expression parser
/// ([`expr::parse_update`]) accepts it there.
fn check_list_append_placement(actions: &[Action]) -> Result<(), EvalError> {
    fn has_list_append(o: &Operand) -> bool {
        match o {
            Operand::Path(_) | Operand::Value(_) => false,
            Operand::IfNotExists(_, o) => has_list_append(o),
            Operand::ListAppend(..) => true,
        }
    }
    for a in actions {
        let misplaced = match a {
            Action::Set(_, SetValue::Operand(Operand::ListAppend(x, y))) => has_list_append(x) || has_list_append(y),
            Action::Set(_, SetValue::Operand(o)) => has_list_append(o),
            Action::Set(_, SetValue::Plus(x, y) | SetValue::Minus(x, y)) => has_list_append(x) || has_list_append(y),
            _ => false,
        };
        if misplaced {
            return fail(
                EvalErrorKind::InvalidExpression,
                "Invalid UpdateExpression: The function is not allowed to be used this way in an expression; \
                 function: list_append",
            );
        }
    }
    Ok(())
}

fn path_text(p: &RPath) -> String {
    let mut s = String::new();
    for e in p {
        match e {
            Elem::Name(n) if s.is_empty() => s.push_str(n),
            Elem::Name(n) => {
                s.push('.');
                s.push_str(n);
            }
            Elem::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// The long type names DynamoDB's messages about ADD and DELETE operands use.
fn long_type_name(av: &AttributeValue) -> &'static str {
    match av {
        AttributeValue::S(_) => "STRING",
        AttributeValue::N(_) => "NUMBER",
        AttributeValue::B(_) => "BINARY",
        AttributeValue::Bool(_) => "BOOLEAN",
        AttributeValue::Null(_) => "NULL",
        AttributeValue::M(_) => "MAP",
        AttributeValue::L(_) => "LIST",
        AttributeValue::Ss(_) => "STRING_SET",
        AttributeValue::Ns(_) => "NUMBER_SET",
        AttributeValue::Bs(_) => "BINARY_SET",
        _ => "UNKNOWN",
    }
}

fn is_set(av: &AttributeValue) -> bool {
    matches!(av, AttributeValue::Ss(_) | AttributeValue::Ns(_) | AttributeValue::Bs(_))
}

/// DynamoDB refuses, before reading the item, an update whose SET and ADD actions alone write more than an item may
/// hold: the names of each path written (each distinct path once, each name once in it) and every use of a value.
fn check_update_size(actions: &[RAction], values: &HashMap<String, AttributeValue>) -> Result<(), EvalError> {
    fn value_uses<'a>(o: &'a ROperand, out: &mut Vec<&'a str>) {
        match o {
            ROperand::Path(_) => {}
            ROperand::Value(v) => out.push(v),
            ROperand::IfNotExists(_, o) => value_uses(o, out),
            ROperand::ListAppend(a, b) => {
                value_uses(a, out);
                value_uses(b, out);
            }
        }
    }
    let mut paths: Vec<&RPath> = Vec::new();
    let mut uses: Vec<&str> = Vec::new();
    for a in actions {
        match a {
            RAction::Set(p, v) => {
                paths.push(p);
                match v {
                    RValue::Operand(o) => value_uses(o, &mut uses),
                    RValue::Plus(x, y) | RValue::Minus(x, y) => {
                        value_uses(x, &mut uses);
                        value_uses(y, &mut uses);
                    }
                }
            }
            RAction::Add(p, v) => {
                paths.push(p);
                uses.push(v);
            }
            RAction::Remove(_) | RAction::Delete(..) => {}
        }
    }
    paths.dedup();
    let mut distinct: Vec<&RPath> = Vec::new();
    for p in paths {
        if !distinct.contains(&p) {
            distinct.push(p);
        }
    }
    let name_bytes: usize = distinct
        .iter()
        .map(|p| {
            let names: HashSet<&String> =
                p.iter().filter_map(|e| if let Elem::Name(n) = e { Some(n) } else { None }).collect();
            names.iter().map(|n| n.len()).sum::<usize>()
        })
        .sum();
    let size = name_bytes + uses.iter().map(|v| value_size(&values[*v])).sum::<usize>();
    if size > MAX_ITEM_BYTES {
        return fail(
            EvalErrorKind::ItemTooLarge,
            format!(
                "Item size to update has exceeded the maximum allowed size ({size} bytes of names and values written)"
            ),
        );
    }
    Ok(())
}

fn check_unused<'a>(
    refs: &expr::ExprRefs,
    names: &HashMap<String, String>,
    values: impl Iterator<Item = &'a String>,
) -> Result<(), EvalError> {
    let mut unused: Vec<&String> = names.keys().filter(|n| !refs.name_placeholders.contains(*n)).collect();
    if !unused.is_empty() {
        unused.sort();
        let keys = unused.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
        return fail(
            EvalErrorKind::UnusedPlaceholder,
            format!("Value provided in ExpressionAttributeNames unused in expressions: keys: {{{keys}}}"),
        );
    }
    let mut unused: Vec<&String> = values.filter(|v| !refs.value_placeholders.contains(*v)).collect();
    if !unused.is_empty() {
        unused.sort();
        let keys = unused.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
        return fail(
            EvalErrorKind::UnusedPlaceholder,
            format!("Value provided in ExpressionAttributeValues unused in expressions: keys: {{{keys}}}"),
        );
    }
    Ok(())
}

/// No action may write a key attribute of the table, and no path, written or read, may go into a key attribute of
/// the table or of an index (they are scalars).
fn check_keys_untouched(actions: &[RAction], keys: &KeyTypes) -> Result<(), EvalError> {
    let head = |p: &RPath| match p.first() {
        Some(Elem::Name(n)) => n.clone(),
        _ => String::new(),
    };
    for a in actions {
        let name = head(a.target());
        if keys.key.iter().any(|(k, _)| *k == name) {
            return fail(
                EvalErrorKind::KeyAttributeUpdate,
                format!(
                    "One or more parameter values were invalid: Cannot update attribute {name}. This attribute is part \
                     of the key"
                ),
            );
        }
    }
    let mut paths: Vec<&RPath> = Vec::new();
    fn operand_paths<'a>(o: &'a ROperand, out: &mut Vec<&'a RPath>) {
        match o {
            ROperand::Path(p) => out.push(p),
            ROperand::Value(_) => {}
            ROperand::IfNotExists(p, o) => {
                out.push(p);
                operand_paths(o, out);
            }
            ROperand::ListAppend(a, b) => {
                operand_paths(a, out);
                operand_paths(b, out);
            }
        }
    }
    for a in actions {
        paths.push(a.target());
        if let RAction::Set(_, v) = a {
            match v {
                RValue::Operand(o) => operand_paths(o, &mut paths),
                RValue::Plus(x, y) | RValue::Minus(x, y) => {
                    operand_paths(x, &mut paths);
                    operand_paths(y, &mut paths);
                }
            }
        }
    }
    for p in paths.into_iter().filter(|p| p.len() > 1) {
        let name = head(p);
        let what = if keys.key.iter().any(|(k, _)| *k == name) {
            "Key"
        } else if keys.index_keys.iter().any(|k| k.name == name) {
            "IndexKey"
        } else {
            continue;
        };
        return fail(
            EvalErrorKind::NestedKeyAccess,
            format!(
                "Key attributes must be scalars; list random access '[]' and map lookup '.' are not allowed: \
                 {what}: {name}"
            ),
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// The walk of the document.

/// The paths written, as a tree: each node's children are path elements, each leaf an action.
struct Tree {
    /// In the order DynamoDB Local inserts them, which is the reverse of the order the actions are written in.
    children: Vec<(Elem, Child)>,
}

enum Child {
    Leaf(usize),
    Node(Tree),
}

impl Tree {
    fn build(actions: &[RAction]) -> Tree {
        let mut root = Tree { children: Vec::new() };
        for (i, a) in actions.iter().enumerate().rev() {
            let mut node = &mut root;
            let path = a.target();
            for (depth, e) in path.iter().enumerate() {
                let last = depth + 1 == path.len();
                let at = match node.children.iter().position(|(x, _)| x == e) {
                    Some(at) => at,
                    None => {
                        let child = if last { Child::Leaf(i) } else { Child::Node(Tree { children: Vec::new() }) };
                        node.children.push((e.clone(), child));
                        node.children.len() - 1
                    }
                };
                match &mut node.children[at].1 {
                    Child::Node(t) => node = t,
                    Child::Leaf(_) => break,
                }
            }
        }
        root
    }
}

/// Java's `String.hashCode`, over UTF-16 code units.
fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The order in which a `java.util.HashMap` created empty iterates over these path elements, inserted in this order:
/// by bucket (the hash, spread, modulo a capacity that starts at 16 and doubles past three quarters full), then by
/// insertion. DynamoDB Local's path elements hash as Apache Commons' `HashCodeBuilder(8191, 127)` of the name or
/// index. DynamoDB Local walks the paths of an update in this order and reports the first error it meets.
fn java_order(elems: &[&Elem]) -> Vec<usize> {
    let mut capacity = 16usize;
    while elems.len() > capacity * 3 / 4 {
        capacity *= 2;
    }
    let bucket = |e: &Elem| {
        let h = match e {
            Elem::Name(n) => java_string_hash(n),
            Elem::Index(i) => *i as i32,
        };
        let h = 8191i32.wrapping_mul(127).wrapping_add(h) as u32;
        ((h ^ (h >> 16)) as usize) & (capacity - 1)
    };
    let mut order: Vec<usize> = (0..elems.len()).collect();
    order.sort_by_key(|&i| bucket(elems[i]));
    order
}

struct Ctx<'a> {
    before: &'a AttributeValue,
    values: &'a HashMap<String, AttributeValue>,
    actions: &'a [RAction],
}

fn err<T>(kind: EvalErrorKind, msg: &str) -> Result<T, EvalError> {
    fail(kind, msg)
}

fn child<'v>(doc: &'v AttributeValue, e: &Elem) -> Option<&'v AttributeValue> {
    match (doc, e) {
        (AttributeValue::M(m), Elem::Name(n)) => m.get(n),
        (AttributeValue::L(l), Elem::Index(i)) => l.get(*i),
        _ => None,
    }
}

impl Ctx<'_> {
    /// The document `doc` (a map or a list) with the actions below `tree` applied.
    fn apply(&self, tree: &Tree, doc: &AttributeValue) -> Result<AttributeValue, EvalError> {
        let is_map = match doc {
            AttributeValue::M(_) => true,
            AttributeValue::L(_) => false,
            _ => return err(EvalErrorKind::InvalidDocumentPath, PATH_INVALID),
        };
        let elems: Vec<&Elem> = tree.children.iter().map(|(e, _)| e).collect();
        let mut written: Vec<(&Elem, AttributeValue)> = Vec::new();
        for i in java_order(&elems) {
            let (e, sub) = &tree.children[i];
            if matches!(e, Elem::Name(_)) != is_map {
                return err(EvalErrorKind::InvalidDocumentPath, PATH_INVALID);
            }
            let existing = child(doc, e);
            let result = match (sub, existing) {
                (Child::Leaf(a), _) => self.leaf(&self.actions[*a], existing)?,
                (Child::Node(t), Some(x)) => Some(self.apply(t, x)?),
                (Child::Node(_), None) => return err(EvalErrorKind::InvalidDocumentPath, PATH_INVALID),
            };
            if let Some(v) = result {
                written.push((e, v));
            }
        }
        let touched = |e: &Elem| tree.children.iter().any(|(x, _)| x == e);
        Ok(match doc {
            AttributeValue::M(m) => {
                let mut out: Item = m
                    .iter()
                    .filter(|(k, _)| !touched(&Elem::Name((*k).clone())))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for (e, v) in written {
                    if let Elem::Name(n) = e {
                        out.insert(n.clone(), v);
                    }
                }
                AttributeValue::M(out)
            }
            AttributeValue::L(l) => {
                // Elements by index, the written ones past the end after the others: the list closes up around
                // removed elements and takes written ones in index order.
                let mut by_index: Vec<(usize, AttributeValue)> = l
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !touched(&Elem::Index(*i)))
                    .map(|(i, v)| (i, v.clone()))
                    .collect();
                for (e, v) in written {
                    if let Elem::Index(i) = e {
                        by_index.push((*i, v));
                    }
                }
                by_index.sort_by_key(|(i, _)| *i);
                AttributeValue::L(by_index.into_iter().map(|(_, v)| v).collect())
            }
            _ => unreachable!("checked above"),
        })
    }

    /// The value an action leaves at its path, where the item had `existing`; `None` removes it.
    fn leaf(&self, action: &RAction, existing: Option<&AttributeValue>) -> Result<Option<AttributeValue>, EvalError> {
        match action {
            RAction::Set(_, RValue::Operand(o)) => match self.operand(o)? {
                Some(v) => Ok(Some(v)),
                None => err(EvalErrorKind::MissingAttribute, ATTRIBUTE_MISSING),
            },
            RAction::Set(_, RValue::Plus(x, y)) => self.arithmetic(x, y, false).map(Some),
            RAction::Set(_, RValue::Minus(x, y)) => self.arithmetic(x, y, true).map(Some),
            RAction::Remove(_) => Ok(None),
            RAction::Add(_, v) => {
                let value = &self.values[v];
                let Some(existing) = existing else { return Ok(Some(value.clone())) };
                if type_letters(existing) != type_letters(value) {
                    return err(EvalErrorKind::OperandType, OPERAND_TYPE);
                }
                match (existing, value) {
                    (AttributeValue::N(a), AttributeValue::N(b)) => {
                        number_result(add_exact(&stored_number(a), &stored_number(b), false)).map(Some)
                    }
                    _ => Ok(Some(set_union(existing, value))),
                }
            }
            RAction::Delete(_, v) => {
                let value = &self.values[v];
                let Some(existing) = existing else { return Ok(None) };
                if type_letters(existing) != type_letters(value) {
                    return err(EvalErrorKind::OperandType, OPERAND_TYPE);
                }
                Ok(set_difference(existing, value))
            }
        }
    }

    fn arithmetic(&self, x: &ROperand, y: &ROperand, minus: bool) -> Result<AttributeValue, EvalError> {
        let a = self.operand(x)?;
        let b = self.operand(y)?;
        let mut numbers = Vec::with_capacity(2);
        for v in [a, b] {
            match v {
                None => return err(EvalErrorKind::MissingAttribute, ATTRIBUTE_MISSING),
                Some(AttributeValue::N(n)) => numbers.push(stored_number(&n)),
                Some(_) => return err(EvalErrorKind::OperandType, OPERAND_TYPE),
            }
        }
        number_result(add_exact(&numbers[0], &numbers[1], minus))
    }

    /// An operand's value on the item before the update; `None` for a path the item does not have.
    fn operand(&self, o: &ROperand) -> Result<Option<AttributeValue>, EvalError> {
        Ok(match o {
            ROperand::Path(p) => self.read(p).cloned(),
            ROperand::Value(v) => Some(self.values[v].clone()),
            ROperand::IfNotExists(p, o) => {
                let current = self.read(p).cloned();
                let Some(default) = self.operand(o)? else {
                    return err(EvalErrorKind::MissingAttribute, ATTRIBUTE_MISSING);
                };
                Some(current.unwrap_or(default))
            }
            ROperand::ListAppend(a, b) => {
                let a = self.operand(a)?;
                let b = self.operand(b)?;
                let mut out = Vec::new();
                for v in [a, b] {
                    match v {
                        None => return err(EvalErrorKind::MissingAttribute, ATTRIBUTE_MISSING),
                        Some(AttributeValue::L(l)) => out.extend(l),
                        Some(_) => return err(EvalErrorKind::OperandType, OPERAND_TYPE),
                    }
                }
                Some(AttributeValue::L(out))
            }
        })
    }

    /// The value at a path of the item before the update.
    fn read(&self, p: &RPath) -> Option<&AttributeValue> {
        p.iter().try_fold(self.before, |doc, e| child(doc, e))
    }
}

/// An arithmetic result as DynamoDB Local stores it: exact, in plain form, if it obeys the number rules.
fn number_result(d: BigDecimal) -> Result<AttributeValue, EvalError> {
    number_rule(&d).map_err(|(kind, m)| EvalError { kind, message: m.to_string() })?;
    Ok(AttributeValue::N(to_plain_string(&d)))
}

/// A number set's elements as DynamoDB Local writes a set an action changed: plain, without trailing zeros.
fn canonical_numbers(ns: &[BigDecimal]) -> AttributeValue {
    AttributeValue::Ns(ns.iter().map(|d| to_plain_string(&strip_trailing_zeros(d))).collect())
}

/// `ADD` of a set to a set of the same type. A set gaining no element is left as it was.
fn set_union(existing: &AttributeValue, add: &AttributeValue) -> AttributeValue {
    match (existing, add) {
        (AttributeValue::Ss(a), AttributeValue::Ss(b)) => {
            let new: Vec<&String> = b.iter().filter(|x| !a.contains(x)).collect();
            if new.is_empty() {
                return existing.clone();
            }
            AttributeValue::Ss(a.iter().chain(new).cloned().collect())
        }
        (AttributeValue::Bs(a), AttributeValue::Bs(b)) => {
            let new: Vec<&Blob> = b.iter().filter(|x| !a.iter().any(|y| y.as_ref() == x.as_ref())).collect();
            if new.is_empty() {
                return existing.clone();
            }
            AttributeValue::Bs(a.iter().chain(new).cloned().collect())
        }
        (AttributeValue::Ns(a), AttributeValue::Ns(b)) => {
            let mut all: Vec<BigDecimal> = a.iter().map(|n| stored_number(n)).collect();
            let before = all.len();
            for d in b.iter().map(|n| stored_number(n)) {
                if !all.contains(&d) {
                    all.push(d);
                }
            }
            if all.len() == before {
                return existing.clone();
            }
            canonical_numbers(&all)
        }
        _ => unreachable!("the types were checked equal and a set"),
    }
}

/// `DELETE` of a set from a set of the same type; `None` when nothing is left. A set losing no element is left as it
/// was.
fn set_difference(existing: &AttributeValue, remove: &AttributeValue) -> Option<AttributeValue> {
    let out = match (existing, remove) {
        (AttributeValue::Ss(a), AttributeValue::Ss(b)) => {
            let left: Vec<String> = a.iter().filter(|x| !b.contains(x)).cloned().collect();
            if left.len() == a.len() {
                return Some(existing.clone());
            }
            (!left.is_empty()).then_some(AttributeValue::Ss(left))
        }
        (AttributeValue::Bs(a), AttributeValue::Bs(b)) => {
            let left: Vec<Blob> = a.iter().filter(|x| !b.iter().any(|y| y.as_ref() == x.as_ref())).cloned().collect();
            if left.len() == a.len() {
                return Some(existing.clone());
            }
            (!left.is_empty()).then_some(AttributeValue::Bs(left))
        }
        (AttributeValue::Ns(a), AttributeValue::Ns(b)) => {
            let gone: Vec<BigDecimal> = b.iter().map(|n| stored_number(n)).collect();
            let left: Vec<BigDecimal> = a.iter().map(|n| stored_number(n)).filter(|d| !gone.contains(d)).collect();
            if left.len() == a.len() {
                return Some(existing.clone());
            }
            (!left.is_empty()).then(|| canonical_numbers(&left))
        }
        _ => unreachable!("the types were checked equal and a set"),
    };
    out
}

/// Every index key attribute the item has must be a scalar of its index's type, and not empty. DynamoDB Local checks
/// them in the order of `keys.index_keys`, each for emptiness first.
fn check_index_keys(item: &Item, keys: &KeyTypes) -> Result<(), EvalError> {
    for IndexKey { name, kind: t, .. } in &keys.index_keys {
        let Some(v) = item.get(name) else { continue };
        let empty = match v {
            AttributeValue::S(s) => s.is_empty().then_some("string"),
            AttributeValue::B(b) => b.as_ref().is_empty().then_some("binary"),
            _ => None,
        };
        if let Some(what) = empty {
            return fail(
                EvalErrorKind::IndexKeyEmpty,
                format!(
                    "One or more parameter values are not valid. The update expression attempted to update a secondary \
                     index key to a value that is not supported. The AttributeValue for a key attribute cannot contain \
                     an empty {what} value. IndexKey: {name}"
                ),
            );
        }
        let actual = type_letters(v);
        if !matches!(v, AttributeValue::S(_) | AttributeValue::N(_) | AttributeValue::B(_)) {
            return fail(
                EvalErrorKind::IndexKeyType,
                format!("Invalid attribute value type (index key {name}: {actual})"),
            );
        }
        if !actual.starts_with(*t) {
            return fail(
                EvalErrorKind::IndexKeyType,
                format!("One or more parameter values were invalid: Type mismatch for Index Key {name} Expected: {t} Actual: {actual}"),
            );
        }
    }
    for k in &keys.index_keys {
        let size = match item.get(&k.name) {
            Some(AttributeValue::S(s)) => s.len(),
            Some(AttributeValue::B(b)) => b.as_ref().len(),
            _ => continue,
        };
        if size > k.max_bytes() {
            return fail(
                EvalErrorKind::IndexKeySize,
                format!(
                    "One or more parameter values were invalid: Size limit exceeded for Index Key {} Actual Size: \
                     {size} bytes Max Size: {} bytes IndexName: {}",
                    k.name,
                    k.max_bytes(),
                    k.index
                ),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> AttributeValue {
        AttributeValue::N(s.into())
    }
    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }
    fn keys() -> KeyTypes {
        KeyTypes {
            key: vec![("pk".into(), 'S')],
            index_keys: vec![IndexKey::new("g", "gs", 'S', false), IndexKey::new("g", "gn", 'N', true)],
        }
    }
    fn key() -> Item {
        HashMap::from([("pk".to_string(), s("k"))])
    }
    fn item(attrs: &[(&str, AttributeValue)]) -> Item {
        let mut i = key();
        i.extend(attrs.iter().map(|(k, v)| (k.to_string(), v.clone())));
        i
    }
    fn run(before: Option<&Item>, e: &str, values: &[(&str, AttributeValue)]) -> Result<Item, EvalError> {
        let values: HashMap<String, AttributeValue> = values.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        apply_update(before, &key(), e, &HashMap::new(), &values, &keys())
    }
    fn kind(r: Result<Item, EvalError>) -> EvalErrorKind {
        r.expect_err("an error").kind
    }

    #[test]
    fn numbers_parse_and_print_as_java_does() {
        let plain = |x: &str| to_plain_string(&parse_number(x).unwrap());
        let java = |x: &str| to_java_string(&parse_number(x).unwrap());
        assert_eq!(plain("1.50"), "1.50");
        assert_eq!(plain("1E+2"), "100");
        assert_eq!(plain("0e500"), "0");
        assert_eq!(plain("0.000"), "0.000");
        assert_eq!(plain("-1.5e-3"), "-0.0015");
        assert_eq!(java("4e1"), "4E+1");
        assert_eq!(java("-0"), "0");
        assert_eq!(java("2.0"), "2.0");
        assert_eq!(java("1E-10"), "1E-10");
        assert_eq!(java("1.50e-3"), "0.00150");
        assert_eq!(java("0.0000001"), "1E-7");
        assert_eq!(java("123456789e-3"), "123456.789");
        assert_eq!(java("-1e7"), "-1E+7");
        assert_eq!(java("+5"), "5");
        for bad in
            ["", "+", "-", ".", "e5", "1e", "1e+", "1.2.3", " 5", "0x5", "Infinity", "NaN", "1_000", "1e2147483648"]
        {
            assert!(parse_number(bad).is_none(), "{bad:?}");
        }
        assert!(parse_number(".5").is_some() && parse_number("5.").is_some());
    }

    #[test]
    fn arithmetic_keeps_the_larger_scale() {
        let sum =
            |a: &str, b: &str| to_plain_string(&add_exact(&parse_number(a).unwrap(), &parse_number(b).unwrap(), false));
        assert_eq!(sum("1.50", "1.50"), "3.00");
        assert_eq!(sum("1E+5", "1E+5"), "200000");
        assert_eq!(sum("1E+5", "0"), "100000");
        assert_eq!(sum("9999999999999999999999999999999999999.5", "0.5"), "10000000000000000000000000000000000000.0");
        assert_eq!(
            to_plain_string(&add_exact(&parse_number("5").unwrap(), &parse_number("5.000").unwrap(), true)),
            "0.000"
        );
    }

    #[test]
    fn number_rules() {
        let rule = |x: &str| number_rule(&parse_number(x).unwrap()).err().map(|(k, _)| k);
        assert_eq!(rule("9.9999999999999999999999999999999999999E+125"), None);
        assert_eq!(rule("1E-130"), None);
        assert_eq!(rule("-1E-130"), None);
        assert_eq!(rule("0e-999"), None);
        assert_eq!(rule("12345678901234567890123456789012345678"), None);
        assert_eq!(rule("1234567890123456789012345678901234567800000"), None);
        assert_eq!(rule("100000000000000000000000000000000000000"), None);
        assert_eq!(rule("123456789012345678901234567890123456789"), Some(EvalErrorKind::NumberPrecision));
        assert_eq!(rule("1E+126"), Some(EvalErrorKind::NumberOverflow));
        assert_eq!(rule("-10e125"), Some(EvalErrorKind::NumberOverflow));
        assert_eq!(rule("1E-131"), Some(EvalErrorKind::NumberUnderflow));
        assert_eq!(rule("0.1e-130"), Some(EvalErrorKind::NumberUnderflow));
        let r = run(Some(&item(&[("a", n("1E+30"))])), "SET a = a + :v", &[(":v", n("1E-8"))]);
        assert_eq!(kind(r), EvalErrorKind::NumberPrecision);
        let r = run(Some(&item(&[("a", n("1E+30"))])), "SET a = a + :v", &[(":v", n("1E-7"))]).unwrap();
        assert_eq!(r["a"], n("1000000000000000000000000000000.0000001"));
        assert_eq!(
            kind(run(Some(&item(&[("a", n("9E+125"))])), "ADD a :v", &[(":v", n("1E+125"))])),
            EvalErrorKind::NumberOverflow
        );
        assert_eq!(
            kind(run(Some(&item(&[("a", n("1E-129"))])), "SET a = a - :v", &[(":v", n("9.9E-130"))])),
            EvalErrorKind::NumberUnderflow
        );
        assert_eq!(kind(run(None, "SET a = :v", &[(":v", n("1e126"))])), EvalErrorKind::InvalidValue);
    }

    #[test]
    fn number_sizes_follow_the_encoding() {
        assert_eq!(number_size("0"), 1);
        assert_eq!(number_size("1"), 2);
        assert_eq!(number_size("10"), 2);
        assert_eq!(number_size("100"), 2);
        assert_eq!(number_size("12"), 2);
        assert_eq!(number_size("123"), 3);
        assert_eq!(number_size("0.001"), 2);
        assert_eq!(number_size("-1"), 3);
        assert_eq!(number_size("12345678901234567890123456789012345678"), 20);
        assert_eq!(number_size("-12345678901234567890123456789012345678"), 21);
        assert_eq!(number_size("1234567890123456789012345678901234567.8"), 21);
        assert_eq!(number_size("-1234567890123456789012345678901234567.8"), 21);
    }

    #[test]
    fn set_add_remove_and_arithmetic() {
        let before = item(&[
            ("a", n("1.5")),
            ("l", AttributeValue::L(vec![n("0"), n("1"), n("2"), n("3")])),
            ("m", AttributeValue::M(HashMap::from([("x".into(), s("y"))]))),
        ]);
        let after = run(
            Some(&before),
            "SET a = a + :one, b = if_not_exists(b, :one), l[9] = :one, m.z = list_append(:l, :l) REMOVE l[0], l[2], m.x",
            &[(":one", n("1")), (":l", AttributeValue::L(vec![s("q")]))],
        )
        .unwrap();
        assert_eq!(after["a"], n("2.5"));
        assert_eq!(after["b"], n("1"));
        assert_eq!(after["l"], AttributeValue::L(vec![n("1"), n("3"), n("1")]));
        assert_eq!(
            after["m"],
            AttributeValue::M(HashMap::from([("z".into(), AttributeValue::L(vec![s("q"), s("q")]))]))
        );
    }

    #[test]
    fn sets_follow_dynamodb_local() {
        let ns = |v: &[&str]| AttributeValue::Ns(v.iter().map(|x| x.to_string()).collect());
        let sorted = |v: &AttributeValue| {
            let mut x = v.as_ns().unwrap().clone();
            x.sort();
            x
        };
        let before = item(&[("a", ns(&["2.50", "7", "1E+1"]))]);
        let r = run(Some(&before), "ADD a :v", &[(":v", ns(&["8.0"]))]).unwrap();
        assert_eq!(sorted(&r["a"]), ["10", "2.5", "7", "8"]);
        let r = run(Some(&before), "ADD a :v", &[(":v", ns(&["7.0"]))]).unwrap();
        assert_eq!(r["a"], before["a"]);
        let r = run(Some(&before), "DELETE a :v", &[(":v", ns(&["7.0"]))]).unwrap();
        assert_eq!(sorted(&r["a"]), ["10", "2.5"]);
        let r = run(Some(&before), "DELETE a :v", &[(":v", ns(&["7", "2.5", "10"]))]).unwrap();
        assert!(!r.contains_key("a"));
        let r = run(None, "ADD a :v", &[(":v", ns(&["2.0", "4e1"]))]).unwrap();
        assert_eq!(sorted(&r["a"]), ["2.0", "4E+1"]);
        assert_eq!(kind(run(None, "SET a = :v", &[(":v", ns(&["1", "1.0"]))])), EvalErrorKind::InvalidValue);
        assert_eq!(
            kind(run(Some(&before), "ADD a :v", &[(":v", AttributeValue::Ss(vec!["x".into()]))])),
            EvalErrorKind::OperandType
        );
        assert_eq!(kind(run(None, "DELETE a :v", &[(":v", n("1"))])), EvalErrorKind::IncorrectOperandType);
        assert_eq!(kind(run(None, "ADD a :v", &[(":v", s("x"))])), EvalErrorKind::IncorrectOperandType);
    }

    #[test]
    fn paths_keys_and_indexes() {
        let before = item(&[("s", s("x")), ("m", AttributeValue::M(HashMap::new()))]);
        let r = |e: &str, v: &[(&str, AttributeValue)]| kind(run(Some(&before), e, v));
        assert_eq!(r("SET s.x = :v", &[(":v", n("1"))]), EvalErrorKind::InvalidDocumentPath);
        assert_eq!(r("SET q.x = :v", &[(":v", n("1"))]), EvalErrorKind::InvalidDocumentPath);
        assert_eq!(r("SET m[0] = :v", &[(":v", n("1"))]), EvalErrorKind::InvalidDocumentPath);
        assert_eq!(r("REMOVE q.x", &[]), EvalErrorKind::InvalidDocumentPath);
        assert_eq!(r("SET a = q", &[]), EvalErrorKind::MissingAttribute);
        assert_eq!(r("SET a = s + :v", &[(":v", n("1"))]), EvalErrorKind::OperandType);
        assert_eq!(r("SET a = :v", &[(":v", n("1")), (":w", n("1"))]), EvalErrorKind::UnusedPlaceholder);
        assert_eq!(r("SET pk = :v", &[(":v", s("1"))]), EvalErrorKind::KeyAttributeUpdate);
        assert_eq!(r("SET a = pk.x", &[]), EvalErrorKind::NestedKeyAccess);
        assert_eq!(r("SET gs = :v", &[(":v", n("1"))]), EvalErrorKind::IndexKeyType);
        assert_eq!(r("SET gs = :v", &[(":v", s(""))]), EvalErrorKind::IndexKeyEmpty);
        assert_eq!(r("SET big = :v", &[(":v", s(&"x".repeat(MAX_ITEM_BYTES)))]), EvalErrorKind::ItemTooLarge);
        assert_eq!(r("SET big = :v", &[(":v", s(&"x".repeat(MAX_ITEM_BYTES - 8)))]), EvalErrorKind::ItemTooLarge);
        assert!(run(Some(&before), "REMOVE m.q, s", &[]).is_ok());
    }

    #[test]
    fn errors_come_in_dynamodb_locals_order() {
        // "y" hashes to an earlier bucket than "x"; "aa" and "bb" share one, where the later action comes first.
        let r = |e: &str| kind(run(None, e, &[(":v", n("1"))]));
        assert_eq!(r("SET x = absent, y.r = :v"), EvalErrorKind::InvalidDocumentPath);
        assert_eq!(r("SET y = absent, x.r = :v"), EvalErrorKind::MissingAttribute);
        assert_eq!(r("SET aa = absent, bb.r = :v"), EvalErrorKind::InvalidDocumentPath);
        assert_eq!(r("SET aa.r = :v, bb = absent"), EvalErrorKind::MissingAttribute);
    }
}

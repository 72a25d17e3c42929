//! DynamoDB JSON (`{"S": "..."}`, `{"N": "1"}`, ...) to and from the SDK's `AttributeValue`, with DynamoDB's
//! validation rules and its item-size arithmetic.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine as _;
use serde_json::{Map, Value};

/// An item or key as the SDK holds it.
pub type Item = HashMap<String, AttributeValue>;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Parses one DynamoDB JSON value. The error says what is wrong in words a caller can act on.
pub fn to_av(v: &Value) -> Result<AttributeValue, String> {
    let obj =
        v.as_object().ok_or_else(|| format!("expected a DynamoDB JSON value like {{\"S\": \"...\"}}, got {v}"))?;
    if obj.len() != 1 {
        return Err(format!("a DynamoDB JSON value has exactly one type key, got {}", obj.len()));
    }
    let (t, x) = obj.iter().next().expect("one entry");
    let want_str = |x: &Value| x.as_str().map(str::to_owned).ok_or_else(|| format!("{t} value must be a string"));
    let want_arr = |x: &Value| x.as_array().cloned().ok_or_else(|| format!("{t} value must be an array"));
    Ok(match t.as_str() {
        "S" => AttributeValue::S(want_str(x)?),
        "N" => AttributeValue::N(check_number(&want_str(x)?)?),
        "B" => AttributeValue::B(Blob::new(decode_b64(&want_str(x)?)?)),
        "BOOL" => AttributeValue::Bool(x.as_bool().ok_or("BOOL value must be true or false")?),
        "NULL" => {
            if x.as_bool() != Some(true) {
                return Err("NULL value must be true".into());
            }
            AttributeValue::Null(true)
        }
        "M" => {
            let m = x.as_object().ok_or("M value must be an object")?;
            AttributeValue::M(m.iter().map(|(k, v)| Ok((k.clone(), to_av(v)?))).collect::<Result<_, String>>()?)
        }
        "L" => AttributeValue::L(want_arr(x)?.iter().map(to_av).collect::<Result<_, _>>()?),
        "SS" | "NS" | "BS" => {
            let arr = want_arr(x)?;
            if arr.is_empty() {
                return Err(format!("{t} value must not be empty"));
            }
            let strs: Vec<String> = arr.iter().map(want_str).collect::<Result<_, _>>()?;
            let mut seen = std::collections::HashSet::new();
            for s in &strs {
                // Numbers are the same element when their values are equal (1, 1.0 and 01).
                let element = if t == "NS" { canonical_number(s) } else { s.clone() };
                if !seen.insert(element) {
                    return Err(format!(
                        "{t} value has a duplicate element {s:?}: Input collection contains duplicates"
                    ));
                }
            }
            match t.as_str() {
                "SS" => AttributeValue::Ss(strs),
                "NS" => AttributeValue::Ns(strs.iter().map(|s| check_number(s)).collect::<Result<_, _>>()?),
                _ => AttributeValue::Bs(strs.iter().map(|s| decode_b64(s).map(Blob::new)).collect::<Result<_, _>>()?),
            }
        }
        other => {
            return Err(format!("unknown DynamoDB type {other:?} (expected S, N, B, BOOL, NULL, M, L, SS, NS or BS)"))
        }
    })
}

/// The rules [`to_av`] applies to DynamoDB JSON, applied to a value the SDK already holds: numbers DynamoDB takes,
/// sets neither empty nor with a duplicate element, `NULL` true, and no type the SDK does not know. The error is
/// [`to_av`]'s for the same value.
pub fn check_value(v: &AttributeValue) -> Result<(), String> {
    fn unique<'a>(
        t: &str,
        elements: impl ExactSizeIterator<Item = String> + 'a,
        shown: &[String],
    ) -> Result<(), String> {
        if elements.len() == 0 {
            return Err(format!("{t} value must not be empty"));
        }
        let mut seen = std::collections::HashSet::new();
        for (element, s) in elements.zip(shown) {
            if !seen.insert(element) {
                return Err(format!("{t} value has a duplicate element {s:?}: Input collection contains duplicates"));
            }
        }
        Ok(())
    }
    match v {
        AttributeValue::S(_) | AttributeValue::B(_) | AttributeValue::Bool(_) => Ok(()),
        AttributeValue::N(n) => check_number(n).map(|_| ()),
        AttributeValue::Null(true) => Ok(()),
        AttributeValue::Null(false) => Err("NULL value must be true".into()),
        AttributeValue::M(m) => m.values().try_for_each(check_value),
        AttributeValue::L(l) => l.iter().try_for_each(check_value),
        AttributeValue::Ss(ss) => unique("SS", ss.iter().cloned(), ss),
        AttributeValue::Ns(ns) => {
            unique("NS", ns.iter().map(|n| canonical_number(n)), ns)?;
            ns.iter().try_for_each(|n| check_number(n).map(|_| ()))
        }
        AttributeValue::Bs(bs) => {
            let shown: Vec<String> = bs.iter().map(|b| B64.encode(b.as_ref())).collect();
            unique("BS", shown.clone().into_iter(), &shown)
        }
        _ => Err("unknown DynamoDB type (expected S, N, B, BOOL, NULL, M, L, SS, NS or BS)".into()),
    }
}

/// [`check_value`] for each attribute of an item the SDK holds, as [`item_from_json`] checks one in DynamoDB JSON.
pub fn check_item(item: &Item) -> Result<(), String> {
    let mut sorted: Vec<(&String, &AttributeValue)> = item.iter().collect();
    sorted.sort_by_key(|(k, _)| *k);
    sorted.into_iter().try_for_each(|(k, v)| check_value(v).map_err(|e| format!("attribute {k:?}: {e}")))
}

/// A number's value as one text whatever way it was written (`1`, `1.0`, `01` and `1E0` alike); the text itself
/// when it is not a number.
pub fn canonical_number(n: &str) -> String {
    match n.trim().parse::<bigdecimal::BigDecimal>() {
        Ok(d) => d.normalized().to_string(),
        Err(_) => n.to_string(),
    }
}

fn decode_b64(s: &str) -> Result<Vec<u8>, String> {
    B64.decode(s).map_err(|e| format!("B value is not valid base64: {e}"))
}

/// DynamoDB numbers: up to 38 significant digits, magnitude between 1E-130 and 1E+126.
fn check_number(s: &str) -> Result<String, String> {
    let bad = || format!("{s:?} is not a valid DynamoDB number");
    // DynamoDB takes no spaces around a number (" 1" cannot be converted into a number).
    let t = s;
    let body = t.strip_prefix('-').or_else(|| t.strip_prefix('+')).unwrap_or(t);
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], body[i + 1..].parse::<i64>().map_err(|_| bad())?),
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let digits: String = format!("{int}{frac}");
    let trimmed = digits.trim_start_matches('0');
    if trimmed.is_empty() {
        return Ok(t.to_string());
    }
    let significant = trimmed.trim_end_matches('0');
    if significant.len() > 38 {
        return Err(format!("{s:?} has more than 38 significant digits"));
    }
    // Decimal exponent of the leading significant digit.
    let lead = int.len() as i64 - (digits.len() - trimmed.len()) as i64 - 1 + exp;
    if !(-130..126).contains(&lead) {
        return Err(format!("{s:?} is out of DynamoDB's number range"));
    }
    Ok(t.to_string())
}

/// Renders a value as DynamoDB JSON.
pub fn to_json(av: &AttributeValue) -> Value {
    let one = |k: &str, v: Value| Value::Object(Map::from_iter([(k.to_string(), v)]));
    match av {
        AttributeValue::S(s) => one("S", Value::String(s.clone())),
        AttributeValue::N(n) => one("N", Value::String(n.clone())),
        AttributeValue::B(b) => one("B", Value::String(B64.encode(b.as_ref()))),
        AttributeValue::Bool(b) => one("BOOL", Value::Bool(*b)),
        AttributeValue::Null(_) => one("NULL", Value::Bool(true)),
        AttributeValue::M(m) => one("M", item_to_json(m)),
        AttributeValue::L(l) => one("L", Value::Array(l.iter().map(to_json).collect())),
        AttributeValue::Ss(v) => one("SS", Value::Array(v.iter().cloned().map(Value::String).collect())),
        AttributeValue::Ns(v) => one("NS", Value::Array(v.iter().cloned().map(Value::String).collect())),
        AttributeValue::Bs(v) => {
            one("BS", Value::Array(v.iter().map(|b| Value::String(B64.encode(b.as_ref()))).collect()))
        }
        _ => Value::Null,
    }
}

/// Parses a map of attribute name to DynamoDB JSON value (an `Item`, a `Key`, `ExpressionAttributeValues`).
pub fn item_from_json(v: &Value) -> Result<Item, String> {
    let obj = v.as_object().ok_or_else(|| "expected an object of attribute name to DynamoDB JSON value".to_string())?;
    obj.iter().map(|(k, v)| to_av(v).map(|av| (k.clone(), av)).map_err(|e| format!("attribute {k:?}: {e}"))).collect()
}

/// DynamoDB's rules for the attributes of an item: names and map keys 1 to 65,535 bytes, values nested at most 31
/// lists and maps deep.
pub fn check_attributes(item: &Item) -> Result<(), String> {
    check_map_keys(item)?;
    let mut sorted: Vec<(&String, &AttributeValue)> = item.iter().collect();
    sorted.sort_by_key(|(k, _)| *k);
    for (k, v) in sorted {
        check_name(k).map_err(|e| format!("attribute {}: {e}", short(k)))?;
        let levels = 1 + nesting(v);
        if levels > MAX_NESTING_LEVELS {
            return Err(format!(
                "attribute {}: Nesting Levels have exceeded supported limits: {levels} levels, at most \
                 {MAX_NESTING_LEVELS} counting the item",
                short(k)
            ));
        }
    }
    Ok(())
}

/// Every map key in the values of `item` (an item, or ExpressionAttributeValues) is 1 to 65,535 bytes.
pub fn check_map_keys(item: &Item) -> Result<(), String> {
    fn keys(v: &AttributeValue) -> Result<(), String> {
        match v {
            AttributeValue::M(m) => m.iter().try_for_each(|(k, v)| check_name(k).and_then(|_| keys(v))),
            AttributeValue::L(l) => l.iter().try_for_each(keys),
            _ => Ok(()),
        }
    }
    let mut sorted: Vec<(&String, &AttributeValue)> = item.iter().collect();
    sorted.sort_by_key(|(k, _)| *k);
    sorted.into_iter().try_for_each(|(k, v)| keys(v).map_err(|e| format!("{}: {e}", short(k))))
}

/// Deepest nesting of an item: an item is the first level, and each list or map a value holds one more.
pub const MAX_NESTING_LEVELS: usize = 32;
/// Longest attribute name, in bytes: names are below 64 KB.
pub const MAX_NAME_BYTES: usize = 65_535;

/// Lists and maps nested in `v`, counting `v` itself: 0 for a scalar or set, 1 for a list of scalars or an empty
/// map.
pub fn nesting(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::L(l) => 1 + l.iter().map(nesting).max().unwrap_or(0),
        AttributeValue::M(m) => 1 + m.values().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

/// An attribute name (or map key) as DynamoDB takes it: 1 to 65,535 bytes.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("Empty attribute name".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "Attribute name is too large, must be less than 65536 bytes ({} bytes: {}...)",
            name.len(),
            short(name)
        ));
    }
    Ok(())
}

/// The start of a long name, for messages.
fn short(name: &str) -> String {
    name.chars().take(40).collect()
}

/// `{"S": v}`.
pub fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}
/// `{"N": v}`.
pub fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Renders an item as DynamoDB JSON, with its attributes in name order so that output is stable.
pub fn item_to_json(item: &Item) -> Value {
    let sorted: BTreeMap<&String, &AttributeValue> = item.iter().collect();
    Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
}

/// An attribute value's size by DynamoDB's billing rules (the same rules decide the 400 KB item limit).
pub fn value_size(av: &AttributeValue) -> usize {
    value_size_with(av, number_size)
}

/// An attribute value's size by DynamoDB's rules, with `number_size` giving each number's.
pub fn value_size_with(av: &AttributeValue, number_size: fn(&str) -> usize) -> usize {
    let size = |v: &AttributeValue| value_size_with(v, number_size);
    match av {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::M(m) => 3 + m.iter().map(|(k, v)| k.len() + size(v) + 1).sum::<usize>(),
        AttributeValue::L(l) => 3 + l.iter().map(|v| size(v) + 1).sum::<usize>(),
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        _ => 0,
    }
}

fn number_size(n: &str) -> usize {
    let digits = n.bytes().take_while(|b| *b != b'e' && *b != b'E').filter(u8::is_ascii_digit).count();
    digits.div_ceil(2) + 1
}

/// An item's size in bytes by DynamoDB's rules: attribute names plus values.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_every_type() {
        let v = json!({"s": {"S": "x"}, "n": {"N": "-1.5e3"}, "b": {"B": "AAE="}, "t": {"BOOL": true}, "z": {"NULL": true},
            "m": {"M": {"a": {"L": [{"N": "1"}, {"S": "y"}]}}}, "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2"]},
            "bs": {"BS": ["AA=="]}});
        let item = item_from_json(&v).unwrap();
        assert_eq!(item_to_json(&item), v);
    }

    #[test]
    fn rejects_malformed_values() {
        for bad in [
            json!({"S": 1}),
            json!({"N": "abc"}),
            json!({"N": "1.2.3"}),
            json!({"N": ""}),
            json!({"N": "123456789012345678901234567890123456789"}),
            json!({"N": "1e200"}),
            json!({"B": "%%%"}),
            json!({"NULL": false}),
            json!({"SS": []}),
            json!({"SS": ["a", "a"]}),
            json!({"X": "1"}),
            json!({"S": "a", "N": "1"}),
            json!("plain"),
        ] {
            assert!(to_av(&bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn accepts_edge_numbers() {
        for ok in [
            "0",
            "-0.000",
            "1E+125",
            "9.9999999999999999999999999999999999999E+125",
            "1e-130",
            "12345678901234567890123456789012345678",
        ] {
            assert!(check_number(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn sizes_follow_dynamodb_rules() {
        let item = item_from_json(&json!({"pk": {"S": "abc"}, "n": {"N": "1234"}, "f": {"BOOL": true}})).unwrap();
        assert_eq!(item_size(&item), (2 + 3) + (1 + 3) + (1 + 1));
    }

    #[test]
    fn one_number_written_two_ways_is_one_set_element() {
        for set in [json!(["1", "1.0"]), json!(["1", "01"]), json!(["1E1", "10"])] {
            let e = item_from_json(&json!({"pk": {"S": "k"}, "s": {"NS": set}})).unwrap_err();
            assert!(e.contains("duplicates"), "{e}");
        }
        assert!(item_from_json(&json!({"pk": {"S": "k"}, "s": {"NS": ["1", "10"]}})).is_ok());
    }

    #[test]
    fn names_are_1_to_65535_bytes_and_values_nest_31_deep() {
        let check = |v: Value| check_attributes(&item_from_json(&v).unwrap());
        let deep = |levels: usize| (0..levels).fold(json!({"S": "x"}), |v, _| json!({"M": {"a": v}}));
        assert!(check(json!({"d": deep(31)})).is_ok());
        let e = check(json!({"d": deep(32)})).unwrap_err();
        assert!(e.contains("Nesting Levels have exceeded supported limits"), "{e}");
        let e = check(json!({"": {"S": "x"}})).unwrap_err();
        assert!(e.contains("Empty attribute name"), "{e}");
        let e = check(json!({"m": {"M": {"": {"S": "x"}}}})).unwrap_err();
        assert!(e.contains("Empty attribute name"), "{e}");
        assert!(check(json!({"n".repeat(65_535): {"S": "x"}})).is_ok());
        let e = check(json!({"n".repeat(65_536): {"S": "x"}})).unwrap_err();
        assert!(e.contains("Attribute name is too large"), "{e}");
    }
}

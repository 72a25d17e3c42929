//! The request's hash: what tells a retry of a request (the same `ClientRequestToken`, the same request) from a
//! reuse of its token for another. Computed from the typed request, so that the same request hashes the same
//! whichever edge it came through (JSON or the SDK's values), and a number, a set or a map keeps the form it was
//! written in.

use aws_sdk_dynamodb::types::AttributeValue;
use sha2::{Digest, Sha256};

use super::{Options, RawAction};
use crate::model::value::Item;

/// Bytes fed to the hash, each part tagged and length-prefixed so that no two requests feed the same bytes.
struct Feed(Sha256);

impl Feed {
    fn tag(&mut self, t: u8) {
        self.0.update([t]);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.0.update((b.len() as u64).to_be_bytes());
        self.0.update(b);
    }

    fn opt(&mut self, s: Option<&str>) {
        match s {
            Some(s) => {
                self.tag(1);
                self.bytes(s.as_bytes());
            }
            None => self.tag(0),
        }
    }

    fn number(&mut self, n: u64) {
        self.0.update(n.to_be_bytes());
    }

    fn item(&mut self, item: &Item) {
        let mut keys: Vec<&String> = item.keys().collect();
        keys.sort();
        self.number(keys.len() as u64);
        for k in keys {
            self.bytes(k.as_bytes());
            self.value(&item[k]);
        }
    }

    fn value(&mut self, v: &AttributeValue) {
        match v {
            AttributeValue::S(s) => {
                self.tag(b'S');
                self.bytes(s.as_bytes());
            }
            AttributeValue::N(n) => {
                self.tag(b'N');
                self.bytes(n.as_bytes());
            }
            AttributeValue::B(b) => {
                self.tag(b'B');
                self.bytes(b.as_ref());
            }
            AttributeValue::Bool(b) => self.tag(if *b { b't' } else { b'f' }),
            AttributeValue::Null(_) => self.tag(b'0'),
            AttributeValue::M(m) => {
                self.tag(b'M');
                self.item(m);
            }
            AttributeValue::L(l) => {
                self.tag(b'L');
                self.number(l.len() as u64);
                l.iter().for_each(|v| self.value(v));
            }
            AttributeValue::Ss(ss) => self.strings(b's', ss),
            AttributeValue::Ns(ns) => self.strings(b'n', ns),
            AttributeValue::Bs(bs) => {
                self.tag(b'b');
                self.number(bs.len() as u64);
                bs.iter().for_each(|b| self.bytes(b.as_ref()));
            }
            _ => self.tag(b'?'),
        }
    }

    fn strings(&mut self, tag: u8, ss: &[String]) {
        self.tag(tag);
        self.number(ss.len() as u64);
        ss.iter().for_each(|s| self.bytes(s.as_bytes()));
    }
}

/// The hash of a typed request, in hex.
pub(super) fn request_hash(
    items: &[RawAction],
    token: Option<&str>,
    parent: Option<&(String, Item)>,
    options: &Options,
) -> String {
    let mut f = Feed(Sha256::new());
    f.bytes(b"dynamo-saga request 2");
    f.number(items.len() as u64);
    for a in items {
        f.bytes(a.op.as_str().as_bytes());
        f.bytes(a.table.as_bytes());
        f.item(&a.key_or_item);
        f.opt(a.update.as_deref());
        f.opt(a.condition.as_deref());
        let mut names: Vec<(&String, &String)> = a.names.iter().collect();
        names.sort();
        f.number(names.len() as u64);
        for (k, v) in names {
            f.bytes(k.as_bytes());
            f.bytes(v.as_bytes());
        }
        f.item(&a.values);
        f.tag(u8::from(a.return_old));
        match &a.tombstone {
            Some(t) => {
                f.tag(1);
                f.item(&t.attributes);
                f.bytes(t.ttl_attribute.as_bytes());
                f.number(t.ttl_seconds);
            }
            None => f.tag(0),
        }
    }
    f.opt(token);
    match parent {
        Some((table, key)) => {
            f.tag(1);
            f.bytes(table.as_bytes());
            f.item(key);
        }
        None => f.tag(0),
    }
    match options.lock_wait_seconds {
        Some(w) => {
            f.tag(1);
            f.number(w);
        }
        None => f.tag(0),
    }
    f.number(options.deadline_seconds);
    f.0.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

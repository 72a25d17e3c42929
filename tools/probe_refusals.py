#!/usr/bin/env python3
"""Probes a DynamoDB endpoint from outside for the writes it refuses: the list in docs/refusals.md.

Each case is one write, sent twice: as the single-item call (PutItem, UpdateItem, DeleteItem; a ConditionCheck has
none) and as the second action of a TransactWriteItems call whose first action is an ordinary Put. Refused means a
ValidationException (or, on the single call, any error that writes nothing) from the single call, and from the
transaction either a whole-call ValidationException or a TransactionCanceledException whose reason for the probed
action is ValidationError. The accepted edges (at the limit) are cases too.

DynamoDB Local is a black box here: the script only sends requests and reads answers. Where Local is known to answer
otherwise than DynamoDB documents, a case names Local's answer too, and its line says `local-differs` rather than a
mismatch.

  DYNAMODB_ENDPOINT=http://127.0.0.1:PORT .local/venv/bin/python tools/probe_refusals.py [--only RULE,...] [--json FILE]

Needs boto3 (the venv tools/check-template.sh makes has it; any Python with boto3 will do). Start DynamoDB Local with
`tools/dynamodb-local.sh start PORT` (a free port from tools/free-port.sh) and stop it after. Region from AWS_REGION
(default us-east-1); credentials from the environment, else dummy ones (enough for DynamoDB Local). Creates its
tables under a unique prefix and deletes them; takes about two seconds against DynamoDB Local. Prints one line per
case, `rule/case  expected=...  single=...  tx=...  match=yes|NO|local-differs`, and exits 1 when a case does not match.
"""
import argparse
import json
import os
import sys
import time
import uuid

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

KB = 1024
MAX_ITEM = 400 * KB


def S(x):
    return {"S": x}


def N(x):
    return {"N": x}


def deep(containers, leaf=None, kind="M"):
    """A value of `containers` nested maps (or lists) around `leaf` (a string by default)."""
    v = leaf if leaf is not None else S("x")
    for _ in range(containers):
        v = {"M": {"a": v}} if kind == "M" else {"L": [v]}
    return v


class Probe:
    def __init__(self, endpoint):
        self.c = boto3.client(
            "dynamodb",
            region_name=os.environ.get("AWS_REGION", "us-east-1"),
            endpoint_url=endpoint,
            aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "probe"),
            aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "probe"),
            aws_session_token=os.environ.get("AWS_SESSION_TOKEN"),
            config=Config(parameter_validation=False, retries={"max_attempts": 1}, read_timeout=30),
        )
        self.prefix = "probe-refusals-" + uuid.uuid4().hex[:8]
        self.t = self.prefix + "-main"
        self.tn = self.prefix + "-num"
        self.n = 0

    # ---- tables -------------------------------------------------------------------------------------------------

    def create(self):
        attrs = [("pk", "S"), ("sk", "S"), ("gpk", "S"), ("gsk", "S"), ("gn", "N"), ("lsk", "S")]
        self.c.create_table(
            TableName=self.t,
            AttributeDefinitions=[{"AttributeName": a, "AttributeType": t} for a, t in attrs],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            GlobalSecondaryIndexes=[
                {"IndexName": "gsi1", "Projection": {"ProjectionType": "ALL"},
                 "KeySchema": [{"AttributeName": "gpk", "KeyType": "HASH"}, {"AttributeName": "gsk", "KeyType": "RANGE"}]},
                {"IndexName": "gsi2", "Projection": {"ProjectionType": "KEYS_ONLY"},
                 "KeySchema": [{"AttributeName": "gn", "KeyType": "HASH"}]},
            ],
            LocalSecondaryIndexes=[
                {"IndexName": "lsi1", "Projection": {"ProjectionType": "ALL"},
                 "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "lsk", "KeyType": "RANGE"}]},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        self.c.create_table(
            TableName=self.tn,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "N"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for t in (self.t, self.tn):
            for _ in range(600):
                if self.c.describe_table(TableName=t)["Table"]["TableStatus"] == "ACTIVE":
                    break
                time.sleep(0.5)
            else:
                raise SystemExit(f"table {t} did not become ACTIVE")

    def drop(self):
        for t in (self.t, self.tn):
            try:
                self.c.delete_table(TableName=t)
            except ClientError:
                pass

    # ---- requests -----------------------------------------------------------------------------------------------

    def key(self):
        """A fresh key; every key has the same size (pk k000001, sk s), which item-size cases count on."""
        self.n += 1
        return {"pk": S(f"k{self.n:06d}"), "sk": S("s")}

    def ask(self, fn, **kw):
        try:
            fn(**kw)
            return ("accepted", None, None)
        except ClientError as e:
            err = e.response.get("Error", {})
            reasons = [(r.get("Code"), r.get("Message")) for r in e.response.get("CancellationReasons") or []]
            return (err.get("Code", "?"), err.get("Message", ""), reasons)

    def benign(self):
        return {"Put": {"TableName": self.t, "Item": dict(self.key(), x=S("ok"))}}

    def run_case(self, case):
        """Returns (single, tx): each (code, message, reasons)."""
        op, body, seed = case["op"], case.get("body", {}), case.get("seed")
        if op == "Tx":
            return None, self.ask(self.c.transact_write_items, TransactItems=body(self))
        keys = []
        for _ in range(2):
            k = case["key"](self) if "key" in case else self.key()
            if seed is not None:
                self.c.put_item(TableName=self.t, Item=dict(k, **seed))
            keys.append(k)
        action = lambda k: dict(body, TableName=self.t, **({"Item": dict(k, **case["item"])} if op == "Put" else {"Key": k}))
        single = None
        if op == "Put":
            single = self.ask(self.c.put_item, **action(keys[0]))
        elif op == "Update":
            single = self.ask(self.c.update_item, **action(keys[0]))
        elif op == "Delete":
            single = self.ask(self.c.delete_item, **action(keys[0]))
        tx = self.ask(self.c.transact_write_items, TransactItems=[self.benign(), {op: action(keys[1])}])
        return single, tx


def refused_single(r):
    return r[0] != "accepted"


def refused_tx(r, at=1):
    code, _, reasons = r
    if code == "ValidationException":
        return True
    if code == "TransactionCanceledException":
        # DynamoDB Local sometimes lists one reason only (an update of a key attribute): take it as the action's.
        mine = reasons[at] if len(reasons) > at else reasons[0] if len(reasons) == 1 else (None,)
        return mine[0] == "ValidationError"
    return False


def verdict(expect, single, tx):
    """Whether the answers are `expect` ('accepted' or 'refused')."""
    if expect == "accepted":
        return (single is None or single[0] == "accepted") and tx[0] == "accepted"
    return (single is None or refused_single(single)) and refused_tx(tx)


def show(r):
    if r is None:
        return "-"
    code, msg, reasons = r
    if code == "accepted":
        return "accepted"
    if code == "TransactionCanceledException":
        rs = ", ".join(f"{c}" + (f": {m}" if m else "") for c, m in reasons)
        return f"TransactionCanceledException [{rs}]"
    return f"{code}: {msg}"


# ---- the cases --------------------------------------------------------------------------------------------------
# Each: rule, case, op (Put/Update/Delete/ConditionCheck/Tx), expect ('accepted'/'refused', as DynamoDB documents it),
# optionally local (DynamoDB Local's answer where it differs), item (Put), body (the rest of the action), seed (an item
# written at the key first: the case needs the item).

def upd(expr, values=None, names=None, **rest):
    b = {"UpdateExpression": expr, **rest}
    if values:
        b["ExpressionAttributeValues"] = values
    if names:
        b["ExpressionAttributeNames"] = names
    return b


def fixed_key(pk=None, sk=None):
    """A fresh key with its partition key or sort key replaced (the other part keeps the key fresh)."""
    def make(p):
        k = p.key()
        if pk is not None:
            k["pk"], k["sk"] = S(pk), S(f"s{p.n}")
        if sk is not None:
            k["sk"] = S(sk)
        return k
    return make


def cases():
    v1 = {":v": S("x")}
    out = []

    def add(rule, case, op, expect, **kw):
        out.append(dict(rule=rule, case=case, op=op, expect=expect, **kw))

    # Table keys: judged from the request alone.
    for L, e in ((2048, "accepted"), (2049, "refused")):
        add("table-pk-size", f"put-{L}", "Put", e, key=fixed_key(pk="p" * L), item={})
        add("table-pk-size", f"update-key-{L}", "Update", e, key=fixed_key(pk="p" * L), body=upd("SET x = :v", v1))
        add("table-pk-size", f"delete-key-{L}", "Delete", e, key=fixed_key(pk="p" * L))
        add("table-pk-size", f"conditioncheck-key-{L}", "ConditionCheck", e, key=fixed_key(pk="p" * L),
            body={"ConditionExpression": "attribute_not_exists(x)"})
    for L, e in ((1024, "accepted"), (1025, "refused")):
        add("table-sk-size", f"put-{L}", "Put", e, key=fixed_key(sk="s" * L), item={})
        add("table-sk-size", f"delete-key-{L}", "Delete", e, key=fixed_key(sk="s" * L))
    add("table-key-empty", "put-pk-empty", "Put", "refused", key=fixed_key(pk=""), item={})
    add("table-key-empty", "update-sk-empty", "Update", "refused", key=fixed_key(sk=""), body=upd("SET x = :v", v1))
    add("table-key-type", "put-pk-number", "Put", "refused", key=lambda p: {"pk": N("1"), "sk": S("s")}, item={})
    add("table-key-type", "delete-pk-number", "Delete", "refused", key=lambda p: {"pk": N("1"), "sk": S("s")})
    add("table-key-shape", "delete-key-missing-sk", "Delete", "refused", key=lambda p: {"pk": S("a")})
    add("table-key-shape", "delete-key-extra-attr", "Delete", "refused",
        key=lambda p: {"pk": S("a"), "sk": S("s"), "x": S("1")})
    add("table-key-update", "set-pk", "Update", "refused", body=upd("SET pk = :v", v1))

    # Secondary index keys: sizes (the first kinds), types, emptiness.
    for L, e in ((2048, "accepted"), (2049, "refused")):
        v = {":v": S("g" * L)}
        add("gsi-pk-size", f"put-{L}", "Put", e, item={"gpk": S("g" * L), "gsk": S("s")})
        add("gsi-pk-size", f"update-set-{L}", "Update", e, body=upd("SET gpk = :v", v))
        add("gsi-pk-size", f"update-if_not_exists-absent-{L}", "Update", e, body=upd("SET gpk = if_not_exists(gpk, :v)", v))
        add("gsi-pk-size", f"update-copy-attribute-{L}", "Update", e, body=upd("SET gpk = src"), seed={"src": S("g" * L)})
    add("gsi-pk-size", "update-if_not_exists-present-2049", "Update", "accepted",
        body=upd("SET gpk = if_not_exists(gpk, :v)", {":v": S("g" * 2049)}), seed={"gpk": S("short")})
    for L, e in ((1024, "accepted"), (1025, "refused")):
        v = {":v": S("g" * L)}
        add("gsi-sk-size", f"put-{L}", "Put", e, item={"gpk": S("g"), "gsk": S("g" * L)})
        add("gsi-sk-size", f"put-without-gsi-pk-{L}", "Put", e, item={"gsk": S("g" * L)})
        add("gsi-sk-size", f"update-set-{L}", "Update", e, body=upd("SET gsk = :v", v))
        add("gsi-sk-size", f"update-if_not_exists-absent-{L}", "Update", e, body=upd("SET gsk = if_not_exists(gsk, :v)", v))
        add("lsi-sk-size", f"put-{L}", "Put", e, item={"lsk": S("l" * L)})
    add("lsi-sk-size", "update-set-1025", "Update", "refused", local="accepted",
        body=upd("SET lsk = :v", {":v": S("l" * 1025)}))
    add("lsi-sk-size", "update-copy-attribute-1025", "Update", "refused", local="accepted", body=upd("SET lsk = src"),
        seed={"src": S("l" * 1025)})
    add("index-key-empty", "put-gsi-pk-empty", "Put", "refused", item={"gpk": S("")})
    add("index-key-empty", "update-set-gsi-pk-empty", "Update", "refused", body=upd("SET gpk = :v", {":v": S("")}))
    add("index-key-empty", "update-set-lsi-sk-empty", "Update", "refused", body=upd("SET lsk = :v", {":v": S("")}))
    add("index-key-type", "put-gsi-pk-number", "Put", "refused", item={"gpk": N("1")})
    add("index-key-type", "put-gsi2-pk-string", "Put", "refused", item={"gn": S("x")})
    add("index-key-type", "update-set-gsi-pk-number", "Update", "refused", body=upd("SET gpk = :v", {":v": N("1")}))
    add("index-key-type", "put-lsi-sk-number", "Put", "refused", item={"lsk": N("1")})
    add("index-key-type", "update-set-lsi-sk-number", "Update", "refused", local="accepted",
        body=upd("SET lsk = :v", {":v": N("1")}))
    add("index-key-scalar", "update-set-into-gsi-pk", "Update", "refused", body=upd("SET gpk.x = :v", v1))

    # Item size: 400 KB of names and values; with a local secondary index, the item and its index entries together.
    base = len("pk") + len("k000001") + len("sk") + len("s") + len("d")
    for extra, e in ((0, "accepted"), (1, "refused")):
        add("item-size", f"put-{MAX_ITEM + extra}", "Put", e, item={"d": S("x" * (MAX_ITEM - base + extra))})
    # A number's size is its encoding's, which the documentation only approximates ("1 byte per two significant
    # digits, plus 1"): DynamoDB Local counts -1 as 3 bytes, so a list of n of them is 3 + 4n bytes, not 3 + 3n.
    for n_, e in ((102396, "accepted"), (102397, "refused")):
        add("item-size", f"put-list-of-{n_}-minus-ones", "Put", e, item={"d": {"L": [N("-1")] * n_}})
    add("item-size", "update-result-over", "Update", "refused", body=upd("SET d2 = :v", {":v": S("x" * 200 * KB)}),
        seed={"d": S("x" * 200 * KB)})
    add("item-size", "update-result-under", "Update", "accepted", body=upd("SET d2 = :v", {":v": S("x" * 199 * KB)}),
        seed={"d": S("x" * 200 * KB)})
    add("item-size", "update-value-alone-over", "Update", "refused", body=upd("SET d = :v", {":v": S("x" * 410 * KB)}))
    lbase = base + len("lsk") + len("l")
    for extra, e in ((0, "accepted"), (1, "refused")):
        add("lsi-item-size", f"put-with-lsi-entry-{MAX_ITEM // 2 + extra}x2", "Put", e,
            item={"lsk": S("l"), "d": S("x" * (MAX_ITEM // 2 - lbase + extra))})
    add("lsi-item-size", "update-adds-lsi-entry", "Update", "refused", local="accepted",
        body=upd("SET lsk = :v", {":v": S("l")}), seed={"d": S("x" * 250 * KB)})

    # Attribute names.
    add("attr-name-empty", "put-top-level", "Put", "refused", item={"": S("x")})
    add("attr-name-empty", "put-nested-map-key", "Put", "refused", item={"m": {"M": {"": S("x")}}})
    add("attr-name-empty", "update-ean-value-empty", "Update", "refused", body=upd("SET #a = :v", v1, {"#a": ""}))
    for L, e in ((65535, "accepted"), (65536, "refused")):
        add("attr-name-size", f"update-ean-value-{L}", "Update", e, body=upd("SET #a = :v", v1, {"#a": "n" * L}))
        add("attr-name-size", f"condition-ean-value-{L}", "Update", e,
            body=upd("SET x = :v", v1, {"#a": "n" * L}, ConditionExpression="attribute_not_exists(#a)"))
    add("attr-name-size", "put-50000", "Put", "accepted", item={"n" * 50000: S("x")})
    add("attr-name-size", "put-65535", "Put", "accepted", local="InternalFailure", item={"n" * 65535: S("x")})
    for L, e in ((255, "accepted"), (256, "refused")):
        name, value = "#" + "p" * (L - 1), ":" + "p" * (L - 1)
        add("placeholder-size", f"ean-key-{L}", "Update", e, body=upd(f"SET {name} = :v", v1, {name: "a"}))
        add("placeholder-size", f"eav-key-{L}", "Update", e, body=upd(f"SET a = {value}", {value: S("x")}))

    # Nesting: an attribute value may hold at most 31 maps/lists inside one another (32 levels, the item the first).
    for depth, e in ((31, "accepted"), (32, "refused")):
        add("nesting-depth", f"put-maps-{depth}", "Put", e, item={"d": deep(depth)})
        add("nesting-depth", f"update-set-value-{depth}", "Update", e, body=upd("SET d = :v", {":v": deep(depth)}))
        add("nesting-depth", f"update-list_append-{depth}", "Update", e,
            body=upd("SET l = list_append(:a, :b)", {":a": {"L": []}, ":b": {"L": [deep(depth - 1)]}}))
        path = "d" + ".a" * 20  # 21 elements: the value goes under 20 containers
        add("nesting-depth", f"update-set-long-path-{depth}", "Update", e,
            body=upd(f"SET {path} = :v", {":v": deep(depth - 20)}), seed={"d": deep(25)})
        add("nesting-depth", f"update-copy-into-map-{depth}", "Update", e, body=upd("SET d.a = src"),
            seed={"d": {"M": {}}, "src": deep(depth - 1)})
        add("nesting-depth", f"update-list_append-into-map-{depth}", "Update", e,
            body=upd("SET d.l = list_append(d.l, :b)", {":b": {"L": [deep(depth - 2)]}}), seed={"d": {"M": {"l": {"L": []}}}})
    add("nesting-depth", "put-lists-32", "Put", "refused", item={"d": deep(32, kind="L")})
    add("nesting-depth", "put-31-maps-around-empty-map", "Put", "refused", item={"d": deep(31, {"M": {}})})
    add("nesting-depth", "put-31-maps-around-set", "Put", "accepted", item={"d": deep(31, {"SS": ["a"]})})
    add("nesting-depth", "update-if_not_exists-present-value-32", "Update", "accepted",
        body=upd("SET x = if_not_exists(x, :v)", {":v": deep(32)}), seed={"x": S("1")})
    add("nesting-depth", "condition-value-32", "Update", "accepted",
        body=upd("SET x = :x", {":x": S("1"), ":v": deep(32)}, ConditionExpression="attribute_not_exists(d) OR d <> :v"))
    add("document-path-depth", "update-path-33-elements", "Update", "refused", body=upd("SET d" + ".a" * 32 + " = :v", v1))
    add("document-path-depth", "condition-path-33-elements", "Update", "refused",
        body=upd("SET x = :v", v1, ConditionExpression="attribute_not_exists(d" + ".a" * 32 + ")"))

    # Values.
    for v, e in (("1" * 38, "accepted"), ("1" * 39, "refused")):
        add("number-precision", f"put-{len(v)}-digits", "Put", e, item={"n": N(v)})
        add("number-precision", f"update-value-{len(v)}-digits", "Update", e, body=upd("SET n = :v", {":v": N(v)}))
    for v, e in (("9.9999999999999999999999999999999999999E+125", "accepted"), ("1E+126", "refused"),
                 ("1E-130", "accepted"), ("1E-131", "refused"), ("-1E+126", "refused")):
        add("number-range", f"put-{v}", "Put", e, item={"n": N(v)})
    add("number-range", "update-value-1E+126", "Update", "refused", body=upd("SET n = :v", {":v": N("1E+126")}))
    add("number-range", "update-arithmetic-overflow", "Update", "refused", body=upd("SET n = n + :v", {":v": N("9E+125")}),
        seed={"n": N("9E+125")})
    for v, e in ((" 1", "refused"), ("+1", "accepted"), ("0x10", "refused"), ("", "refused")):
        add("number-format", f"put-{v!r}", "Put", e, item={"n": N(v)})
    add("set-empty", "put-SS", "Put", "refused", item={"s": {"SS": []}})
    add("set-empty", "put-NS", "Put", "refused", item={"s": {"NS": []}})
    add("set-empty", "put-BS", "Put", "refused", item={"s": {"BS": []}})
    add("set-empty", "condition-value-SS", "Update", "refused",
        body=upd("SET x = :x", {":x": S("1"), ":v": {"SS": []}}, ConditionExpression="attribute_not_exists(s) OR s <> :v"))
    add("set-duplicates", "put-SS", "Put", "refused", item={"s": {"SS": ["a", "a"]}})
    add("set-duplicates", "put-NS-1-and-1.0", "Put", "refused", item={"s": {"NS": ["1", "1.0"]}})
    add("set-duplicates", "put-NS-1-and-01", "Put", "refused", item={"s": {"NS": ["1", "01"]}})
    add("set-duplicates", "put-BS", "Put", "refused", item={"s": {"BS": [b"a", b"a"]}})
    add("set-duplicates", "update-value-NS-1-and-1.0", "Update", "refused",
        body=upd("SET s = :v", {":v": {"NS": ["1", "1.0"]}}))
    add("null-false", "put", "Put", "refused", item={"z": {"NULL": False}})
    add("empty-non-key", "put-empty-S", "Put", "accepted", item={"e": S("")})
    add("empty-non-key", "put-empty-B", "Put", "accepted", item={"e": {"B": b""}})
    add("empty-non-key", "put-SS-with-empty", "Put", "accepted", item={"e": {"SS": ["", "a"]}})
    add("value-shape", "put-two-types", "Put", "refused", item={"s": {"S": "a", "N": "1"}})
    add("value-shape", "put-no-type", "Put", "refused", item={"s": {}})

    # Expressions.
    for L, e in ((4096, "accepted"), (4097, "refused")):
        add("expression-size", f"update-{L}", "Update", e, body=upd("SET a = :v" + " " * (L - 10), v1))
        add("expression-size", f"condition-{L}", "Update", e,
            body=upd("SET b = :v", v1, ConditionExpression="attribute_not_exists(a)" + " " * (L - 23)))
    for k, e in ((300, "accepted"), (301, "refused")):
        add("expression-operators", f"update-{k}-plus", "Update", e,
            body=upd("SET " + ",".join(f"a{i}=:n+:n" for i in range(k)), {":n": N("1")}))
    for k, e in ((150, "accepted"), (151, "refused")):  # k comparisons and k-1 ANDs: 299 and 301 operators
        add("expression-operators", f"condition-{2 * k - 1}", "Update", e,
            body=upd("SET b = :v", v1, ConditionExpression=" AND ".join(["a <> :v"] * k)))
    for k, e in ((150, "accepted"), (151, "refused")):  # functions count too
        add("expression-operators", f"condition-functions-{2 * k - 1}", "Update", e,
            body=upd("SET b = :v", v1, ConditionExpression=" AND ".join(["attribute_exists(a)"] * k)), seed={"a": S("x")})
    for k, e in ((100, "accepted"), (101, "refused")):
        add("in-operands", f"condition-{k}", "Update", e,
            body=upd("SET b = :v", v1, ConditionExpression="attribute_not_exists(a) OR a IN (" + ",".join([":v"] * k) + ")"))
    add("placeholder-unused", "ean", "Update", "refused", body=upd("SET a = :v", v1, {"#u": "u"}))
    add("placeholder-unused", "eav", "Update", "refused", body=upd("SET a = :v", {":v": S("x"), ":u": S("u")}))
    add("placeholder-unused", "eav-without-expression", "Put", "refused", item={}, body={"ExpressionAttributeValues": v1})
    add("placeholder-undefined", "ean", "Update", "refused", body=upd("SET #a = :v", v1))
    add("placeholder-undefined", "eav", "Update", "refused", body=upd("SET a = :v"))
    add("reserved-word", "update-status", "Update", "refused", body=upd("SET status = :v", v1))
    add("update-paths", "overlap", "Update", "refused", body=upd("SET a = :v, a.b = :v", v1))
    add("update-paths", "conflict", "Update", "refused", body=upd("SET a[0].b = :v, a.c = :v", v1))
    add("update-clause-once", "two-SET", "Update", "refused", body=upd("SET a = :v SET b = :v", v1))
    add("redundant-parentheses", "condition", "Update", "refused", body=upd("SET b = :v", v1, ConditionExpression="((a = :v))"))
    add("substitution-size", "condition-values-over-2MB", "Update", "refused",
        body=upd("SET d = :x", {":x": S("1"), **{f":v{i}": S("x" * 390 * KB) for i in range(6)}},
                 ConditionExpression=" AND ".join(f"q <> :v{i}" for i in range(6))))
    add("update-operand-type", "request-plus-string", "Update", "refused",
        body=upd("SET a = :s + :n", {":s": S("x"), ":n": N("1")}))
    add("update-operand-type", "item-plus-string", "Update", "refused",
        body=upd("SET a = b + :n", {":n": N("1")}), seed={"b": S("x")})
    add("update-missing-attribute", "plus-absent", "Update", "refused", body=upd("SET a = b + :n", {":n": N("1")}))
    add("update-document-path", "parent-absent", "Update", "refused", body=upd("SET a.b = :v", v1))

    # TransactWriteItems as a whole.
    add("tx-actions", "100", "Tx", "accepted", body=lambda p: [p.benign() for _ in range(100)])
    add("tx-actions", "101", "Tx", "refused", body=lambda p: [p.benign() for _ in range(101)])

    def same(p, second):
        k = p.key()
        return [{"Put": {"TableName": p.t, "Item": dict(k, x=S("a"))}}, second(k)]
    add("tx-same-item", "put-put", "Tx", "refused",
        body=lambda p: same(p, lambda k: {"Put": {"TableName": p.t, "Item": dict(k, x=S("b"))}}))
    add("tx-same-item", "put-conditioncheck", "Tx", "refused",
        body=lambda p: same(p, lambda k: {"ConditionCheck": {"TableName": p.t, "Key": k,
                                                              "ConditionExpression": "attribute_not_exists(q)"}}))
    add("tx-same-item", "number-key-2-and-2.00", "Tx", "refused",
        body=lambda p: [{"Put": {"TableName": p.tn, "Item": {"id": N(n)}}} for n in ("2", "2.00")])
    big = "x" * (MAX_ITEM - 100)
    add("tx-size", "10-items-of-400KB", "Tx", "accepted",
        body=lambda p: [{"Put": {"TableName": p.t, "Item": dict(p.key(), d=S(big))}} for _ in range(10)])
    add("tx-size", "11-items-of-400KB", "Tx", "refused",
        body=lambda p: [{"Put": {"TableName": p.t, "Item": dict(p.key(), d=S(big))}} for _ in range(11)])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated rule ids")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    endpoint = os.environ.get("DYNAMODB_ENDPOINT")
    if not endpoint:
        raise SystemExit("DYNAMODB_ENDPOINT is required (for example http://127.0.0.1:8000)")
    only = set(args.only.split(",")) if args.only else None
    p = Probe(endpoint)
    started = time.time()
    p.create()
    results, bad = [], 0
    try:
        for case in cases():
            if only and case["rule"] not in only:
                continue
            single, tx = p.run_case(case)
            if verdict(case["expect"], single, tx):
                match = "yes"
            elif "local" in case and all(r[0] == case["local"] for r in (single, tx) if r is not None):
                match = "local-differs"
            else:
                match = "NO"
                bad += 1
            name = f"{case['rule']}/{case['case']}"
            print(f"{name:<52} expected={case['expect']:<8} single={show(single)}  tx={show(tx)}  match={match}", flush=True)
            results.append(dict(rule=case["rule"], case=case["case"], expected=case["expect"], local=case.get("local"),
                                single=show(single), tx=show(tx), match=match))
    finally:
        p.drop()
    print(f"{len(results)} cases, {bad} not matching, {time.time() - started:.1f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

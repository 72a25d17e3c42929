"""Security checks of template.yaml: least privilege and authentication.

  python tools/check_policies.py [TEMPLATE]      (default template.yaml; exit 1 on any finding)
  python tools/check_policies.py --self-test     shows each rule catches what it is for, on altered copies

Rules:
  1. No statement that grants a dynamodb: or states: action (or a wildcard action) names a "*" resource, or a
     resource ending in "table/*", "stateMachine:*" or ":*:*", whatever intrinsic functions build it.
  2. Every policy is an inline statement list or a SAM policy template scoped to a named resource; managed policies
     that grant DynamoDB or Step Functions on everything (AmazonDynamoDBFullAccess, AWSStepFunctionsFullAccess, ...)
     are refused.
  3. The API's default authorizer is AWS_IAM, and no API event turns authorization off.
"""

import copy
import sys

from cfnlint.decode import decode

BROAD_MANAGED = ("FullAccess", "PowerUser", "AdministratorAccess")
SCOPED_TEMPLATES = {"LambdaInvokePolicy", "DynamoDBCrudPolicy", "DynamoDBReadPolicy", "StepFunctionsExecutionPolicy"}


def strings(node):
    """Every literal string inside an intrinsic-function tree."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)


def resources(node):
    """The resource expressions of a statement's Resource: each list item, or the whole value."""
    if isinstance(node, list):
        return node
    return [node]


def wildcard(resource):
    texts = list(strings(resource))
    if isinstance(resource, str):
        texts = [resource]
    for t in texts:
        if t.strip() == "*" or t.endswith("table/*") or t.endswith("stateMachine:*") or t.endswith(":*:*"):
            return True
    return False


def policies_of(name, res):
    props = res.get("Properties", {})
    if res.get("Type") in ("AWS::Serverless::Function", "AWS::Serverless::StateMachine"):
        pol = props.get("Policies", [])
        return pol if isinstance(pol, list) else [pol]
    if res.get("Type") == "AWS::IAM::Role":
        return [p.get("PolicyDocument", {}) for p in props.get("Policies", [])] + props.get("ManagedPolicyArns", [])
    if res.get("Type") in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        return [props.get("PolicyDocument", {})]
    return []


def findings(template):
    out = []
    res_all = template.get("Resources", {})
    for name, res in res_all.items():
        for pol in policies_of(name, res):
            if isinstance(pol, str):
                if any(b in pol for b in BROAD_MANAGED):
                    out.append(f"{name}: managed policy {pol} is not least privilege")
                continue
            if isinstance(pol, dict) and "Statement" not in pol:
                for tname, args in pol.items():
                    if tname not in SCOPED_TEMPLATES:
                        out.append(f"{name}: policy template {tname} is not on the list of scoped templates")
                    elif not args or any(v in ("*", "") for v in strings(args)):
                        out.append(f"{name}: policy template {tname} is not scoped to a named resource")
                continue
            stmts = pol.get("Statement", []) if isinstance(pol, dict) else []
            for st in stmts if isinstance(stmts, list) else [stmts]:
                if st.get("Effect") != "Allow":
                    continue
                actions = st.get("Action", [])
                actions = actions if isinstance(actions, list) else [actions]
                relevant = [a for a in actions if isinstance(a, str) and (a.startswith(("dynamodb:", "states:")) or a == "*")]
                if not relevant:
                    continue
                if "NotResource" in st:
                    out.append(f"{name} {st.get('Sid', '')}: NotResource with {relevant}")
                for r in resources(st.get("Resource", "*")):
                    if wildcard(r):
                        out.append(f"{name} {st.get('Sid', '')}: {relevant} on a wildcard resource {r}")
    apis = {n for n, r in res_all.items() if r.get("Type") == "AWS::Serverless::Api"}
    for n in apis:
        auth = res_all[n].get("Properties", {}).get("Auth", {})
        if auth.get("DefaultAuthorizer") != "AWS_IAM":
            out.append(f"{n}: the API's DefaultAuthorizer is {auth.get('DefaultAuthorizer')!r}, not AWS_IAM")
    for name, res in res_all.items():
        events = res.get("Properties", {}).get("Events", {}) or {}
        for en, ev in events.items():
            if ev.get("Type") != "Api":
                continue
            p = ev.get("Properties", {})
            if p.get("RestApiId", {}).get("Ref") not in apis:
                out.append(f"{name}.{en}: an Api event outside the IAM-authorized API")
            if p.get("Auth", {}).get("Authorizer") not in (None, "AWS_IAM"):
                out.append(f"{name}.{en}: authorization changed to {p['Auth']['Authorizer']!r}")
    return out


def load(path):
    template, matches = decode(path)
    if matches:
        raise SystemExit(f"{path}: {matches}")
    return template


def self_test(template):
    """Each rule must fire on a copy of the real template broken in its way."""
    def first_statement(t, fn, sid):
        for st in t["Resources"][fn]["Properties"]["Policies"][0]["Statement"]:
            if st.get("Sid") == sid:
                return st
        raise KeyError(sid)

    cases = []
    t = copy.deepcopy(template)
    first_statement(t, "BeginFunction", "TransactionRecords")["Resource"] = "*"
    cases.append(("dynamodb on *", t))
    t = copy.deepcopy(template)
    first_statement(t, "SweeperFunction", "StartRecoveryExecutions")["Resource"] = {"Fn::Sub": "arn:aws:states:us-east-1:1:stateMachine:*"}
    cases.append(("states on every state machine", t))
    t = copy.deepcopy(template)
    t["Resources"]["LockFunction"]["Properties"]["Policies"].append("arn:aws:iam::aws:policy/AmazonDynamoDBFullAccess")
    cases.append(("a broad managed policy", t))
    t = copy.deepcopy(template)
    t["Resources"]["TransactionsApi"]["Properties"]["Auth"]["DefaultAuthorizer"] = "NONE"
    cases.append(("an unauthenticated API", t))
    t = copy.deepcopy(template)
    t["Resources"]["StageFunction"]["Properties"]["Events"]["Create"]["Properties"]["Auth"] = {"Authorizer": "NONE"}
    cases.append(("an API route without auth", t))
    ok = True
    for what, broken in cases:
        got = findings(broken)
        print(f"self-test: {what}: {'caught' if got else 'MISSED'}{': ' + got[0] if got else ''}")
        ok &= bool(got)
    return ok


def main():
    args = sys.argv[1:]
    template = load(next((a for a in args if not a.startswith("--")), "template.yaml"))
    if "--self-test" in args:
        sys.exit(0 if self_test(template) and not findings(template) else 1)
    found = findings(template)
    for f in found:
        print("FINDING:", f)
    print(f"policies: {len(found)} findings")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()

"""Security and operations checks of template.yaml: least privilege, authentication, undelivered events, alarms.

  python tools/check_policies.py [TEMPLATE]      (default template.yaml; exit 1 on any finding)
  python tools/check_policies.py --self-test     shows each rule catches what it is for, on altered copies

Rules:
  1. No statement that grants a dynamodb: or states: action (or a wildcard action) names a "*" resource, or a
     resource ending in "table/*", "stateMachine:*" or ":*:*", whatever intrinsic functions build it.
  2. Every policy is an inline statement list or a SAM policy template scoped to a named resource; managed policies
     that grant DynamoDB or Step Functions on everything (AmazonDynamoDBFullAccess, AWSStepFunctionsFullAccess, ...)
     are refused.
  3. The API's default authorizer is AWS_IAM, and no API event turns authorization off.
  4. No statement written in the template (function and state machine policies, IAM roles and policies, SQS queue,
     SNS topic and CloudWatch Logs resource policies) grants an sqs:, sns:, cloudwatch:, logs: or xray: action on "*"
     or on every queue, topic, alarm or log group, except the actions in NO_RESOURCE_LEVEL, which do not support
     resource-level permissions. No resource policy allows everyone ("*") without a condition.
  5. Every SQS queue is encrypted (SqsManagedSseEnabled or a KMS key).
  6. Every EventBridgeRule event has a RetryPolicy and a DeadLetterConfig naming a queue of this template (not one
     SAM creates, which is not encrypted), and that queue has a policy letting events.amazonaws.com send to it on
     the condition of the rule's aws:SourceArn. A function such an event invokes (asynchronously: Lambda retries a
     failed invocation, then drops the event) has a DeadLetterQueue of Type SQS, and every function's DeadLetterQueue
     names a queue of this template (SAM then gives the function's role sqs:SendMessage on it).
  7. Every CloudWatch alarm exists only under a condition on the EnableAlarms parameter, and its AlarmActions,
     OKActions and InsufficientDataActions are absent or the AlarmTopicArn parameter under a condition on it.
  8. No ARN in a statement has an IAM policy variable (${aws:...}) in its Region or account part: IAM substitutes
     variables only after the fifth colon, so such an ARN matches nothing. An ARN whose Region or account is left
     open ("*") is allowed only in a statement whose Condition pins both, StringEquals aws:RequestedRegion to
     AWS::Region and aws:ResourceAccount to AWS::AccountId (how template.yaml names the caller's tables).
  9. On the template as deployed (the SAM transform's output, tools/iam/resolve.py's transform): every
     AWS::Lambda::Function names in LoggingConfig.LogGroup a log group of the stack that has RetentionInDays and is
     deleted with the stack, and its role denies logs:CreateLogGroup, CreateLogStream and PutLogEvents on every other
     log group (a Deny with NotResource naming only that group: SAM's AWSLambdaBasicExecutionRole allows them on "*").
 10. Every API Gateway stage writes access logs to such a log group, as JSON with the request id, the caller and the
     status, and throttles every route: a MethodSettings entry for "*" on "/*" with ThrottlingRateLimit and
     ThrottlingBurstLimit (without one a single client may use up the account's API Gateway quota).
 11. The state machine invokes published versions only: every Lambda function a Task of its definition names is a
     DefinitionSubstitutions value that is a Ref to an AWS::Lambda::Version (not a function's ARN, which runs whatever a
     deploy put there last, nor an alias, which a deploy moves), and the version stays when a deploy replaces or drops
     it (UpdateReplacePolicy and DeletionPolicy Retain), for the executions still on it.
 12. Every function that publishes versions (AutoPublishAlias) names, in its VersionDescription, every template
     parameter its configuration refers to (Globals included, through conditions too): SAM publishes a new version
     when a property as written changes, not when the value of a parameter in it does, and a changed description
     publishes one.
Statements and policies inside Fn::If are checked in both branches.
"""

import copy
import json
import os
import re
import sys

from cfnlint.decode import decode

BROAD_MANAGED = ("FullAccess", "PowerUser", "AdministratorAccess")
SCOPED_TEMPLATES = {"LambdaInvokePolicy", "DynamoDBCrudPolicy", "DynamoDBReadPolicy", "StepFunctionsExecutionPolicy"}

# Rule 4: services whose resources the template can name.
NAMED_SERVICES = ("sqs:", "sns:", "cloudwatch:", "logs:", "xray:")
# Rule 4: actions that do not support resource-level permissions, so they may only be granted on "*".
NO_RESOURCE_LEVEL = {
    # Step Functions log delivery to CloudWatch Logs (the state machine's LogDelivery statement).
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
    # X-Ray traces (the state machine's XRayTraces statement).
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
}
RESOURCE_POLICIES = {
    "AWS::SQS::QueuePolicy": "PolicyDocument",
    "AWS::SNS::TopicPolicy": "PolicyDocument",
    "AWS::Logs::ResourcePolicy": "PolicyDocument",
}
ALARM_TYPES = ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
ALARM_ACTIONS = ("AlarmActions", "OKActions", "InsufficientDataActions")
NO_VALUE = {"Ref": "AWS::NoValue"}


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


def refs(node):
    """Every name a Ref or a Condition inside the tree points at."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("Ref", "Condition") and isinstance(v, str):
                yield v
            else:
                yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def branches(node):
    """The values a node may take: both branches of an Fn::If (without AWS::NoValue), or the node itself."""
    if isinstance(node, dict) and set(node) == {"Fn::If"} and isinstance(node["Fn::If"], list) and len(node["Fn::If"]) == 3:
        for b in node["Fn::If"][1:]:
            if b != NO_VALUE:
                yield from branches(b)
    else:
        yield node


def resources(node):
    """The resource expressions of a statement's Resource: each list item, or the whole value."""
    if isinstance(node, list):
        return node
    return [node]


def statements(doc):
    """The statements of a policy document, with those inside Fn::If taken from both branches."""
    if not isinstance(doc, dict):
        return
    for stmts in branches(doc.get("Statement", [])):
        for item in stmts if isinstance(stmts, list) else [stmts]:
            for st in branches(item):
                if isinstance(st, dict):
                    yield st


def wildcard(resource):
    texts = list(strings(resource))
    if isinstance(resource, str):
        texts = [resource]
    for t in texts:
        if t.strip() == "*" or t.endswith("table/*") or t.endswith("stateMachine:*") or t.endswith(":*:*"):
            return True
    return False


def wildcard_named(resource):
    """Rule 4: "*", or every queue, topic, alarm, dashboard or log group of an account."""
    if wildcard(resource):
        return True
    for t in strings(resource):
        t = re.sub(r"\$\{[^}]*\}", "X", t.strip())
        if re.search(r":(sqs|sns):[^:]*:[^:]*:\*$", t) or re.search(r"log-group:\*", t):
            return True
        if re.search(r"(alarm:|dashboard/)\*$", t):
            return True
    return False


def policies_of(name, res):
    props = res.get("Properties", {})
    out = []
    if res.get("Type") in ("AWS::Serverless::Function", "AWS::Serverless::StateMachine"):
        pol = props.get("Policies", [])
        out = pol if isinstance(pol, list) else [pol]
    elif res.get("Type") == "AWS::IAM::Role":
        inline = [b for p in props.get("Policies", []) for b in branches(p) if isinstance(b, dict)]
        # A managed policy's ARN built with Fn::Sub (for the partition) is judged by its text.
        managed = [m["Fn::Sub"] if isinstance(m, dict) and isinstance(m.get("Fn::Sub"), str) else m for m in props.get("ManagedPolicyArns", [])]
        out = [p.get("PolicyDocument", {}) for p in inline] + managed
    elif res.get("Type") in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        out = [props.get("PolicyDocument", {})]
    return [b for p in out for b in branches(p)]


def resource_policy(name, res):
    """The policy document of a resource policy, parsed when the template writes it as a JSON string; the error
    when it cannot be read."""
    doc = res.get("Properties", {}).get(RESOURCE_POLICIES[res["Type"]])
    if isinstance(doc, dict) and "Fn::Sub" in doc:
        doc = doc["Fn::Sub"][0] if isinstance(doc["Fn::Sub"], list) else doc["Fn::Sub"]
    if isinstance(doc, str):
        try:
            # ${...} placeholders stand for names and ARNs; any literal "*" stays.
            doc = json.loads(re.sub(r"\$\{[^}]*\}", "SUBSTITUTED", doc))
        except ValueError as e:
            return None, f"{name}: the policy document is not JSON ({e})"
    if not isinstance(doc, dict):
        return None, f"{name}: no policy document the check can read"
    return doc, None


def names(node, logical_id):
    """Whether an expression refers to the resource logical_id (Ref, Fn::GetAtt or ${...} in Fn::Sub)."""
    if logical_id in refs(node):
        return True
    return any(t == logical_id or "${" + logical_id + "}" in t or "${" + logical_id + "." in t for t in strings(node))


def open_principal(st):
    p = st.get("Principal")
    return p == "*" or (isinstance(p, dict) and p.get("AWS") in ("*", ["*"]))


# Rule 8: an ARN's partition, service, Region and account, once CloudFormation's ${...} placeholders are set aside.
ARN_PREFIX = re.compile(r"arn:([^:,\s]*):([^:,\s]*):([^:,\s]*):([^:,\s]*):")
IAM_VARIABLE = re.compile(r"\$\{[a-z0-9-]+:[A-Za-z0-9/_.-]+\}")
CFN_PLACEHOLDER = re.compile(r"\$\{(AWS::)?[A-Za-z0-9_.]+\}")


def open_arns(st, where, out):
    """Rule 8 for one statement: policy variables before the fifth colon, and open Regions or accounts without the
    conditions that pin them."""
    pinned = False
    cond = st.get("Condition") or {}
    eq = cond.get("StringEquals") if isinstance(cond, dict) else None
    if isinstance(eq, dict):
        pinned = eq.get("aws:RequestedRegion") == {"Ref": "AWS::Region"} and eq.get("aws:ResourceAccount") == {"Ref": "AWS::AccountId"}
    for r in resources(st.get("Resource", [])):
        for t in strings(r):
            t = CFN_PLACEHOLDER.sub("X", IAM_VARIABLE.sub("VARIABLE", t))
            for m in ARN_PREFIX.finditer(t):
                region, account = m.group(3), m.group(4)
                if "VARIABLE" in region or "VARIABLE" in account:
                    out.append(f"{where}: a policy variable in the Region or account of an ARN ({m.group(0)}...), which IAM never substitutes there")
                elif ("*" in region or "*" in account) and not pinned:
                    out.append(
                        f"{where}: an ARN with an open Region or account ({m.group(0)}...) in a statement whose Condition does not pin "
                        "aws:RequestedRegion to AWS::Region and aws:ResourceAccount to AWS::AccountId"
                    )


def check_statement(where, st, out, rules=(1, 4, 8)):
    if st.get("Effect") != "Allow":
        return
    actions = st.get("Action", [])
    actions = actions if isinstance(actions, list) else [actions]
    actions = [a for a in actions if isinstance(a, str)]
    def refuse_wildcards(chosen, is_wildcard, note=""):
        if not chosen:
            return
        if "NotResource" in st:
            out.append(f"{where}: NotResource with {chosen}")
        for r in resources(st.get("Resource", "*")):
            if is_wildcard(r):
                out.append(f"{where}: {chosen} on a wildcard resource {r}{note}")

    if 1 in rules:
        refuse_wildcards([a for a in actions if a.startswith(("dynamodb:", "states:")) or a == "*"], wildcard)
    if 4 in rules:
        named = [a for a in actions if a.lower().startswith(NAMED_SERVICES) and a not in NO_RESOURCE_LEVEL]
        refuse_wildcards(named, wildcard_named, " (not in NO_RESOURCE_LEVEL)")
    if 8 in rules:
        open_arns(st, where, out)


def condition_refs(template, name, seen=None):
    """Every parameter a condition depends on, through the conditions it names."""
    seen = set() if seen is None else seen
    if name in seen:
        return set()
    seen.add(name)
    found = set()
    for r in refs(template.get("Conditions", {}).get(name)):
        if r in template.get("Conditions", {}):
            found |= condition_refs(template, r, seen)
        else:
            found.add(r)
    return found


def alarm_findings(template, name, res):
    out = []
    cond = res.get("Condition")
    if not cond or "EnableAlarms" not in condition_refs(template, cond):
        out.append(f"{name}: an alarm that does not depend on the EnableAlarms parameter (Condition {cond!r})")
    props = res.get("Properties", {})
    for key in ALARM_ACTIONS:
        if key not in props:
            continue
        v = props[key]
        iff = v.get("Fn::If") if isinstance(v, dict) and set(v) == {"Fn::If"} else None
        ok = (
            isinstance(iff, list)
            and len(iff) == 3
            and isinstance(iff[0], str)
            and "AlarmTopicArn" in condition_refs(template, iff[0])
            and isinstance(iff[1], list)
            and iff[1]
            and all(a == {"Ref": "AlarmTopicArn"} for a in iff[1])
            and iff[2] == NO_VALUE
        )
        if not ok:
            out.append(f"{name}: {key} {v!r} is not the AlarmTopicArn parameter under a condition on it")
    return out


def dead_letter_findings(template):
    out = []
    res_all = template.get("Resources", {})
    queues = {n for n, r in res_all.items() if r.get("Type") == "AWS::SQS::Queue"}
    for name, res in res_all.items():
        if res.get("Type") not in ("AWS::Serverless::Function", "AWS::Serverless::StateMachine"):
            continue
        for en, ev in (res.get("Properties", {}).get("Events", {}) or {}).items():
            if ev.get("Type") != "EventBridgeRule":
                continue
            p = ev.get("Properties", {})
            rule = name + en  # the AWS::Events::Rule SAM generates
            if "RetryPolicy" not in p:
                out.append(f"{name}.{en}: an EventBridge rule without a RetryPolicy")
            dlq = p.get("DeadLetterConfig")
            if not isinstance(dlq, dict) or "Arn" not in dlq:
                out.append(f"{name}.{en}: the DeadLetterConfig {dlq!r} does not name a queue of this template")
                continue
            arn = dlq["Arn"]
            getatt = arn.get("Fn::GetAtt") if isinstance(arn, dict) else None
            queue = getatt.split(".")[0] if isinstance(getatt, str) else getatt[0] if isinstance(getatt, list) else None
            if queue not in queues:
                out.append(f"{name}.{en}: the dead-letter queue {arn!r} is not an SQS queue of this template")
                continue
            allowed = False
            for pn, pr in res_all.items():
                if pr.get("Type") != "AWS::SQS::QueuePolicy":
                    continue
                if {"Ref": queue} not in (pr.get("Properties", {}).get("Queues") or []):
                    continue
                doc, _ = resource_policy(pn, pr)
                for st in statements(doc):
                    actions = st.get("Action", [])
                    actions = actions if isinstance(actions, list) else [actions]
                    service = (st.get("Principal") or {}).get("Service") if isinstance(st.get("Principal"), dict) else None
                    services = service if isinstance(service, list) else [service]
                    source = [
                        v
                        for op in (st.get("Condition") or {}).values()
                        if isinstance(op, dict)
                        for k, v in op.items()
                        if k.lower() == "aws:sourcearn"
                    ]
                    if (
                        st.get("Effect") == "Allow"
                        and "sqs:SendMessage" in actions
                        and "events.amazonaws.com" in services
                        and any(names(s, rule) for s in source)
                    ):
                        allowed = True
            if not allowed:
                out.append(
                    f"{name}.{en}: no queue policy lets events.amazonaws.com send to {queue} on the condition of "
                    f"aws:SourceArn {rule}"
                )
    # The functions' own dead-letter queues: where Lambda puts an asynchronous event it gave up on.
    for name, res in res_all.items():
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        props = res.get("Properties", {})
        targeted = any(ev.get("Type") == "EventBridgeRule" for ev in (props.get("Events") or {}).values())
        dlq = props.get("DeadLetterQueue")
        if dlq is None:
            if targeted:
                out.append(f"{name}: an EventBridge target without a DeadLetterQueue: an event Lambda gives up on after "
                           "its retries would be dropped")
            continue
        arn = dlq.get("TargetArn") if isinstance(dlq, dict) else None
        getatt = arn.get("Fn::GetAtt") if isinstance(arn, dict) else None
        queue = getatt.split(".")[0] if isinstance(getatt, str) else getatt[0] if isinstance(getatt, list) else None
        if not isinstance(dlq, dict) or dlq.get("Type") != "SQS" or queue not in queues:
            out.append(f"{name}: the DeadLetterQueue {dlq!r} is not an SQS queue of this template")
    return out


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
            for st in statements(pol):
                check_statement(f"{name} {st.get('Sid', '')}", st, out)
        if res.get("Type") in RESOURCE_POLICIES:
            doc, err = resource_policy(name, res)
            if err:
                out.append(err)
            for st in statements(doc):
                where = f"{name} {st.get('Sid', '')}"
                check_statement(where, st, out)
                if st.get("Effect") == "Allow" and open_principal(st) and not st.get("Condition"):
                    out.append(f"{where}: allows everyone (Principal *) without a condition")
        if res.get("Type") == "AWS::SQS::Queue":
            props = res.get("Properties", {})
            if props.get("SqsManagedSseEnabled") is not True and not props.get("KmsMasterKeyId"):
                out.append(f"{name}: an SQS queue without encryption (SqsManagedSseEnabled or KmsMasterKeyId)")
        if res.get("Type") in ALARM_TYPES:
            out += alarm_findings(template, name, res)
    out += dead_letter_findings(template)
    out += deployed_findings(template)
    out += version_description_findings(template)
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


# Rule 9: what AWSLambdaBasicExecutionRole allows on "*", which each function role must deny beyond its own group.
LAMBDA_LOG_ACTIONS = ("logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents")
# Rule 10: what an access log line must carry, as $context variables: the request id, the caller, the status.
ACCESS_LOG_FIELDS = {
    "the request id": ("$context.requestId",),
    "the caller": ("$context.identity.caller", "$context.identity.userArn"),
    "the status": ("$context.status",),
}


def transformed(template):
    """The template as CloudFormation deploys it: the SAM transform's output (tools/iam/resolve.py), parameters that
    have no default given the sample values resolve.py uses. Intrinsic functions other than the transform's stay."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "iam"))
    import resolve

    plain = json.loads(json.dumps(template))
    return resolve.transform(plain, dict(resolve.BASE_PARAMETERS))


def ref_target(node):
    """The logical id a plain Ref or Fn::GetAtt names, else None."""
    if isinstance(node, dict) and len(node) == 1:
        (k, v), = node.items()
        if k == "Ref" and isinstance(v, str):
            return v
        if k == "Fn::GetAtt":
            return v[0] if isinstance(v, list) else v.split(".", 1)[0]
    return None


def stack_log_group(res_all, node, where):
    """Rule 9 and 10: the findings about a reference to a log group (a Ref, or an ARN built on one with Fn::Sub)."""
    group = ref_target(node)
    if group is None:
        group = next((n for n, r in res_all.items() if r.get("Type") == "AWS::Logs::LogGroup" and names(node, n)), None)
    if group is None or res_all.get(group, {}).get("Type") != "AWS::Logs::LogGroup":
        return None, [f"{where}: {node!r} is no log group of the stack"]
    out = []
    r = res_all[group]
    if "RetentionInDays" not in r.get("Properties", {}):
        out.append(f"{where}: its log group {group} has no RetentionInDays (its events would be kept forever)")
    if r.get("DeletionPolicy") in ("Retain", "RetainExceptOnCreate"):
        out.append(f"{where}: its log group {group} stays when the stack is deleted (DeletionPolicy {r['DeletionPolicy']})")
    return group, out


def confines_logs(res_all, role, group):
    """Rule 9: the role holds a Deny of the log writes on every resource but group's."""
    props = res_all.get(role, {}).get("Properties", {})
    for pol in props.get("Policies", []):
        for doc in branches(pol):
            for st in statements(doc.get("PolicyDocument") if isinstance(doc, dict) else None):
                if st.get("Effect") != "Deny" or "Resource" in st or "Condition" in st:
                    continue
                actions = st.get("Action", [])
                actions = actions if isinstance(actions, list) else [actions]
                if not all(a in actions or "logs:*" in actions for a in LAMBDA_LOG_ACTIONS):
                    continue
                spared = resources(st.get("NotResource", []))
                if spared and all(names(x, group) for x in spared):
                    return True
    return False


# Rule 11: where a Task names the function it invokes.
LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke"
PLACEHOLDER = re.compile(r"^\$\{([A-Za-z0-9_]+)\}$")
# The template's directory, for the state machine's DefinitionUri (main sets it from the template's path).
TEMPLATE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def task_targets(states):
    """(state name, what its Task invokes) for every Task of a definition, nested ones included."""
    for name, st in (states or {}).items():
        if st.get("Type") == "Task":
            res = st.get("Resource", "")
            if isinstance(res, str) and res.startswith(LAMBDA_INVOKE):
                args = st.get("Parameters") or st.get("Arguments") or {}
                yield name, args.get("FunctionName", args.get("FunctionName.$"))
            elif isinstance(res, str) and not res.startswith("arn:aws:states:::"):
                yield name, res
        for branch in st.get("Branches", []) or []:
            yield from task_targets(branch.get("States"))
        for nested in (st.get("Iterator"), st.get("ItemProcessor")):
            if nested:
                yield from task_targets(nested.get("States"))


def version_findings(template, cfn):
    """Rule 11 on the transformed template and the state machine's definition file."""
    out = []
    res_all = cfn.get("Resources", {})
    for name, sam in template.get("Resources", {}).items():
        if sam.get("Type") != "AWS::Serverless::StateMachine":
            continue
        uri = sam.get("Properties", {}).get("DefinitionUri")
        if isinstance(uri, str):
            with open(os.path.join(TEMPLATE_DIR, uri)) as f:
                definition = json.load(f)
        else:
            definition = sam.get("Properties", {}).get("Definition") or {}
        subs = res_all.get(name, {}).get("Properties", {}).get("DefinitionSubstitutions", {}) or {}
        for state, target in task_targets(definition.get("States")):
            m = PLACEHOLDER.match(target) if isinstance(target, str) else None
            if not m:
                if not (isinstance(target, str) and re.search(r":function:[^:]+:[0-9]+$", target)):
                    out.append(f"{name} {state}: invokes {target!r}, not a placeholder for a published version")
                continue
            value = subs.get(m.group(1))
            version = ref_target(value) if isinstance(value, dict) and set(value) == {"Ref"} else None
            r = res_all.get(version, {})
            if r.get("Type") != "AWS::Lambda::Version":
                out.append(f"{name} {state}: ${{{m.group(1)}}} is {value!r}, not a published version (AWS::Lambda::Version)")
                continue
            for policy in ("DeletionPolicy", "UpdateReplacePolicy"):
                if r.get(policy) != "Retain":
                    out.append(f"{name} {state}: the version {version} has {policy} {r.get(policy)!r}, not Retain: a deploy "
                               "would delete it under the executions still running on it")
    return out


def parameters_in(template, node):
    """The template parameters an expression refers to: Ref, ${Name} in Fn::Sub, and through the conditions of Fn::If."""
    params = set(template.get("Parameters", {}))
    conditions = template.get("Conditions", {})
    found = set()

    def walk(n):
        if isinstance(n, dict):
            for k, v in n.items():
                if k == "Ref" and isinstance(v, str):
                    found.add(v)
                elif k == "Condition" and isinstance(v, str):
                    found.update(condition_refs(template, v))
                elif k == "Fn::If" and isinstance(v, list) and v and isinstance(v[0], str):
                    found.update(condition_refs(template, v[0]))
                    walk(v[1:])
                elif k == "Fn::Sub":
                    text = v[0] if isinstance(v, list) else v
                    if isinstance(text, str):
                        found.update(re.findall(r"\$\{([A-Za-z0-9]+)\}", text))
                    if isinstance(v, list) and len(v) > 1:
                        walk(v[1])
                else:
                    walk(v)
        elif isinstance(n, list):
            for x in n:
                walk(x)

    walk(node)
    for c in [c for c in found if c in conditions]:
        found |= condition_refs(template, c)
    return found & params


# Rule 12: a function's properties that are not part of its versions (or are SAM's own).
NOT_VERSIONED = {"Policies", "Events", "VersionDescription", "AutoPublishAlias", "AutoPublishAliasAllProperties",
                 "CodeUri", "DeploymentPreference", "ProvisionedConcurrencyConfig"}


def version_description_findings(template):
    """Rule 12, on the template as written (VersionDescription and Globals exist only there)."""
    out = []
    globals_fn = (template.get("Globals") or {}).get("Function") or {}
    for name, res in template.get("Resources", {}).items():
        props = res.get("Properties", {})
        if res.get("Type") != "AWS::Serverless::Function" or "AutoPublishAlias" not in {**globals_fn, **props}:
            continue
        config = {k: v for k, v in {**globals_fn, **props}.items() if k not in NOT_VERSIONED}
        # Globals a function overrides still count: a parameter named in the description that it does not need only
        # publishes a version more.
        needed = parameters_in(template, config) | parameters_in(template, {k: v for k, v in globals_fn.items() if k not in NOT_VERSIONED})
        described = parameters_in(template, props.get("VersionDescription"))
        missing = sorted(needed - described)
        if missing:
            out.append(
                f"{name}: its VersionDescription lacks {', '.join(missing)}: a change of {'it' if len(missing) == 1 else 'them'} "
                "would publish no new version, and the state machine would go on invoking the old configuration"
            )
    return out


def deployed_findings(template):
    """Rules 9 and 10, on the transformed template."""
    try:
        cfn = transformed(template)
    except Exception as e:  # the translator's errors have no common base class
        return [f"the SAM transform refuses the template: {e}"]
    res_all = cfn.get("Resources", {})
    out = version_findings(template, cfn)
    for name, res in res_all.items():
        props = res.get("Properties", {})
        if res.get("Type") == "AWS::Lambda::Function":
            target = (props.get("LoggingConfig") or {}).get("LogGroup")
            if target is None:
                out.append(f"{name}: no LoggingConfig.LogGroup: Lambda would log to /aws/lambda/<name>, a group outside the stack")
                continue
            group, found = stack_log_group(res_all, target, f"{name} LoggingConfig.LogGroup")
            out += found
            role = ref_target(props.get("Role"))
            if group and not confines_logs(res_all, role, group):
                out.append(
                    f"{name}: its role {role} does not deny {', '.join(LAMBDA_LOG_ACTIONS)} on every log group but {group} "
                    "(a Deny with NotResource naming only that group)"
                )
        if res.get("Type") == "AWS::ApiGateway::Stage":
            every_route = [m for m in props.get("MethodSettings") or [] if isinstance(m, dict)
                           and m.get("HttpMethod") == "*" and m.get("ResourcePath") == "/*"]
            if not any("ThrottlingRateLimit" in m and "ThrottlingBurstLimit" in m for m in every_route):
                out.append(f"{name}: the stage does not throttle every route (MethodSettings \"*\" on \"/*\" with "
                           "ThrottlingRateLimit and ThrottlingBurstLimit)")
            setting = props.get("AccessLogSetting") or {}
            if not setting.get("DestinationArn"):
                out.append(f"{name}: the stage writes no access logs (AccessLogSetting.DestinationArn)")
                continue
            out += stack_log_group(res_all, setting["DestinationArn"], f"{name} AccessLogSetting")[1]
            fmt = setting.get("Format")
            try:
                fields = json.loads(fmt) if isinstance(fmt, str) else None
            except ValueError:
                fields = None
            if not isinstance(fields, dict):
                out.append(f"{name}: the access log Format is not a JSON object: {fmt!r}")
                continue
            values = " ".join(str(v) for v in fields.values())
            for what, variables in ACCESS_LOG_FIELDS.items():
                if not any(v in values for v in variables):
                    out.append(f"{name}: the access log Format lacks {what} ({' or '.join(variables)})")
    return out


def load(path):
    template, matches = decode(path)
    if matches:
        raise SystemExit(f"{path}: {matches}")
    return template


def self_test(template):
    """Each rule must fire on a copy of the real template broken in its way, with the finding that rule makes."""
    def statement(t, res, sid):
        for pol in t["Resources"][res]["Properties"]["Policies"]:
            for item in pol.get("Statement", []) if isinstance(pol, dict) else []:
                for st in branches(item):
                    if isinstance(st, dict) and st.get("Sid") == sid:
                        return st
        raise KeyError(sid)

    def policy_doc(t, res):
        return t["Resources"][res]["Properties"]["PolicyDocument"]

    def first_alarm(t):
        return next(r for r in t["Resources"].values() if r.get("Type") == "AWS::CloudWatch::Alarm")

    def fn_props(t, fn):
        return t["Resources"][fn]["Properties"]

    # The EventBridge rule of TransactWriteItems events, whose target is the events function.
    def event(t):
        return fn_props(t, "EventsFunction")["Events"]["TransactWriteItems"]["Properties"]

    cases = []

    def case(what, expect, change):
        t = copy.deepcopy(template)
        change(t)
        cases.append((what, expect, t))

    case("dynamodb on *", "on a wildcard resource *",
         lambda t: statement(t, "BeginFunction", "TransactionRecords").update(Resource="*"))
    case("states on every state machine", "on a wildcard resource",
         lambda t: statement(t, "SweeperFunction", "StartRecoveryExecutions").update(
             Resource={"Fn::Sub": "arn:aws:states:us-east-1:1:stateMachine:*"}))
    case("a broad managed policy", "is not least privilege",
         lambda t: t["Resources"]["LockFunction"]["Properties"]["Policies"].append(
             "arn:aws:iam::aws:policy/AmazonDynamoDBFullAccess"))
    case("an unauthenticated API", "not AWS_IAM",
         lambda t: t["Resources"]["TransactionsApi"]["Properties"]["Auth"].update(DefaultAuthorizer="NONE"))
    case("an API route without auth", "authorization changed",
         lambda t: t["Resources"]["StageFunction"]["Properties"]["Events"]["Create"]["Properties"].update(
             Auth={"Authorizer": "NONE"}))
    case("dynamodb on * inside Fn::If", "['dynamodb:Scan'] on a wildcard resource *",
         lambda t: t["Resources"]["StatusFunction"]["Properties"]["Policies"][0]["Statement"].append(
             {"Fn::If": ["TracingEnabled", {"Sid": "Hidden", "Effect": "Allow", "Action": "dynamodb:Scan",
                                            "Resource": "*"}, NO_VALUE]}))
    case("sqs on *", "['sqs:SendMessage'] on a wildcard resource *",
         lambda t: t["Resources"]["SweeperFunction"]["Properties"]["Policies"][0]["Statement"].append(
             {"Sid": "Queues", "Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*"}))
    case("sns on every topic", "['sns:Publish'] on a wildcard resource",
         lambda t: t["Resources"]["SweeperFunction"]["Properties"]["Policies"][0]["Statement"].append(
             {"Sid": "Topics", "Effect": "Allow", "Action": ["sns:Publish"],
              "Resource": {"Fn::Sub": "arn:${AWS::Partition}:sns:${AWS::Region}:${AWS::AccountId}:*"}}))
    case("cloudwatch on *", "['cloudwatch:PutMetricAlarm'] on a wildcard resource *",
         lambda t: t["Resources"]["SweeperFunction"]["Properties"]["Policies"][0]["Statement"].append(
             {"Sid": "Alarms", "Effect": "Allow", "Action": ["cloudwatch:PutMetricAlarm"], "Resource": "*"}))
    case("a logs action beyond the log delivery allow-list", "['logs:PutLogEvents'] on a wildcard resource *",
         lambda t: statement(t, "TransactionStateMachine", "LogDelivery")["Action"].append("logs:PutLogEvents"))
    case("an xray action beyond the allow-list, inside Fn::If", "['xray:BatchGetTraces'] on a wildcard resource *",
         lambda t: statement(t, "TransactionStateMachine", "XRayTraces")["Action"].append("xray:BatchGetTraces"))
    case("a log resource policy on every log group", "on a wildcard resource *",
         lambda t: policy_doc(t, "FailedExecutionsLogPolicy").update(
             {"Fn::Sub": policy_doc(t, "FailedExecutionsLogPolicy")["Fn::Sub"].replace(
                 "${FailedExecutionsLogGroup.Arn}", "*")}))
    case("a queue policy open to everyone", "allows everyone",
         lambda t: [st.update(Principal="*") or st.pop("Condition") for st in policy_doc(
             t, "EventsDeadLetterQueuePolicy")["Statement"] if st.get("Effect") == "Allow"])
    case("an unencrypted dead-letter queue", "without encryption",
         lambda t: t["Resources"]["EventsDeadLetterQueue"]["Properties"].pop("SqsManagedSseEnabled"))
    case("a dead-letter queue SAM creates", "does not name a queue of this template",
         lambda t: event(t).update(DeadLetterConfig={"Type": "SQS"}))
    case("an EventBridge rule without a dead-letter queue", "does not name a queue of this template",
         lambda t: event(t).pop("DeadLetterConfig"))
    case("an EventBridge rule without a retry policy", "without a RetryPolicy",
         lambda t: event(t).pop("RetryPolicy"))
    case("no queue policy for the dead-letter queue", "no queue policy lets events.amazonaws.com send",
         lambda t: t["Resources"].pop("EventsDeadLetterQueuePolicy"))
    case("an EventBridge target without its own dead-letter queue", "EventsFunction: an EventBridge target without a DeadLetterQueue",
         lambda t: fn_props(t, "EventsFunction").pop("DeadLetterQueue"))
    case("a function dead-letter queue outside the template", "EventsFunction: the DeadLetterQueue",
         lambda t: fn_props(t, "EventsFunction")["DeadLetterQueue"].update(TargetArn="arn:aws:sqs:us-east-1:1:elsewhere"))
    case("a queue policy for another rule", "no queue policy lets events.amazonaws.com send",
         lambda t: [st["Condition"]["ArnEquals"].update({"aws:SourceArn": "arn:aws:events:us-east-1:1:rule/other"})
                    for st in policy_doc(t, "EventsDeadLetterQueuePolicy")["Statement"] if st.get("Effect") == "Allow"])
    case("an alarm notifying a fixed topic", "is not the AlarmTopicArn parameter",
         lambda t: first_alarm(t)["Properties"].update(AlarmActions=["arn:aws:sns:us-east-1:123456789012:ops"]))
    case("an alarm whose OKActions ignore the condition", "is not the AlarmTopicArn parameter",
         lambda t: first_alarm(t)["Properties"].update(OKActions=[{"Ref": "AlarmTopicArn"}]))
    case("an alarm created whatever EnableAlarms says", "does not depend on the EnableAlarms parameter",
         lambda t: first_alarm(t).pop("Condition"))
    old_form = "arn:*:dynamodb:${aws:RequestedRegion}:${aws:PrincipalAccount}:table/"
    case("policy variables in the Region and account of the caller's tables", "a policy variable in the Region or account",
         lambda t: statement(t, "LockFunction", "AllowedTablesLocks").update(
             Resource={"Fn::Split": [",", {"Fn::Join": ["", [old_form, {"Fn::Join": ["," + old_form, {"Ref": "AllowedTables"}]}]]}]}))
    case("an open account without aws:ResourceAccount", "does not pin aws:RequestedRegion to AWS::Region and aws:ResourceAccount",
         lambda t: statement(t, "ApplyFunction", "AllowedTablesWrites")["Condition"]["StringEquals"].pop("aws:ResourceAccount"))
    def access_log(t):
        return t["Resources"]["TransactionsApi"]["Properties"]["AccessLogSetting"]

    case("a function logging to a group Lambda makes", "LockFunction: no LoggingConfig.LogGroup",
         lambda t: fn_props(t, "LockFunction")["LoggingConfig"].pop("LogGroup"))
    case("a function log group without retention", "its log group ApplyLogGroup has no RetentionInDays",
         lambda t: t["Resources"]["ApplyLogGroup"]["Properties"].pop("RetentionInDays"))
    case("a function log group kept after the stack", "its log group SaveLogGroup stays when the stack is deleted",
         lambda t: t["Resources"]["SaveLogGroup"].update(DeletionPolicy="Retain"))
    case("a function role that may write another function's log group", "StatusFunction: its role",
         lambda t: statement(t, "StatusFunction", "OwnLogGroupOnly")["NotResource"].append(
             {"Fn::Sub": "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:${BeginLogGroup}:*"}))
    case("a function role without the deny", "SweeperFunction: its role",
         lambda t: fn_props(t, "SweeperFunction")["Policies"][0]["Statement"].remove(
             statement(t, "SweeperFunction", "OwnLogGroupOnly")))
    case("the events function without the deny", "EventsFunction: its role",
         lambda t: fn_props(t, "EventsFunction")["Policies"][0]["Statement"].remove(
             statement(t, "EventsFunction", "OwnLogGroupOnly")))
    case("the events function's log group without retention", "its log group EventsLogGroup has no RetentionInDays",
         lambda t: t["Resources"]["EventsLogGroup"]["Properties"].pop("RetentionInDays"))
    case("an API without access logs", "the stage writes no access logs",
         lambda t: t["Resources"]["TransactionsApi"]["Properties"].pop("AccessLogSetting"))
    case("access logs to a group without retention", "its log group ApiAccessLogGroup has no RetentionInDays",
         lambda t: t["Resources"]["ApiAccessLogGroup"]["Properties"].pop("RetentionInDays"))
    case("access logs without the caller", "the access log Format lacks the caller",
         lambda t: access_log(t).update(Format=access_log(t)["Format"].replace("$context.identity.", "$context.")))
    def throttling(t):
        return t["Resources"]["TransactionsApi"]["Properties"]["MethodSettings"][0]

    case("an API without throttling", "the stage does not throttle every route",
         lambda t: t["Resources"]["TransactionsApi"]["Properties"].pop("MethodSettings"))
    case("an API throttled without a burst limit", "the stage does not throttle every route",
         lambda t: throttling(t).pop("ThrottlingBurstLimit"))
    case("an API throttled on one route only", "the stage does not throttle every route",
         lambda t: throttling(t).update(ResourcePath="/transactions", HttpMethod="POST"))

    def substitutions(t):
        return t["Resources"]["TransactionStateMachine"]["Properties"]["DefinitionSubstitutions"]

    case("the state machine invoking a function's latest code", "${LockFunctionArn} is {'Fn::GetAtt'",
         lambda t: substitutions(t).update(LockFunctionArn={"Fn::GetAtt": ["LockFunction", "Arn"]}))
    case("the state machine invoking an alias", "${CommitFunctionArn} is {'Ref': 'CommitFunctionAliaslive'}",
         lambda t: substitutions(t).update(CommitFunctionArn={"Ref": "CommitFunction.Alias"}))
    case("a version a deploy would delete when it replaces it", "has UpdateReplacePolicy None",
         lambda t: t["Resources"]["ApplyFunction"].pop("UpdateReplacePolicy"))
    case("a version description without a parameter the function reads", "BeginFunction: its VersionDescription lacks LeaseSeconds",
         lambda t: fn_props(t, "BeginFunction")["VersionDescription"]["Fn::Sub"].__setitem__(
             0, fn_props(t, "BeginFunction")["VersionDescription"]["Fn::Sub"][0].replace("${LeaseSeconds}", "")))
    case("a version description without a parameter a condition reads", "ReleaseFunction: its VersionDescription lacks EnableMetrics",
         lambda t: fn_props(t, "ReleaseFunction")["VersionDescription"]["Fn::Sub"].__setitem__(
             0, fn_props(t, "ReleaseFunction")["VersionDescription"]["Fn::Sub"][0].replace("${EnableMetrics}", "")))
    ok = True
    for what, expect, broken in cases:
        got = findings(broken)
        hit = [f for f in got if expect in f]
        print(f"self-test: {what}: {'caught' if hit else 'MISSED'}{': ' + hit[0] if hit else ''}")
        if not hit and got:
            print(f"self-test:   (other findings: {got[:3]})")
        ok &= bool(hit)
    return ok


def main():
    args = sys.argv[1:]
    global TEMPLATE_DIR
    path = next((a for a in args if not a.startswith("--")), "template.yaml")
    TEMPLATE_DIR = os.path.dirname(os.path.abspath(path))
    template = load(path)
    if "--self-test" in args:
        sys.exit(0 if self_test(template) and not findings(template) else 1)
    found = findings(template)
    for f in found:
        print("FINDING:", f)
    print(f"policies: {len(found)} findings")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()

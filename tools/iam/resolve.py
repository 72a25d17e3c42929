"""The IAM policies template.yaml deploys, as AWS would hold them, for a sample account, Region and stack.

  python tools/iam/resolve.py [--template template.yaml] [--config NAME ...] [--mutate NAME ...] > resolved.json

Runs the SAM transform (aws-sam-translator, the library `sam build`/`sam deploy` use), then resolves every intrinsic
function (Ref, Fn::Sub, Fn::Join, Fn::Split, Fn::Select, Fn::GetAtt, Fn::If with the template's Conditions, the
pseudo parameters) for account 123456789012, Region eu-west-1, stack dynamo-saga and the parameter values of each
configuration in CONFIGS, and evaluates the template's Rules. The output (JSON, one entry per configuration) is what
tools/iam/sim.mjs evaluates calls against: each principal's identity policies, the resource policies, the API's
integrations, the EventBridge rules and their targets, the functions' own dead-letter queues, the SQS queues, and the
names and ARNs the call log's local names map to.

Physical names CloudFormation generates (a table, a function, a role) are made up as <stack>-<logical id>-SAMPLE, the
shape CloudFormation gives them; nothing depends on their random part.

--mutate applies a named change to the template before the transform (MUTATIONS): the simulation's self-test uses
them to show it catches each defect it was built to find. --check-rules checks the template's Rules instead: Express
refuses every SweepAfterSeconds up to 300, MRSC mode names its transactions table and the deploy creating it two
other Regions, and every samconfig.toml environment passes them.
"""

import argparse
import copy
import json
import logging
import os
import re
import sys

ACCOUNT = "123456789012"
REGION = "eu-west-1"
STACK = "dynamo-saga"
PARTITION = "aws"
URL_SUFFIX = "amazonaws.com"
API_ID = "a1b2c3d4e5"
SAMPLE = "SAMPLE"

# Tables transactions may write: the local stack's allow-list (tools/stack.sh), whose t-* admits the tests' tables.
ALLOWED_TABLES = "Orders,Inventory,shop,t-*"

# Every configuration the simulation runs: both workflow types, each with alarms, tracing, metrics and the dashboard
# all on and all off, and one mixed each way so that every flag is also seen beside the others' opposite; one of them
# leaves the account's API Gateway logging role to the account; two in MRSC mode. Express needs SweepAfterSeconds over 300 (the
# template's Rules refuse less).
_ON = {"Tracing": "true", "EnableAlarms": "true", "EnableMetrics": "true", "EnableDashboard": "true"}
_OFF = {k: "false" for k in _ON}
_STRONG = {"MultiRegionConsistency": "STRONG", "TransactionsTableName": "dynamo-saga-transactions"}
CONFIGS = {
    "standard-all-on": {"WorkflowType": "STANDARD", **_ON},
    "standard-all-off": {"WorkflowType": "STANDARD", **_OFF},
    "standard-mixed": {"WorkflowType": "STANDARD", **_OFF, "Tracing": "true", "EnableMetrics": "true", "CreateApiGatewayLoggingRole": "false"},
    "express-all-on": {"WorkflowType": "EXPRESS", "SweepAfterSeconds": "360", **_ON},
    "express-all-off": {"WorkflowType": "EXPRESS", "SweepAfterSeconds": "360", **_OFF},
    "express-mixed": {"WorkflowType": "EXPRESS", "SweepAfterSeconds": "360", **_ON, "Tracing": "false", "EnableMetrics": "false"},
    # MRSC: the group's first Region, which creates the transactions table (two replicas and a witness), and another
    # Region's stack, which names it; a pinned MREC Region beside them.
    "strong-first-region": {"WorkflowType": "STANDARD", **_ON, **_STRONG, "GlobalTableReplicaRegion": "eu-west-2",
                            "GlobalTableThirdRegion": "eu-central-1", "GlobalTableThirdRegionRole": "WITNESS"},
    "strong-other-region": {"WorkflowType": "EXPRESS", "SweepAfterSeconds": "360", **_OFF, **_STRONG,
                            "EventualConsistencyRegion": REGION},
}
BASE_PARAMETERS = {"AllowedTables": ALLOWED_TABLES, "AlarmTopicArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:ops"}

NO_VALUE = object()


class Unresolved(Exception):
    pass


# ---------------------------------------------------------------- mutations (the self-test's known defects)

def _functions(t):
    return {n: r for n, r in t["Resources"].items() if r.get("Type") == "AWS::Serverless::Function"}


def _statements(res):
    for pol in res.get("Properties", {}).get("Policies", []):
        if isinstance(pol, dict):
            for st in pol.get("Statement", []):
                # A statement held in one configuration only: !If [Condition, statement, !Ref AWS::NoValue].
                if isinstance(st, dict) and "Fn::If" in st:
                    st = st["Fn::If"][1]
                if isinstance(st, dict):
                    yield st


def _old_arn_form(t):
    """The ARN form template.yaml shipped before issue 27: IAM policy variables in the Region and account parts of
    the caller's table ARNs, which IAM never substitutes there."""
    old = "arn:*:dynamodb:${aws:RequestedRegion}:${aws:PrincipalAccount}:table/"
    for res in _functions(t).values():
        for st in _statements(res):
            if st.get("Sid", "").startswith("AllowedTables"):
                st["Resource"] = {"Fn::Split": [",", {"Fn::Join": ["", [old, {"Fn::Join": ["," + old, {"Ref": "AllowedTables"}]}]]}]}
                st["Condition"] = {"StringEquals": {"aws:RequestedRegion": {"Ref": "AWS::Region"}}}


def _drop_action(logical, sid, action):
    def change(t):
        for st in _statements(t["Resources"][logical]):
            if st.get("Sid") == sid:
                st["Action"] = [a for a in st["Action"] if a != action]
                return
        raise SystemExit(f"mutation: {logical} has no statement {sid}")
    return change


def _caller_credentials(t):
    """The API as it was before issue 27: IAM auth without InvokeRole, so API Gateway invokes the functions with the
    caller's own credentials."""
    t["Resources"]["TransactionsApi"]["Properties"]["Auth"].pop("InvokeRole", None)


def _logs_to_another_group(t):
    """Lock's OwnLogGroupOnly sparing Begin's log group instead of its own: Lock could not write its logs at all."""
    for st in _statements(t["Resources"]["LockFunction"]):
        if st.get("Sid") == "OwnLogGroupOnly":
            st["NotResource"] = [x if not isinstance(x, dict) else {"Fn::Sub": x["Fn::Sub"].replace("${LockLogGroup}", "${BeginLogGroup}")} for x in st["NotResource"]]
            return
    raise SystemExit("mutation: LockFunction has no statement OwnLogGroupOnly")


def _invoke_unqualified_only(t):
    """The state machine's role allowed to invoke each function's unqualified ARN only, as it was before the state
    machine invoked published versions: every Task would be denied."""
    sm = t["Resources"]["TransactionStateMachine"]["Properties"]
    targets = [p["LambdaInvokePolicy"]["FunctionName"]["Ref"] for p in sm["Policies"] if isinstance(p, dict) and "LambdaInvokePolicy" in p]
    sm["Policies"] = [p for p in sm["Policies"] if not (isinstance(p, dict) and "LambdaInvokePolicy" in p)]
    sm["Policies"].append({"Version": "2012-10-17", "Statement": [
        {"Sid": "Unqualified", "Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": [{"Fn::GetAtt": [f, "Arn"]} for f in targets]}]})


def _events_without_dead_letter_queue(t):
    """The events function without SAM's DeadLetterQueue: its role holds no sqs:SendMessage, so it could not send a
    refused event to the dead-letter queue (and Lambda would drop an event it gave up on)."""
    t["Resources"]["EventsFunction"]["Properties"].pop("DeadLetterQueue")


def _events_source_exact(t):
    """The events rule matching source dynamo-saga alone, as the state machine's rule did: a team's own source
    (dynamo-saga.orders), which entitlements tell apart, would start nothing."""
    t["Resources"]["EventsFunction"]["Properties"]["Events"]["TransactWriteItems"]["Properties"]["Pattern"]["source"] = ["dynamo-saga"]


MUTATIONS = {
    "old-arn-form": _old_arn_form,
    "rollback-without-delete": _drop_action("RollbackFunction", "TransactionRecords", "dynamodb:DeleteItem"),
    "api-caller-credentials": _caller_credentials,
    "sweeper-without-describe": _drop_action("SweeperFunction", "DescribeExecutions", "states:DescribeExecution"),
    "sweeper-without-expiry-scan": _drop_action("SweeperFunction", "ExpiredRecords", "dynamodb:Scan"),
    "logs-to-another-group": _logs_to_another_group,
    "invoke-unqualified-only": _invoke_unqualified_only,
    "events-without-dead-letter-queue": _events_without_dead_letter_queue,
    "events-source-exact": _events_source_exact,
}


# ---------------------------------------------------------------- the SAM transform

def load_sam(path):
    from samtranslator.yaml_helper import yaml_parse

    with open(path) as f:
        return yaml_parse(f.read())


def transform(sam, parameters):
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    # The translator counts usage metrics it never publishes here, and says so on exit.
    logging.getLogger("samtranslator.metrics").setLevel(logging.ERROR)
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    t = copy.deepcopy(sam)
    # The translator takes S3 locations only; the code and the definition do not touch any policy.
    for r in t.get("Resources", {}).values():
        p = r.setdefault("Properties", {})
        if r.get("Type") == "AWS::Serverless::Function":
            p["CodeUri"] = "s3://sample-bucket/code.zip"
        if r.get("Type") == "AWS::Serverless::StateMachine" and "DefinitionUri" in p:
            p["DefinitionUri"] = "s3://sample-bucket/transaction.asl.json"
    pseudo = {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::StackName": STACK, "AWS::Partition": PARTITION}
    return Translator(None, Parser(), plugins=[]).translate(t, parameter_values={**parameters, **pseudo}, get_managed_policy_map=lambda: {})


# ---------------------------------------------------------------- intrinsic functions

class Resolver:
    def __init__(self, cfn, parameters):
        self.cfn = cfn
        self.res = cfn.get("Resources", {})
        self.params = {}
        for name, spec in cfn.get("Parameters", {}).items():
            if name in parameters:
                v = parameters[name]
            elif "Default" in spec:
                v = spec["Default"]
            else:
                raise SystemExit(f"parameter {name} has no value and no default")
            v = str(v)
            self.params[name] = v.split(",") if spec.get("Type") == "CommaDelimitedList" else v
        self.check_parameters(cfn.get("Parameters", {}))
        self.conditions = {}

    def check_parameters(self, specs):
        for name, spec in specs.items():
            v = self.params[name]
            values = v if isinstance(v, list) else [v]
            for x in values:
                if "AllowedValues" in spec and x not in [str(a) for a in spec["AllowedValues"]]:
                    raise SystemExit(f"parameter {name}={x!r} is not one of its AllowedValues")
                if "AllowedPattern" in spec and not re.fullmatch(spec["AllowedPattern"], x):
                    raise SystemExit(f"parameter {name}={x!r} does not match its AllowedPattern")
                if spec.get("Type") == "Number":
                    n = float(x)
                    if "MinValue" in spec and n < float(spec["MinValue"]) or "MaxValue" in spec and n > float(spec["MaxValue"]):
                        raise SystemExit(f"parameter {name}={x} is outside MinValue/MaxValue")

    # -- names and attributes of resources
    def props(self, logical):
        return self.res[logical].get("Properties", {})

    def generated(self, logical):
        return f"{STACK}-{logical}-{SAMPLE}"

    def name_of(self, logical):
        """The physical name of a resource: its name property when the template sets one."""
        r = self.res[logical]
        key = {
            "AWS::Lambda::Function": "FunctionName",
            "AWS::StepFunctions::StateMachine": "StateMachineName",
            "AWS::Logs::LogGroup": "LogGroupName",
            "AWS::Events::Rule": "Name",
            "AWS::CloudWatch::Alarm": "AlarmName",
            "AWS::DynamoDB::Table": "TableName",
            "AWS::DynamoDB::GlobalTable": "TableName",
            "AWS::SQS::Queue": "QueueName",
            "AWS::IAM::Role": "RoleName",
            "AWS::CloudWatch::Dashboard": "DashboardName",
        }.get(r["Type"])
        if key and key in r.get("Properties", {}):
            return self.eval(r["Properties"][key])
        return self.generated(logical)

    def arn(self, service, rest, region=REGION, account=ACCOUNT):
        return f"arn:{PARTITION}:{service}:{region}:{account}:{rest}"

    def ref(self, name):
        if name in self.params:
            return self.params[name]
        pseudo = {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::StackName": STACK,
            "AWS::Partition": PARTITION,
            "AWS::URLSuffix": URL_SUFFIX,
            "AWS::StackId": self.arn("cloudformation", f"stack/{STACK}/00000000-0000-0000-0000-000000000000"),
            "AWS::NotificationARNs": [],
        }
        if name in pseudo:
            return pseudo[name]
        if name == "AWS::NoValue":
            return NO_VALUE
        if name not in self.res:
            raise Unresolved(f"Ref {name}")
        t = self.res[name]["Type"]
        if t == "AWS::StepFunctions::StateMachine":
            return self.arn("states", f"stateMachine:{self.name_of(name)}")
        if t == "AWS::SQS::Queue":
            return f"https://sqs.{REGION}.{URL_SUFFIX}/{ACCOUNT}/{self.name_of(name)}"
        if t == "AWS::ApiGateway::RestApi":
            return API_ID
        if t == "AWS::ApiGateway::Stage":
            return self.eval(self.props(name)["StageName"])
        if t == "AWS::SNS::Topic":
            return self.arn("sns", self.name_of(name))
        if t == "AWS::Lambda::Version":
            # A published version's ARN: the function's, qualified with the version's number (the sample's first).
            return self.arn("lambda", f"function:{self.eval(self.props(name)['FunctionName'])}:1")
        if t == "AWS::Lambda::Alias":
            return self.arn("lambda", f"function:{self.eval(self.props(name)['FunctionName'])}:{self.eval(self.props(name)['Name'])}")
        return self.name_of(name)

    def getatt(self, logical, attr):
        if logical not in self.res:
            raise Unresolved(f"GetAtt {logical}.{attr}")
        t = self.res[logical]["Type"]
        name = self.name_of(logical)
        table = {
            ("AWS::DynamoDB::Table", "Arn"): lambda: self.arn("dynamodb", f"table/{name}"),
            ("AWS::DynamoDB::GlobalTable", "Arn"): lambda: self.arn("dynamodb", f"table/{name}"),
            ("AWS::Lambda::Function", "Arn"): lambda: self.arn("lambda", f"function:{name}"),
            ("AWS::Lambda::Version", "Version"): lambda: "1",
            ("AWS::IAM::Role", "Arn"): lambda: f"arn:{PARTITION}:iam::{ACCOUNT}:role/{name}",
            ("AWS::SQS::Queue", "Arn"): lambda: self.arn("sqs", name),
            ("AWS::SQS::Queue", "QueueName"): lambda: name,
            ("AWS::SQS::Queue", "QueueUrl"): lambda: self.ref(logical),
            ("AWS::Logs::LogGroup", "Arn"): lambda: self.arn("logs", f"log-group:{name}:*"),
            ("AWS::Events::Rule", "Arn"): lambda: self.arn("events", f"rule/{name}"),
            ("AWS::StepFunctions::StateMachine", "Arn"): lambda: self.ref(logical),
            ("AWS::StepFunctions::StateMachine", "Name"): lambda: name,
            ("AWS::CloudWatch::Alarm", "Arn"): lambda: self.arn("cloudwatch", f"alarm:{name}"),
            ("AWS::ApiGateway::RestApi", "RootResourceId"): lambda: "r00tid",
        }
        if (t, attr) not in table:
            raise Unresolved(f"GetAtt {logical}.{attr} ({t})")
        return table[(t, attr)]()

    # -- conditions
    def condition(self, name):
        if name not in self.conditions:
            self.conditions[name] = bool(self.eval(self.cfn["Conditions"][name]))
        return self.conditions[name]

    # -- evaluation
    def sub(self, template, variables):
        def one(m):
            key = m.group(1)
            if key.startswith("!"):
                return "${" + key[1:] + "}"
            if key in variables:
                v = variables[key]
            elif "." in key and key.split(".", 1)[0] in self.res:
                v = self.getatt(*key.split(".", 1))
            elif key in self.params or key.startswith("AWS::") or key in self.res:
                v = self.ref(key)
            elif ":" in key:
                return m.group(0)  # an IAM policy variable such as ${aws:username}: IAM's to substitute
            else:
                raise Unresolved(f"Fn::Sub variable {key}")
            if isinstance(v, list) or v is NO_VALUE:
                raise Unresolved(f"Fn::Sub variable {key} is not a string")
            return str(v)

        return re.sub(r"\$\{([^}]*)\}", one, template)

    def eval(self, node):
        if isinstance(node, list):
            out = [self.eval(x) for x in node]
            return [x for x in out if x is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (k, v), = node.items()
            if k == "Ref":
                return self.ref(v)
            if k == "Condition":
                return self.condition(v)
            if k == "Fn::GetAtt":
                logical, attr = v if isinstance(v, list) else v.split(".", 1)
                return self.getatt(logical, attr)
            if k == "Fn::Sub":
                if isinstance(v, str):
                    return self.sub(v, {})
                template, variables = v
                return self.sub(template, {n: self.eval(x) for n, x in variables.items()})
            if k == "Fn::Join":
                delim, items = v
                if not isinstance(delim, str):
                    raise Unresolved("Fn::Join's delimiter must be a literal string")
                items = self.eval(items)
                return delim.join(str(i) for i in items)
            if k == "Fn::Split":
                delim, source = v
                if not isinstance(delim, str):
                    raise Unresolved("Fn::Split's delimiter must be a literal string")
                return self.eval(source).split(delim)
            if k == "Fn::Select":
                i, items = v
                return self.eval(items)[int(self.eval(i))]
            if k == "Fn::If":
                cond, a, b = v
                return self.eval(a if self.condition(cond) else b)
            if k == "Fn::Equals":
                a, b = (self.eval(x) for x in v)
                return str(a) == str(b)
            if k == "Fn::Not":
                return not self.eval(v[0])
            if k == "Fn::And":
                return all(self.eval(x) for x in v)
            if k == "Fn::Or":
                return any(self.eval(x) for x in v)
            if k == "Fn::Contains":
                items, x = v
                return str(self.eval(x)) in [str(i) for i in self.eval(items)]
            if k == "Fn::FindInMap":
                m, a, b = (self.eval(x) for x in v)
                return self.cfn["Mappings"][m][a][b]
            if k == "Fn::Base64":
                return self.eval(v)
            if k.startswith("Fn::"):
                raise Unresolved(k)
        out = {}
        for k, v in node.items():
            x = self.eval(v)
            if x is not NO_VALUE:
                out[k] = x
        return out

    def exists(self, logical):
        c = self.res[logical].get("Condition")
        return c is None or self.condition(c)


def check_rules(cfn, r):
    """Each rule of the template's Rules section whose condition holds: the assertions that fail, with their
    descriptions (CloudFormation refuses the stack operation for any)."""
    failed = []
    for name, rule in (cfn.get("Rules") or {}).items():
        if "RuleCondition" in rule and not r.eval(rule["RuleCondition"]):
            continue
        for a in rule.get("Assertions", []):
            if not r.eval(a["Assert"]):
                failed.append(f"{name}: {a.get('AssertDescription', 'assertion failed')}")
    return failed


# ---------------------------------------------------------------- what the simulation needs

def lambda_permission_statement(r, logical):
    p = r.eval(r.props(logical))
    st = {"Sid": logical, "Effect": "Allow", "Principal": {"Service": p["Principal"]}, "Action": p["Action"]}
    cond = {}
    if "SourceArn" in p:
        cond["ArnLike"] = {"AWS:SourceArn": p["SourceArn"]}
    if "SourceAccount" in p:
        cond["StringEquals"] = {"AWS:SourceAccount": p["SourceAccount"]}
    if cond:
        st["Condition"] = cond
    return p["FunctionName"], st


def resolve(sam, config, parameters):
    cfn = transform(sam, parameters)
    r = Resolver(cfn, parameters)
    rules = check_rules(cfn, r)
    import samtranslator

    out = {
        "config": config,
        "translator": f"aws-sam-translator {samtranslator.__version__}",
        "parameters": {k: v for k, v in r.params.items()},
        "account": ACCOUNT,
        "region": REGION,
        "partition": PARTITION,
        "stack": STACK,
        "rulesFailed": rules,
        "functions": {},
        "roles": {},
        "resourcePolicies": {},
        "api": None,
        "rules": [],
        "stateMachine": None,
        "logGroups": {},
        "symbols": {},
    }
    res = cfn["Resources"]

    def symbol(value, name):
        if isinstance(value, str):
            out["symbols"][value] = name

    symbol(ACCOUNT, "${AWS::AccountId}")
    symbol(REGION, "${AWS::Region}")
    for logical, spec in res.items():
        if not r.exists(logical):
            continue
        t = spec["Type"]
        props = spec.get("Properties", {})
        if t == "AWS::IAM::Role":
            p = r.eval(props)
            out["roles"][logical] = {
                "arn": r.getatt(logical, "Arn"),
                "trust": p.get("AssumeRolePolicyDocument"),
                "inline": [{"name": x["PolicyName"], "document": x["PolicyDocument"]} for x in p.get("Policies", [])],
                "managed": p.get("ManagedPolicyArns", []),
            }
            symbol(r.getatt(logical, "Arn"), f"${{{logical}.Arn}}")
        elif t == "AWS::Lambda::Function":
            p = r.eval(props)
            # The function's name in the local stack: its Handler, the binary cargo lambda watch runs for it (the
            # deployed package's bootstrap holds them all and runs the one its Handler names).
            binary = p.get("Handler")
            role = spec["Properties"]["Role"]["Fn::GetAtt"][0]
            log_group = p.get("LoggingConfig", {}).get("LogGroup") or f"/aws/lambda/{r.name_of(logical)}"
            out["functions"][logical] = {
                "binary": binary,
                "name": r.name_of(logical),
                "arn": r.getatt(logical, "Arn"),
                "role": role,
                "tracing": p.get("TracingConfig", {}).get("Mode", "PassThrough"),
                "logGroup": log_group,
                "environment": p.get("Environment", {}).get("Variables", {}),
                # Where Lambda sends an asynchronous event it gave up on (SAM's DeadLetterQueue), with this role.
                "deadLetter": (p.get("DeadLetterConfig") or {}).get("TargetArn"),
            }
            symbol(r.getatt(logical, "Arn"), f"${{{logical}.Arn}}")
            symbol(r.name_of(logical), f"${{{logical}}}")
        elif t == "AWS::Lambda::Permission":
            fn, st = lambda_permission_statement(r, logical)
            fn_logical = next(n for n in res if res[n]["Type"] == "AWS::Lambda::Function" and r.name_of(n) == fn)
            key = r.getatt(fn_logical, "Arn")
            doc = out["resourcePolicies"].setdefault(key, {"Version": "2012-10-17", "Statement": []})
            st["Resource"] = key
            doc["Statement"].append(st)
        elif t == "AWS::SQS::QueuePolicy":
            p = r.eval(props)
            for q in p["Queues"]:
                qn = q.rsplit("/", 1)[1]
                out["resourcePolicies"][r.arn("sqs", qn)] = p["PolicyDocument"]
        elif t == "AWS::Logs::ResourcePolicy":
            p = r.eval(props)
            doc = json.loads(p["PolicyDocument"]) if isinstance(p["PolicyDocument"], str) else p["PolicyDocument"]
            out["resourcePolicies"].setdefault("logs", {"Version": "2012-10-17", "Statement": []})["Statement"] += doc["Statement"]
        elif t == "AWS::SQS::Queue":
            # The call log names a queue by its name; the simulation maps a local one to the deployed one by its URL.
            out.setdefault("queues", {})[logical] = {"name": r.name_of(logical), "arn": r.getatt(logical, "Arn"), "url": r.ref(logical)}
            symbol(r.getatt(logical, "Arn"), f"${{{logical}.Arn}}")
        elif t == "AWS::Logs::LogGroup":
            out["logGroups"][logical] = {"name": r.name_of(logical), "arn": r.getatt(logical, "Arn")}
        elif t in ("AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable"):
            out.setdefault("tables", {})[logical] = {"name": r.name_of(logical), "arn": r.getatt(logical, "Arn")}
            symbol(r.getatt(logical, "Arn"), f"${{{logical}.Arn}}")
            symbol(r.name_of(logical), f"${{{logical}}}")
        elif t == "AWS::StepFunctions::StateMachine":
            p = r.eval(props)
            out["stateMachine"] = {
                "logical": logical,
                "name": r.name_of(logical),
                "arn": r.ref(logical),
                "type": p.get("StateMachineType", "STANDARD"),
                "role": spec["Properties"]["RoleArn"]["Fn::GetAtt"][0],
                "logging": bool(p.get("LoggingConfiguration", {}).get("Destinations")),
                "tracing": bool(p.get("TracingConfiguration", {}).get("Enabled")),
                "substitutions": p.get("DefinitionSubstitutions", {}),
            }
            symbol(r.ref(logical), f"${{{logical}}}")
            symbol(r.name_of(logical), f"${{{logical}.Name}}")
        elif t == "AWS::Events::Rule":
            p = r.eval(props)
            out["rules"].append({
                "logical": logical,
                "arn": r.getatt(logical, "Arn"),
                "schedule": p.get("ScheduleExpression"),
                "pattern": p.get("EventPattern"),
                "targets": [{"arn": x["Arn"], "role": x.get("RoleArn"), "deadLetter": (x.get("DeadLetterConfig") or {}).get("Arn")} for x in p.get("Targets", [])],
            })
            symbol(r.getatt(logical, "Arn"), f"${{{logical}.Arn}}")
        elif t == "AWS::ApiGateway::RestApi":
            p = r.eval(props)
            routes = []
            for path, methods in p["Body"]["paths"].items():
                for method, m in methods.items():
                    integ = m.get("x-amazon-apigateway-integration", {})
                    uri = integ.get("uri", "")
                    fn = re.search(r"functions/(arn:[^/]+)/invocations", uri)
                    routes.append({
                        "path": path,
                        "method": method.upper(),
                        "function": fn.group(1) if fn else None,
                        "credentials": integ.get("credentials"),
                        "auth": [list(s) for s in m.get("security", [])],
                    })
            stage_props = next(res[n]["Properties"] for n in res if res[n]["Type"] == "AWS::ApiGateway::Stage")
            stage = r.eval(stage_props["StageName"])
            # The access logs go to the stage's destination, written with the account's API Gateway logging role: the
            # template's when it makes the account name it, otherwise one outside the template.
            access_log = r.eval(stage_props.get("AccessLogSetting", {})).get("DestinationArn")
            account = next((n for n in res if res[n]["Type"] == "AWS::ApiGateway::Account" and r.exists(n)), None)
            log_role = None
            if account:
                getatt = res[account]["Properties"]["CloudWatchRoleArn"]["Fn::GetAtt"]
                log_role = getatt[0] if isinstance(getatt, list) else getatt.split(".", 1)[0]
            out["api"] = {
                "id": API_ID,
                "stage": stage,
                "routes": routes,
                "arn": r.arn("execute-api", API_ID),
                "accessLog": access_log,
                "accountLogRole": log_role,
            }
            symbol(API_ID, "${TransactionsApi}")
    # Policies attached to a role from outside it (AWS::IAM::Policy: a function's permission to invoke itself, which its
    # own Policies cannot name): part of the role's identity policies as IAM holds them.
    for logical, spec in res.items():
        if spec["Type"] != "AWS::IAM::Policy" or not r.exists(logical):
            continue
        p = r.eval(spec["Properties"])
        for role in spec["Properties"].get("Roles", []):
            target = role.get("Ref") if isinstance(role, dict) else None
            if target not in out["roles"]:
                raise Unresolved(f"{logical} is attached to {role}, not a role of the template")
            out["roles"][target]["inline"].append({"name": p["PolicyName"], "document": p["PolicyDocument"]})
    # The transactions table the functions use (SAGA_TABLE): the stack's own, or one it names (an MRSC group's).
    names = {f["environment"].get("SAGA_TABLE") for f in out["functions"].values()}
    if len(names) != 1 or None in names:
        raise Unresolved(f"the functions' SAGA_TABLE is not one table: {sorted(map(str, names))}")
    tx = names.pop()
    out["transactionsTable"] = {"name": tx, "arn": r.arn("dynamodb", f"table/{tx}")}
    symbol(out["transactionsTable"]["arn"], "${TransactionsTable.Arn}")
    allowed = r.params.get("AllowedTables", [])
    out["allowedTables"] = allowed
    return out


def rules_verdict(cfn, parameters):
    """The failed assertions of the template's Rules for these parameter values (the SAM transform keeps Rules, and
    what it does with the rest does not depend on SweepAfterSeconds)."""
    return check_rules(cfn, Resolver(cfn, parameters))


def check_express_rule(sam):
    """The Express rule refuses every SweepAfterSeconds the parameter admits up to 300 and admits 301 and more, and a
    Standard stack keeps every value: printed, and False when any of that does not hold."""
    ok = True
    base = {**BASE_PARAMETERS, "WorkflowType": "EXPRESS", "SweepAfterSeconds": "360"}
    cfn = transform(sam, base)
    for v in list(range(30, 302)) + [360, 86400]:
        failed = rules_verdict(cfn, {**base, "SweepAfterSeconds": str(v)})
        if bool(failed) != (v <= 300):
            print(f"rules: EXPRESS with SweepAfterSeconds {v}: {'refused' if failed else 'admitted'}, which is wrong")
            ok = False
    for v in (30, 120, 300):
        failed = rules_verdict(cfn, {**BASE_PARAMETERS, "WorkflowType": "STANDARD", "SweepAfterSeconds": str(v)})
        if failed:
            print(f"rules: STANDARD with SweepAfterSeconds {v} refused: {failed}")
            ok = False
    if ok:
        print("rules: EXPRESS refuses SweepAfterSeconds 30-300 and admits 301 and more; STANDARD admits 30-300")
    return ok


def check_multi_region_rules(sam):
    """The MRSC rules: STRONG needs TransactionsTableName, and the deploy that creates the group's table names two
    other, different Regions in STRONG mode; each samconfig.toml environment's parameter_overrides pass the Rules and
    resolve (its policies are those of a configuration the simulation can run). Printed, and False when any fails."""
    import shlex
    import tomllib

    ok = True
    strong = {**BASE_PARAMETERS, "MultiRegionConsistency": "STRONG", "TransactionsTableName": "saga-tx"}
    first = {**strong, "GlobalTableReplicaRegion": "us-east-2", "GlobalTableThirdRegion": "us-west-2"}
    cases = [
        ("STRONG with a transactions table name", strong, False),
        ("STRONG without one", {**strong, "TransactionsTableName": ""}, True),
        ("the first Region's deploy", first, False),
        ("... with a witness", {**first, "GlobalTableThirdRegionRole": "WITNESS"}, False),
        ("... without STRONG", {**first, "MultiRegionConsistency": "NONE"}, True),
        ("... without a third Region", {**first, "GlobalTableThirdRegion": ""}, True),
        ("... with the same Region twice", {**first, "GlobalTableThirdRegion": "us-east-2"}, True),
        ("NONE with a named transactions table", {**BASE_PARAMETERS, "TransactionsTableName": "saga-tx"}, False),
    ]
    cfn = transform(sam, first)
    for what, params, refused in cases:
        failed = rules_verdict(cfn, params)
        if bool(failed) != refused:
            print(f"rules: {what}: {'refused' if failed else 'admitted'}, which is wrong {failed}")
            ok = False
    with open("samconfig.toml", "rb") as f:
        samconfig = tomllib.load(f)
    envs = 0
    for env, commands in samconfig.items():
        overrides = (commands.get("deploy", {}).get("parameters") or {}).get("parameter_overrides") if isinstance(commands, dict) else None
        if not overrides:
            continue
        envs += 1
        params = dict(kv.split("=", 1) for kv in shlex.split(overrides))
        cfn = transform(sam, params)
        failed = rules_verdict(cfn, params)
        if failed:
            print(f"rules: samconfig.toml environment {env}: refused: {failed}")
            ok = False
            continue
        try:
            resolve(sam, env, params)
        except (Unresolved, SystemExit) as e:
            print(f"rules: samconfig.toml environment {env}: cannot resolve {e}")
            ok = False
    if ok:
        print(f"rules: MRSC mode names its transactions table, its creating deploy two other Regions; "
              f"the {envs} samconfig.toml environments pass the Rules and resolve")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--template", default="template.yaml")
    ap.add_argument("--config", action="append", help="only these configurations (default: all of CONFIGS)")
    ap.add_argument("--mutate", action="append", default=[], choices=sorted(MUTATIONS))
    ap.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE", help="override a parameter in every configuration")
    ap.add_argument("--check-rules", action="store_true", help="check the Express rule over every SweepAfterSeconds it concerns, and exit")
    args = ap.parse_args()
    sam = load_sam(args.template)
    for m in args.mutate:
        MUTATIONS[m](sam)
    if args.check_rules:
        express, multi_region = check_express_rule(sam), check_multi_region_rules(sam)
        sys.exit(0 if express and multi_region else 1)
    extra = dict(s.split("=", 1) for s in args.set)
    out = []
    for name in args.config or list(CONFIGS):
        if name not in CONFIGS:
            raise SystemExit(f"no configuration {name} (have {', '.join(CONFIGS)})")
        params = {**BASE_PARAMETERS, **CONFIGS[name], **extra}
        try:
            out.append(resolve(sam, name, params))
        except Unresolved as e:
            raise SystemExit(f"{name}: cannot resolve {e}")
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Static checks of the deployment files; needs no AWS account, credentials or network beyond PyPI and npm.
#   tools/check-template.sh
#
#  1. sam validate --lint    template.yaml (the SAM transform, then cfn-lint)
#  2. asl-validator          statemachine/transaction.asl.json, with every ${...} placeholder replaced by a dummy
#                            Lambda ARN (what SAM's DefinitionSubstitutions do at deploy time)
#  3. tools/check_policies.py no "*" resource on DynamoDB, Step Functions, SQS, SNS, CloudWatch or Logs actions,
#                            IAM auth on the API, an encrypted dead-letter queue of the stack for EventBridge requests
#                            (the rule's, and the events function's own for what Lambda gives up on), alarms
#                            only under EnableAlarms and notifying only AlarmTopicArn; on the transformed template,
#                            every function logging to a log group of the stack with retention and writing no
#                            other, the API's access logs and throttling, the state machine invoking published
#                            versions only, and every parameter a versioned function reads in its version's description
#  4. JSON syntax            every events/*.json, and events/sm-250.json is what events/generate.py writes
#  5. tools/iam-sim.sh --self-test
#                            the permission simulation: the sample call log tools/iam/sample-calls.jsonl is allowed
#                            in every configuration and every unused permission is justified in docs/iam.md, and each
#                            defect it was built to find is caught on a copy of the template that has it; the Rules
#                            refuse Express with SweepAfterSeconds of 300 or less (tools/test.sh runs the simulation
#                            on the suites' own call log)
#  6. tools/check_figures.py  every figure the docs, template.yaml and the state machine's Comment quote from
#                            docs/benchmarks.json or docs/test-report.md agrees with it; its self-test shows an
#                            altered figure on either side is caught
#
# Tools are installed once into .local/ (git-ignored): aws-sam-cli and cfn-lint in the venv .local/venv,
# asl-validator@4 under .local/node, the IAM policy evaluator under .local/iam-sim. Later runs find them and skip the
# installs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

venv="$root/.local/venv"
node_dir="$root/.local/node"
asl_validator="$node_dir/node_modules/.bin/asl-validator"
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}
export SAM_CLI_TELEMETRY=0

install_python_tools() {
  if [ -x "$venv/bin/sam" ] && [ -x "$venv/bin/cfn-lint" ]; then return 0; fi
  echo "check-template: installing aws-sam-cli and cfn-lint into .local/venv (a few minutes, once)"
  command -v python3 >/dev/null || { echo "check-template: python3 is required" >&2; exit 1; }
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check aws-sam-cli cfn-lint
}

install_node_tools() {
  if [ -x "$asl_validator" ] && "$asl_validator" --version 2>/dev/null | grep -q '^4\.'; then return 0; fi
  echo "check-template: installing asl-validator@4 into .local/node"
  command -v npm >/dev/null || { echo "check-template: npm is required" >&2; exit 1; }
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --no-audit --no-fund --silent asl-validator@4 >/dev/null
}

install_python_tools
install_node_tools

failed=0
step() { echo; echo "== $*"; }
fail() { echo "FAILED: $*" >&2; failed=1; }

step "sam validate --lint --template template.yaml ($("$venv/bin/sam" --version), cfn-lint $("$venv/bin/cfn-lint" --version | awk '{print $2}'))"
"$venv/bin/sam" validate --lint --template template.yaml || fail "sam validate --lint"

step "asl-validator $("$asl_validator" --version) statemachine/transaction.asl.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Every ${Name} placeholder becomes the ARN of a function called Name, then none may be left.
sed -E 's/\$\{([A-Za-z0-9]+)\}/arn:aws:lambda:us-east-1:123456789012:function:\1/g' \
  statemachine/transaction.asl.json >"$tmp/transaction.asl.json"
if grep -n '\${' "$tmp/transaction.asl.json"; then
  fail "placeholders left after substitution"
fi
"$asl_validator" --json-path "$tmp/transaction.asl.json" || fail "asl-validator"
# The placeholders the definition uses must be exactly the ones template.yaml substitutes.
used=$(grep -oE '\$\{[A-Za-z0-9]+\}' statemachine/transaction.asl.json | tr -d '${}' | sort -u)
given=$(sed -n '/DefinitionSubstitutions:/,/^      [A-Za-z]/p' template.yaml | grep -oE '^        [A-Za-z0-9]+:' | tr -d ' :' | sort -u)
if [ "$used" != "$given" ]; then
  fail "placeholders in the definition ($(echo $used)) differ from DefinitionSubstitutions ($(echo $given))"
else
  echo "placeholders match DefinitionSubstitutions: $(echo $used)"
fi

step "least privilege, IAM auth, dead-letter queue and alarms (tools/check_policies.py)"
"$venv/bin/python" tools/check_policies.py --self-test || fail "check_policies.py cannot catch what it checks for"
"$venv/bin/python" tools/check_policies.py || fail "template.yaml grants too much, leaves the API open, or fails an operations check"

step "the largest staged request seals inside API Gateway's 29 s (tools/check_api_timeout.py)"
"$venv/bin/python" tools/check_api_timeout.py || fail "StageMemorySize admits a request whose seal would outlive the API's timeout"

step "JSON syntax of events/*.json"
n=0
for f in events/*.json; do
  if "$venv/bin/python" -m json.tool "$f" >/dev/null; then n=$((n + 1)); else fail "$f is not valid JSON"; fi
done
echo "$n files are valid JSON"
"$venv/bin/python" events/generate.py --check && echo "events/sm-250.json matches events/generate.py" \
  || fail "events/sm-250.json is out of date"

step "permission simulation (tools/iam-sim.sh --self-test)"
bash tools/iam-sim.sh --self-test || fail "the permission simulation refuses template.yaml, or misses a defect it exists to catch"

step "quoted figures against docs/benchmarks.json and docs/test-report.md (tools/check_figures.py)"
"$venv/bin/python" tools/check_figures.py --self-test || fail "check_figures.py cannot catch a figure that disagrees"
"$venv/bin/python" tools/check_figures.py || fail "a figure in the docs disagrees with docs/benchmarks.json or docs/test-report.md"

echo
if [ "$failed" -ne 0 ]; then
  echo "check-template: FAILED" >&2
  exit 1
fi
echo "check-template: all checks passed"

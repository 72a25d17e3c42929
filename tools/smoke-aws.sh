#!/usr/bin/env bash
# A smoke test on a real AWS account, for someone who has one. It deploys this checkout to a new stack, runs one
# transaction through the API and one through the CLI, reads their status, and deletes everything it made.
#
# It is not run in CI: this repository's CI has no AWS account, and neither had the people who wrote the script. It
# is checked on paper only: `bash -n`, shellcheck, and every command and flag against the SAM CLI, AWS CLI and
# awscurl documentation. A failure here is worth a report, with the output.
#
#   tools/smoke-aws.sh STACK_NAME [--keep]
#     STACK_NAME  a stack that does not exist yet (letters, digits and -); the script refuses an existing one, since
#                 it deletes what it deploys
#     --keep      leave the stack and the tables in place; the README's Teardown says how to delete them later
#
# In the AWS CLI's region (AWS_REGION, else AWS_DEFAULT_REGION, else the profile's) it makes:
#   - the table STACK_NAME-smoke (on-demand, string key pk), the only table the stack may write;
#   - the stack STACK_NAME: the release arm64 build of tools/sam-build.sh (which installs SAM CLI and cargo-lambda into
#     .local/venv), deployed with sam deploy, AllowedTables=STACK_NAME-smoke, CreateApiGatewayLoggingRole false when
#     the account already names API Gateway's logging role, and every other parameter at its default (alarms and
#     dashboard included).
# Then:
#   1. POST /transactions through awscurl (SigV4): 120 puts, more than one TransactWriteItems call takes, so the API
#      function begins the transaction and the state machine runs every phase. GET /transactions/{id} until it has
#      finished COMMITTED; the execution must end SUCCEEDED and the table hold the 120 items.
#   2. dynamo-saga --stack (the CLI, a release build, a client of the stack's API): submit 3 actions over those items,
#      carried out in one TransactWriteItems call by the API function. dynamo-saga status and get read it back, and so
#      does GET /transactions/{id}.
#   3. The sweeper, invoked once by hand and once through dynamo-saga --stack sweep: each must answer with a report.
# At the end, on success or failure (unless --keep), it deletes the stack (sam delete, which takes every log group the
# stack writes with it), the transactions table the stack retains, and the smoke table. The packages sam deploy
# uploaded are deleted by sam delete; the bucket SAM CLI manages (stack aws-sam-cli-managed-default) is left, as it is
# shared by every SAM deployment in the account and Region. So is API Gateway's logging role: the stack makes one
# (CreateApiGatewayLoggingRole) only when the account names none, and it stays, since other APIs may log with it.
#
# Needs: credentials allowed to create and delete the stack (CloudFormation, IAM roles, Lambda, API Gateway and its
# account settings, Step Functions, DynamoDB, SQS, EventBridge, CloudWatch, CloudWatch Logs, and S3 for the packages)
# and to call the API, the state machine and the tables; the AWS CLI (version 2), jq, python3 with venv, and a Rust
# toolchain (1.85 or later, with rustup). awscurl is used from PATH, or installed into .local/venv. A cold build takes 5 to 10 minutes on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

usage() { echo "usage: tools/smoke-aws.sh STACK_NAME [--keep]" >&2; exit 2; }
stack=${1:-}
[ -n "$stack" ] || usage
keep=false
case ${2:-} in "") ;; --keep) keep=true ;; *) usage ;; esac
[ $# -le 2 ] || usage
# A stack name is at most 128 characters; the sweeper's log group and the alarms carry it, and the table adds -smoke.
[[ $stack =~ ^[A-Za-z][A-Za-z0-9-]{0,99}$ ]] || { echo "smoke: STACK_NAME must be a letter, then up to 99 letters, digits or -" >&2; exit 2; }
for tool in aws jq python3 cargo rustup; do
  command -v "$tool" >/dev/null || { echo "smoke: needs $tool on PATH" >&2; exit 1; }
done
aws --version 2>&1 | grep -q '^aws-cli/2\.' || { echo "smoke: needs the AWS CLI version 2 (aws --version)" >&2; exit 1; }
region=${AWS_REGION:-${AWS_DEFAULT_REGION:-$(aws configure get region 2>/dev/null || true)}}
[ -n "$region" ] || { echo "smoke: no region: set AWS_REGION or configure one (aws configure)" >&2; exit 1; }
export AWS_REGION=$region AWS_DEFAULT_REGION=$region SAM_CLI_TELEMETRY=0
table="$stack-smoke"
venv="$root/.local/venv"
step() { printf '\n== %s\n' "$*"; }
fail() { echo "smoke: FAILED: $*" >&2; exit 1; }

account=$(aws sts get-caller-identity --query Account --output text) || fail "no AWS credentials"
echo "smoke: account $account, region $region, stack $stack, table $table"
if aws cloudformation describe-stacks --stack-name "$stack" >/dev/null 2>&1; then
  fail "stack $stack exists already; name a new one (this script deletes the stack it deploys)"
fi
if aws dynamodb describe-table --table-name "$table" >/dev/null 2>&1; then
  fail "table $table exists already"
fi

# Everything made from here on is deleted on exit, unless --keep.
teardown() {
  local status=$?
  trap - EXIT
  set +e
  if $keep; then
    echo "smoke: --keep: stack $stack and table $table left in place (README, Teardown)"
    rm -rf "$work"
    exit "$status"
  fi
  step "teardown"
  local tx_table=""
  if aws cloudformation describe-stacks --stack-name "$stack" >/dev/null 2>&1; then
    # Read before the stack goes: the table it retains.
    tx_table=$(aws cloudformation describe-stack-resource --stack-name "$stack" --logical-resource-id TransactionsTable \
      --query StackResourceDetail.PhysicalResourceId --output text 2>/dev/null)
    # --s3-prefix: the packages this deploy uploaded, not the samconfig.toml prefix another stack may use.
    "$venv/bin/sam" delete --stack-name "$stack" --region "$region" --s3-prefix "$stack" --no-prompts \
      || echo "smoke: sam delete failed" >&2
  fi
  for t in $tx_table "$table"; do
    [ "$t" = None ] && continue
    if aws dynamodb describe-table --table-name "$t" >/dev/null 2>&1; then
      aws dynamodb delete-table --table-name "$t" >/dev/null && aws dynamodb wait table-not-exists --table-name "$t" \
        && echo "smoke: deleted table $t"
    fi
  done
  rm -rf "$work"
  if [ "$status" = 0 ]; then echo "smoke: passed, and everything it made is deleted"; else echo "smoke: failed (exit $status)" >&2; fi
  exit "$status"
}
work=$(mktemp -d)
trap teardown EXIT

step "the table $table"
aws dynamodb create-table --table-name "$table" --billing-mode PAY_PER_REQUEST \
  --attribute-definitions AttributeName=pk,AttributeType=S --key-schema AttributeName=pk,KeyType=HASH >/dev/null
aws dynamodb wait table-exists --table-name "$table"

step "build: functions (tools/sam-build.sh) and the CLI"
bash tools/sam-build.sh
cargo build --release -p dynamo-saga-cli
cli="$root/target/release/dynamo-saga"
# awscurl signs the API calls; --fail-with-body needs a recent one.
awscurl=$(command -v awscurl || true)
if [ -z "$awscurl" ] || ! "$awscurl" --help | grep -q -- --fail-with-body; then
  "$venv/bin/pip" install -q awscurl
  awscurl="$venv/bin/awscurl"
fi

step "deploy the stack $stack"
# The account's API Gateway logging role is left as it is when there is one (docs/deploy.md).
logging_role=$(aws apigateway get-account --query cloudwatchRoleArn --output text)
create_logging_role=true
case $logging_role in "" | None) ;; *) create_logging_role=false ;; esac
echo "smoke: API Gateway's logging role: ${logging_role:-none} (CreateApiGatewayLoggingRole=$create_logging_role)"
"$venv/bin/sam" deploy --template-file .aws-sam/build/template.yaml --stack-name "$stack" --region "$region" \
  --capabilities CAPABILITY_IAM --resolve-s3 --s3-prefix "$stack" --no-confirm-changeset \
  --no-fail-on-empty-changeset \
  --parameter-overrides "AllowedTables=$table" "CreateApiGatewayLoggingRole=$create_logging_role"
out() {
  aws cloudformation describe-stacks --stack-name "$stack" \
    --query "Stacks[0].Outputs[?OutputKey=='$1'].OutputValue" --output text
}
api_url=$(out ApiUrl)
status_url=$(out StatusUrl)
state_machine=$(out StateMachineArn)
tx_table=$(out TransactionsTableName)
sweeper=$(out SweeperFunctionArn)
echo "ApiUrl $api_url"
echo "StateMachineArn $state_machine"
echo "TransactionsTableName $tx_table"

api() { "$awscurl" --service execute-api --region "$region" --fail-with-body "$@"; }
# Polls GET /transactions/{id} until Finished; prints the last answer.
wait_finished() {
  local id=$1 answer="" i
  for ((i = 0; i < 120; i++)); do
    answer=$(api "$status_url/$id") || fail "GET /transactions/$id answered: $answer"
    if [ "$(jq -r .Finished <<<"$answer")" = true ]; then
      echo "$answer"
      return 0
    fi
    sleep 5
  done
  fail "transaction $id not finished after 10 minutes: $answer"
}

step "1. POST /transactions: 120 puts, run by the state machine"
jq -n --arg t "$table" --arg token "smoke-$stack-api" '{
  ClientRequestToken: $token,
  TransactItems: [range(120) | {Put: {TableName: $t,
    Item: {pk: {S: ("api-" + (tostring | ("00" + .)[-3:]))}, source: {S: "api"}},
    ConditionExpression: "attribute_not_exists(pk)"}}]}' >"$work/api.json"
answer=$(api -X POST -H "Content-Type: application/json" -d "@$work/api.json" "$api_url") \
  || fail "POST /transactions answered: $answer"
echo "$answer"
api_id=$(jq -r '.TransactionId // empty' <<<"$answer")
execution=$(jq -r '.ExecutionArn // empty' <<<"$answer")
if [ -z "$api_id" ] || [ -z "$execution" ]; then fail "no TransactionId or ExecutionArn in the answer"; fi
final=$(wait_finished "$api_id")
jq -c '{State, Finished, Actions, Batches, Progress}' <<<"$final"
[ "$(jq -r .State <<<"$final")" = COMMITTED ] || fail "transaction $api_id ended $(jq -r .State <<<"$final")"
for ((i = 0; i < 60; i++)); do
  sfn=$(aws stepfunctions describe-execution --execution-arn "$execution" --query status --output text)
  [ "$sfn" = RUNNING ] || break
  sleep 5
done
[ "$sfn" = SUCCEEDED ] || fail "execution $execution ended $sfn"
echo "execution $execution: $sfn"
count=$(aws dynamodb scan --table-name "$table" --select COUNT --consistent-read --query Count --output text)
[ "$count" = 120 ] || fail "the table holds $count items, not 120"
echo "the table holds the 120 items"

step "2. dynamo-saga --stack submit through the API: 3 actions in one call"
jq -n --arg t "$table" '{TransactItems: [
  {Update: {TableName: $t, Key: {pk: {S: "api-000"}}, UpdateExpression: "SET touched = :by",
    ExpressionAttributeValues: {":by": {S: "cli"}}, ConditionExpression: "attribute_exists(pk)"}},
  {Put: {TableName: $t, Item: {pk: {S: "cli-1"}, source: {S: "cli"}}, ConditionExpression: "attribute_not_exists(pk)"}},
  {ConditionCheck: {TableName: $t, Key: {pk: {S: "api-001"}}, ConditionExpression: "attribute_exists(pk)"}}]}' \
  >"$work/cli.json"
export SAGA_STACK=$stack
submitted=$("$cli" --json submit "$work/cli.json") || fail "dynamo-saga submit exited $?: $submitted"
cli_id=$(jq -r .TransactionId <<<"$submitted")
jq -c '{TransactionId, State, Finished}' <<<"$submitted"
"$cli" status "$cli_id"
touched=$("$cli" --json get "$table" '{"pk": {"S": "api-000"}}' | jq -r .touched.S)
[ "$touched" = cli ] || fail "api-000 reads touched=$touched, not cli"
echo "dynamo-saga get: api-000 touched=cli"
from_api=$(wait_finished "$cli_id")
[ "$(jq -r .State <<<"$from_api")" = COMMITTED ] || fail "GET /transactions/$cli_id: $from_api"
echo "GET /transactions/$cli_id: COMMITTED"
"$cli" status "$api_id" >/dev/null || fail "dynamo-saga status $api_id"

step "3. the sweeper, once"
function_error=$(aws lambda invoke --function-name "$sweeper" --cli-binary-format raw-in-base64-out --payload '{}' \
  "$work/sweep.json" --query FunctionError --output text)
cat "$work/sweep.json"
echo
[ "$function_error" = None ] || fail "the sweeper answered a function error: $function_error"
swept=$("$cli" --json sweep) || fail "dynamo-saga --stack sweep exited $?: $swept"
jq -c '{Examined, Failed}' <<<"$swept"

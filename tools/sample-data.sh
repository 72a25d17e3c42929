#!/usr/bin/env bash
# Creates the tables and items every file in events/ expects (events/README.md, "Tables the samples expect"):
# Orders with order-0001, and Inventory with widget-1 .. widget-7 and unit-000 .. unit-249, all AVAILABLE. Both
# tables are on-demand, keyed by a string pk, and must be in the stack's AllowedTables (Orders,Inventory).
#   tools/sample-data.sh [--delete] [AWS CLI options...]
#     tools/sample-data.sh                                          the AWS CLI's region and credentials
#     tools/sample-data.sh --region eu-west-1 --profile dev
#     tools/sample-data.sh --endpoint-url http://127.0.0.1:8000     DynamoDB Local
#     tools/sample-data.sh --delete                                 delete both tables again
# Items are written with batch-write-item, 25 a call, and whatever DynamoDB leaves unprocessed is sent again. Running
# it again puts the tables back as they were before the samples ran: the items above as listed, and the orders the
# samples put (order-1001 .. order-5001) deleted; tables that exist already are kept. Run it while no sample
# transaction is in flight: it overwrites items whole, lock attributes included.
set -euo pipefail
command -v aws >/dev/null || { echo "sample-data: needs the AWS CLI" >&2; exit 1; }
command -v jq >/dev/null || { echo "sample-data: needs jq" >&2; exit 1; }
delete=false
if [ "${1:-}" = "--delete" ]; then delete=true; shift; fi
opts=("$@")
ddb() { aws dynamodb "$@" ${opts[@]+"${opts[@]}"}; }

if $delete; then
  for t in Orders Inventory; do
    if ddb describe-table --table-name "$t" >/dev/null 2>&1; then
      ddb delete-table --table-name "$t" >/dev/null
      ddb wait table-not-exists --table-name "$t"
      echo "sample-data: deleted $t"
    fi
  done
  exit 0
fi

for t in Orders Inventory; do
  if ! ddb describe-table --table-name "$t" >/dev/null 2>&1; then
    ddb create-table --table-name "$t" --billing-mode PAY_PER_REQUEST \
      --attribute-definitions AttributeName=pk,AttributeType=S --key-schema AttributeName=pk,KeyType=HASH >/dev/null
    echo "sample-data: created $t"
  fi
  ddb wait table-exists --table-name "$t"
done

# write_all TABLE STATUS PK...: puts each item {pk, status} (STATUS "-" deletes the item instead), one batch-write-item
# call per 25 items; UnprocessedItems are sent again until none is left.
write_all() {
  local table=$1 status=$2; shift 2
  local -a keys=("$@")
  local i request left tries
  for ((i = 0; i < ${#keys[@]}; i += 25)); do
    request=$(printf '%s\n' "${keys[@]:i:25}" | jq -R -s -c --arg t "$table" --arg status "$status" '
      {($t): [split("\n")[] | select(length > 0)
              | if $status == "-" then {DeleteRequest: {Key: {pk: {S: .}}}}
                else {PutRequest: {Item: {pk: {S: .}, status: {S: $status}}}} end]}')
    tries=0
    while :; do
      left=$(ddb batch-write-item --request-items "$request" --query UnprocessedItems --output json)
      case $left in "" | "{}" | null) break ;; esac
      tries=$((tries + 1))
      if [ "$tries" -ge 10 ]; then echo "sample-data: $table: items left unprocessed after 10 tries" >&2; exit 1; fi
      request=$left
      sleep "$tries"
    done
  done
}

write_all Orders PLACED order-0001
# The orders the samples write, so that each runs again as it did the first time.
write_all Orders - order-1001 order-2001 order-3001 order-4001 order-5001
units=()
for i in $(seq -w 0 249); do units+=("unit-$i"); done
write_all Inventory AVAILABLE widget-1 widget-2 widget-3 widget-4 widget-5 widget-6 widget-7 "${units[@]}"
echo "sample-data: Orders holds order-0001; Inventory holds widget-1 .. widget-7 and unit-000 .. unit-249, all AVAILABLE"

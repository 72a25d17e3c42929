"""The client at work: a small request, a large one (staged), each followed to its end, and an event entry.

    API_URL=https://.../v1/transactions TABLE=Orders python3 example.py

Prints one JSON line: each transaction's id and final status, and the event entry. Run against the local stack by
the test suite (tests/e2e.rs), so it cannot drift from the API.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dynamo_saga_client import ApiError, Client, event_entry  # noqa: E402


def puts(table, prefix, n):
    return {"TransactItems": [
        {"Put": {"TableName": table, "Item": {"pk": {"S": f"{prefix}-{i:04}"}, "n": {"N": "1"}},
                 "ConditionExpression": "attribute_not_exists(pk)"}}
        for i in range(n)]}


def main():
    api, table = Client(os.environ["API_URL"]), os.environ["TABLE"]
    out = {}
    for name, n in (("small", 10), ("large", 250)):
        started = api.submit(puts(table, f"py-{name}", n))
        final = api.wait(started["TransactionId"])
        out[name] = {"started": started, "final": final}
    # The same request again: every condition fails, so it ends ROLLED_BACK, a reason for each action.
    again = api.wait(api.submit(puts(table, "py-small", 10))["TransactionId"])
    out["again"] = again
    try:
        api.status("not-an-id")
    except ApiError as e:
        out["refused"] = {"status": e.status, "type": e.error_type}
    out["event"] = event_entry(puts(table, "py-event", 3))
    print(json.dumps(out))


if __name__ == "__main__":
    main()

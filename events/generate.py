#!/usr/bin/env python3
"""Writes events/sm-250.json: a state machine input of 250 Update actions, more than two TransactWriteItems calls.

Each action marks one Inventory item sold, guarded by its still being available:
    pk = "unit-000" .. "unit-249", SET #s = :sold, condition #s = :avail  (#s is the attribute "status")

    python3 events/generate.py          write the file
    python3 events/generate.py --check  exit 1 if the committed file differs from what this script writes
"""

import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parent / "sm-250.json"
COUNT = 250


def action(i: int) -> dict:
    return {
        "Update": {
            "TableName": "Inventory",
            "Key": {"pk": {"S": f"unit-{i:03d}"}},
            "UpdateExpression": "SET #s = :sold",
            "ConditionExpression": "#s = :avail",
            "ExpressionAttributeNames": {"#s": "status"},
            "ExpressionAttributeValues": {":sold": {"S": "SOLD"}, ":avail": {"S": "AVAILABLE"}},
        }
    }


def render() -> str:
    # One action a line: small enough to read, and a diff shows which action changed.
    lines = [json.dumps(action(i), separators=(", ", ": ")) for i in range(COUNT)]
    return '{\n  "TransactItems": [\n    ' + ",\n    ".join(lines) + "\n  ]\n}\n"


def main() -> int:
    text = render()
    assert len(json.loads(text)["TransactItems"]) == COUNT
    if sys.argv[1:] == ["--check"]:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.name} is out of date: run python3 events/generate.py", file=sys.stderr)
            return 1
        return 0
    if sys.argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

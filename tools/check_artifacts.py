#!/usr/bin/env python3
"""Checks what `sam build` made (.aws-sam/build), function by function, as Lambda would run it.

For each function of template.yaml:
  1. its deployment package: the bootstrap zipped as `sam package` zips it, under 5 MB (5,000,000 bytes);
  2. its bootstrap started, as the provided.al2023 runtime starts it, against a stand-in for the Lambda Runtime API
     that hands it its events/ file and reads its answer. The arm64 binaries run under qemu-user on an x86_64 host.
     The transaction in begin.json is driven through every phase by the release binaries, each phase's event
     carrying the id Begin returned (as events/README.md tells users to do), and must commit; the other events
     expect the answers events/README.md gives for a sample id. DynamoDB is the DynamoDB Local at --dynamodb, with
     the transactions table created from template.yaml's own definition and the tables events/README.md describes.
  3. its init time: from starting the process to its first request for an event (Lambda's Init phase), the least
     of --runs cold starts, printed beside the target of 50 ms. Under emulation it is not what arm64 hardware takes,
     so it is reported, not enforced.

  .local/venv/bin/python tools/check_artifacts.py --dynamodb http://127.0.0.1:PORT [--runs 3] [--json FILE]
Exit status 1 when a package is too large or a function does not answer as expected.
"""
import argparse
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile

import boto3
from samtranslator.yaml_helper import yaml_parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, ".aws-sam", "build")
MAX_ZIP_BYTES = 5_000_000
INIT_TARGET_MS = 50.0
TX_TABLE = "saga-transactions"
SAMPLE_ID = "01JDQ4W5Z3ZC4V8Y9B7Q2X1N6M"


class RuntimeApi:
    """The Lambda Runtime API (2018-06-01) for one process: `next` hands out the event once, then blocks until the
    process is stopped; `response` and `error` record the answer. Each process gets a server of its own, on a port of
    its own, closed once the process is stopped: a request the stopped process sent just before it died can then
    never take the next process's event (on a shared server it could, and that process waited for an event forever)."""

    def __init__(self):
        self.lock = threading.Condition()
        self.generation = 0
        self.event = None
        self.first_next = None
        self.answer = None
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if not self.path.startswith("/2018-06-01/runtime/invocation/next"):
                    self.send_error(404)
                    return
                with api.lock:
                    generation = api.generation
                    if api.first_next is None:
                        api.first_next = time.monotonic()
                    event, api.event = api.event, None
                    if event is None:
                        # The second request for an event: held until the process is stopped.
                        api.lock.wait_for(lambda: api.generation != generation, timeout=300)
                        self.close_connection = True
                        return
                body = json.dumps(event).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Lambda-Runtime-Aws-Request-Id", "8476a536-e9f4-11e8-9739-2dfe598c3fcd")
                self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 900_000))
                self.send_header("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:check")
                self.send_header("Lambda-Runtime-Trace-Id", "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700;Parent=9a9197af755a6419;Sampled=1")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                size = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(size).decode()
                kind = "response" if self.path.endswith("/response") else "error"
                with api.lock:
                    api.answer = (kind, json.loads(body) if body else None, time.monotonic())
                    api.lock.notify_all()
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def run(self, command, env, event, timeout=120):
        """Starts `command`, hands it `event`, returns (init ms, invoke ms, kind, answer)."""
        with self.lock:
            self.generation += 1
            self.event, self.first_next, self.answer = event, None, None
        started = time.monotonic()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            with self.lock:
                ok = self.lock.wait_for(lambda: self.answer is not None or proc.poll() is not None, timeout=timeout)
                answer, first = self.answer, self.first_next
            if not ok or answer is None:
                proc.kill()
                err = proc.stderr.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"no answer (exit {proc.poll()}): {err}")
            kind, body, at = answer
            return (first - started) * 1000, (at - first) * 1000, kind, body
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            with self.lock:
                self.generation += 1
                self.lock.notify_all()
            self.close()


def emulator():
    """How to run an arm64 binary here: directly on arm64, else under qemu-user with the arm64 C library."""
    if os.uname().machine in ("aarch64", "arm64"):
        return []
    qemu = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if not qemu or not os.path.isdir("/usr/aarch64-linux-gnu"):
        sys.exit("check_artifacts: needs qemu-user and libc6-arm64-cross (apt-get install qemu-user libc6-arm64-cross)")
    return [qemu, "-L", "/usr/aarch64-linux-gnu"]


def event(name, tx_id=None):
    with open(os.path.join(ROOT, "events", name)) as f:
        e = json.load(f)
    if tx_id is not None:
        e["TransactionId"] = tx_id
    return e


def create_tables(ddb, template):
    """The transactions table as template.yaml defines it, and the tables events/README.md describes."""
    props = template["Resources"]["TransactionsTable"]["Properties"]
    ddb.create_table(
        TableName=TX_TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=props["AttributeDefinitions"],
        KeySchema=props["KeySchema"],
        GlobalSecondaryIndexes=props["GlobalSecondaryIndexes"],
    )
    for t in ("Orders", "Inventory"):
        ddb.create_table(
            TableName=t,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        )
    ddb.put_item(TableName="Orders", Item={"pk": {"S": "order-0001"}, "status": {"S": "PLACED"}})
    for i in range(1, 8):
        ddb.put_item(TableName="Inventory", Item={"pk": {"S": f"widget-{i}"}, "status": {"S": "AVAILABLE"}})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dynamodb", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()

    with open(os.path.join(ROOT, "template.yaml")) as f:
        template = yaml_parse(f.read())
    functions = {
        name: r["Properties"]["Handler"]
        for name, r in template["Resources"].items()
        if r["Type"] == "AWS::Serverless::Function"
    }

    def memory_of(resource):
        """MemorySize as Lambda would set it: the function's own (a parameter's default for a Ref), else Globals'."""
        m = resource["Properties"].get("MemorySize", template["Globals"]["Function"]["MemorySize"])
        if isinstance(m, dict) and "Ref" in m:
            m = template["Parameters"][m["Ref"]]["Default"]
        return int(m)

    # Where sam build put each function's package: functions with one build definition share a directory
    # (<first function>-Shared), which the built template's CodeUri names.
    with open(os.path.join(BUILD, "template.yaml")) as f:
        built = yaml_parse(f.read())
    code = {name: os.path.join(BUILD, built["Resources"][name]["Properties"]["CodeUri"]) for name in functions}

    memory = {name: memory_of(r) for name, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}
    ddb = boto3.client("dynamodb", endpoint_url=args.dynamodb, region_name="us-east-1",
                       aws_access_key_id="local", aws_secret_access_key="local")
    create_tables(ddb, template)
    wrap = emulator()
    failures, rows = [], []

    def env_for(function, api):
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TZ")}
        env.update({
            "AWS_LAMBDA_RUNTIME_API": api.address,
            # Every package holds the same bootstrap; the function's Handler says which function it is.
            "_HANDLER": functions[function],
            "AWS_LAMBDA_FUNCTION_NAME": function,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory[function]),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_FORMAT": "JSON",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function}",
            "AWS_LAMBDA_LOG_STREAM_NAME": "2026/11/24/[$LATEST]check",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_ENDPOINT_URL_DYNAMODB": args.dynamodb,
            "LAMBDA_TASK_ROOT": code[function],
            "SAGA_TABLE": TX_TABLE,
            "SAGA_ALLOWED_TABLES": "Orders,Inventory",
            # The events function starts executions and sends refused events to a queue: neither is reached here
            # (the event it is given is carried out in one call), but both are required settings.
            "SAGA_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:000000000000:stateMachine:check",
            "SAGA_DEAD_LETTER_QUEUE_URL": "http://127.0.0.1:9/000000000000/check",
            "RUST_LOG": "warn",
        })
        return env

    def invoke(function, ev):
        """One cold start answering `ev`; the init time is the least of the cold starts measured for it."""
        bootstrap = os.path.join(code[function], "bootstrap")
        api = RuntimeApi()
        return api.run(wrap + [bootstrap], env_for(function, api), ev)

    # 1. Package sizes.
    for function in sorted(functions):
        bootstrap = os.path.join(code[function], "bootstrap")
        if not os.path.exists(bootstrap):
            failures.append(f"{function}: no {bootstrap}; run sam build first")
            continue
        package = os.path.join(BUILD, f"{function}.zip")
        with zipfile.ZipFile(package, "w", zipfile.ZIP_DEFLATED) as z:
            z.write(bootstrap, "bootstrap")
        rows.append({"function": function, "binary": functions[function], "bootstrap_bytes": os.path.getsize(bootstrap),
                     "zip_bytes": os.path.getsize(package)})
        os.remove(package)
        if rows[-1]["zip_bytes"] >= MAX_ZIP_BYTES:
            failures.append(f"{function}: its package is {rows[-1]['zip_bytes']:,} bytes, over {MAX_ZIP_BYTES:,}")
    by_name = {r["function"]: r for r in rows}

    def expect(function, ev, check, what):
        row = by_name.get(function)
        if row is None:
            return None
        try:
            init_ms, invoke_ms, kind, body = invoke(function, ev)
        except RuntimeError as e:
            failures.append(f"{function}: {what}: {e}")
            return None
        row.setdefault("init_ms", []).append(round(init_ms, 1))
        row.setdefault("invoke_ms", []).append(round(invoke_ms, 1))
        problem = check(kind, body)
        if problem:
            failures.append(f"{function}: {what}: {problem} (answer: {kind} {json.dumps(body)[:500]})")
            return None
        return body

    def ok_with(*keys):
        return lambda kind, body: None if kind == "response" and all(k in body for k in keys) else f"expected a response with {keys}"

    def error_named(name):
        return lambda kind, body: None if kind == "error" and body.get("errorType") == name else f"expected the error {name}"

    def http_status(code):
        return lambda kind, body: None if kind == "response" and body.get("statusCode") == code else f"expected HTTP {code}"

    # 2. begin.json through every phase: Begin, then whichever phase each answer names, until Finished.
    begun = expect("BeginFunction", event("begin.json"), ok_with("TransactionId", "Step"), "begin.json")
    phases = {"Lock": ("LockFunction", "lock.json"), "Save": ("SaveFunction", "save.json"),
              "Apply": ("ApplyFunction", "apply.json"), "Commit": ("CommitFunction", "commit.json"),
              "Complete": ("CompleteFunction", "complete.json"), "Release": ("ReleaseFunction", "release.json"),
              "Rollback": ("RollbackFunction", "rollback.json")}
    path = ["Begin"]
    out = begun
    while out is not None and out.get("Step") in phases and len(path) < 20:
        function, name = phases[out["Step"]]
        path.append(out["Step"])
        out = expect(function, event(name, begun["TransactionId"]), ok_with("Step", "State"), f"{name} for {begun['TransactionId']}")
    if out is not None:
        if (out.get("Step"), out.get("State")) != ("Finished", "COMMITTED"):
            failures.append(f"begin.json through {' -> '.join(path)} ended {out.get('Step')}/{out.get('State')}, not Finished/COMMITTED")
        # Unlocked: the caller's attributes and `_sagaTx`, the id of the transaction that wrote it (which snapshot
        # reads compare), and no other attribute of dynamo-saga's.
        sold = ddb.get_item(TableName="Inventory", Key={"pk": {"S": "widget-1"}}, ConsistentRead=True)["Item"]
        if sold != {"pk": {"S": "widget-1"}, "status": {"S": "SOLD"}, "_sagaTx": {"S": begun["TransactionId"]}}:
            failures.append(f"after the commit, Inventory widget-1 is {sold}, not SOLD, unlocked and written by "
                            f"{begun['TransactionId']}")

    # The other events, and a cold start of every phase function again for its init time.
    sample = lambda name: event(name, SAMPLE_ID)
    for function, name in [("RollbackFunction", "rollback.json"), ("LockFunction", "lock-contended.json"),
                           ("RollbackFunction", "rollback-abort.json")]:
        expect(function, sample(name), error_named("TransactionNotFound"), f"{name} for a transaction that does not exist")
    for _ in range(max(0, args.runs - 1)):
        for step, (function, name) in phases.items():
            expect(function, sample(name), error_named("TransactionNotFound"), f"{name} for a transaction that does not exist")
    for _ in range(args.runs):
        expect("SweeperFunction", event("sweeper.json"), ok_with("Examined", "Failed"), "sweeper.json")
        expect("StageFunction", event("api-stage-create.json"), http_status(201), "api-stage-create.json")
        expect("StatusFunction", event("api-get-status.json"), http_status(404), "api-get-status.json (a sample id)")
        expect("StageFunction", event("api-resume.json"), http_status(404), "api-resume.json (a sample id)")
        expect("EventsFunction", event("eventbridge-transaction.json"), ok_with("TransactionId", "Finished"),
               "eventbridge-transaction.json (carried out in one call)")
        expect("BeginFunction", event("begin.json"), ok_with("TransactionId"), "begin.json again (the same token)")

    print(f"{'function':<18} {'bootstrap':>11} {'zip':>11} {'init ms (least)':>16} {'invoke ms (least)':>18}")
    for r in rows:
        init = min(r.get("init_ms", [float("nan")]))
        inv = min(r.get("invoke_ms", [float("nan")]))
        flag = "" if init < INIT_TARGET_MS else "  over the 50 ms target"
        print(f"{r['function']:<18} {r['bootstrap_bytes']:>11,} {r['zip_bytes']:>11,} {init:>16.1f} {inv:>18.1f}{flag}")
    if wrap:
        # What emulation alone costs before any code of ours runs: starting qemu and the arm64 dynamic loader.
        loader = ["/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1", "--version"]
        starts = []
        for _ in range(5):
            t = time.monotonic()
            subprocess.run(wrap + loader, stdout=subprocess.DEVNULL, check=True)
            starts.append((time.monotonic() - t) * 1000)
        how = (f"arm64 under qemu-user on x86_64, emulated and so several times slower than Graviton; qemu and the "
               f"arm64 loader alone take {min(starts):.1f} ms to start")
        loader_ms = round(min(starts), 1)
    else:
        how = "native arm64"
        loader_ms = None
    print(f"init: {how}; {args.runs} cold starts each; the transaction in begin.json went {' -> '.join(path)}")
    if args.json:
        with open(args.json, "w") as f:
            # The commit lets tools/test.sh put these figures in its report only for the same code.
            try:
                commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                        text=True).stdout.strip() or None
            except OSError:
                commit = None
            json.dump({"emulated": bool(wrap), "loaderMs": loader_ms, "commit": commit, "functions": rows,
                       "path": path}, f, indent=1)
    if failures:
        print("\nFAILED:", *failures, sep="\n  ", file=sys.stderr)
        sys.exit(1)
    print("check-artifacts: every package under 5 MB, every function answered as expected")


if __name__ == "__main__":
    main()

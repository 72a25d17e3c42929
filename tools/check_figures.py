#!/usr/bin/env python3
"""Holds the figures the documentation quotes to where they were measured.

Two sources: docs/benchmarks.json, written by `tools/bench.sh`, and docs/test-report.md, the committed report of a
named run of `tools/test.sh` (the test suites' figures, the permission simulation, the release packages). Every
figure the docs quote from them is bound to a named figure computed here from its source:

  - in Markdown (README.md and docs/*.md but the generated docs/benchmarks.md and docs/test-report.md), by a line
    of tools/doc-figures.txt, out of the prose's way: the page, a piece of its text with {} where each figure stands,
    and the figures' names, apart by " :: ":
        docs/performance.md :: 10,000 updates take {} ms :: update.10000.saga.wallMs
    or by a marker right after the number, `16,072<!-- fig: update.10000.saga.wallMs --> ms`, which
    `--move-markers` moves into tools/doc-figures.txt;
  - in template.yaml and statemachine/transaction.asl.json, which have no invisible markup, by TEXT_BINDINGS below:
    a piece of text with {} where each figure stands, and the figures' names.

A written figure agrees with its source when it is the source's value rounded to the decimals written (16,072 for
16071.59, 2.45 for 2.4511); dates and commits must be written exactly. The check fails, naming the file, the line,
the figure written and the figure the source gives, on any disagreement, on a marker naming no figure, and on
binding text that is no longer in its file.

  python3 tools/check_figures.py                   check (exit 1 on any disagreement)
  python3 tools/check_figures.py --self-test       show the check passes on a copy and fails on altered copies
  python3 tools/check_figures.py --list            every named figure, its value and its source
  python3 tools/check_figures.py --move-markers [FILE.md ...]
                                                   move each page's markers into tools/doc-figures.txt, each bound
                                                   to the words around its number (a table row's together; a marker
                                                   whose words are not unique on the page stays)
  python3 tools/check_figures.py --rewrite         rewrite every figure that disagrees to its source's value (keeping
                                                   the decimals written), list them, then check; read the prose
                                                   around each after: a rewritten figure can change what it says
  python3 tools/check_figures.py write-report --out FILE --lines SAGA_REPORT --commit C --date YYYY-MM-DD
      --seconds N --name NAME [--iam-log calls.jsonl | --iam-calls N] [--iam-output FILE]
      [--artifacts .local/artifacts.json]
                                                   what tools/test.sh runs to write .local/test-report.md
  python3 tools/check_figures.py publish-report .local/test-report.md
                                                   copy a run's report to docs/test-report.md, then list the quoted
                                                   figures that now disagree with it (exit 1 if any)

Prices (for the USD figures) are read from tests/src/bin/bench/main.rs, so they are the benchmark's own.
"""
import ast
import glob
import json
import math
import os
import re
import shutil
import sys
import tempfile
from decimal import Decimal

import cpu_by_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_JSON = "docs/benchmarks.json"
REPORT_MD = "docs/test-report.md"
BENCH_RS = "tests/src/bin/bench/main.rs"
TEMPLATE = "template.yaml"
ASL = "statemachine/transaction.asl.json"
MARKER = re.compile(r"<!--\s*fig:\s*([A-Za-z0-9_.+\-]+)\s*-->")
# The figures of the Markdown pages, one binding a line: "FILE :: text with {} :: name, name".
DOC_FIGURES = "tools/doc-figures.txt"
BOUND_AS = " :: "
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"
WRITTEN_NUMBER = re.compile(r"(" + NUMBER + r")\s*$")
# A date figure (a run's), as a binding's {} also matches it.
DATE = r"\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2} UTC)?"
WRITTEN_DATE = re.compile(r"(" + DATE + r")\s*$")

# Figures in files that cannot hold a marker: (file, text with {} for each figure, names of those figures). Spaces
# in the text match any run of white space (and a YAML comment's "#" after a line break), so rewrapping keeps them.
TEXT_BINDINGS = [
    (TEMPLATE, "sealing a staged request holds about {} bytes per byte of its JSON ({} MiB for {} updates, {} MB;",
     ["largest.stageBytesPerRequestByte", "largest.stagePeakMib", "largest.actions", "largest.requestMB"]),
    (TEMPLATE, "From the benchmark's {}-action transaction (docs/benchmarks.md): each phase function peaked at {}-{} MiB,",
     ["largest.actions", "largest.phasePeakMinMib", "largest.phasePeakMaxMib"]),
    (TEMPLATE, "a phase call took up to {} s with 16 shares of each step on 2 cores, Lock's processes with about {} s of CPU a call",
     ["largest.phaseSlowestCallS", "largest.lockCpuSPerCall"]),
    (TEMPLATE, "chunks sent together ({} for {} updates)", ["largest.chunks", "largest.actions"]),
    (ASL, "(the benchmark's {} updates took {} calls and {} history events)",
     ["largest.actions", "largest.lambdaCalls", "largest.historyEvents"]),
]


def md_files(root):
    skip = {os.path.join(root, "docs", "benchmarks.md"), os.path.join(root, REPORT_MD)}
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    return [f for f in files if f not in skip and os.path.exists(f)]


# ------------------------------------------------------------------------------------------------ docs/benchmarks.json

def prices(root):
    """The USD_PER_* constants of the benchmark, evaluated from their Rust expressions (numbers, * and /)."""
    text = open(os.path.join(root, BENCH_RS), encoding="utf-8").read()
    out = {}
    for name, expr in re.findall(r"const (USD_PER_[A-Z_]+): f64 = ([^;]+);", text):
        out[name] = evaluate(expr.replace("_", ""))
    needed = ["USD_PER_WRITE_UNIT", "USD_PER_READ_UNIT", "USD_PER_TRANSITION", "USD_PER_EXPRESS_EXECUTION",
              "USD_PER_EXPRESS_GB_SECOND", "USD_PER_LAMBDA_GB_SECOND", "USD_PER_LAMBDA_REQUEST"]
    missing = [n for n in needed if n not in out]
    if missing:
        raise SystemExit(f"check_figures: {BENCH_RS} no longer defines {', '.join(missing)}")
    return out


def evaluate(expr):
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            a, b = ev(node.left), ev(node.right)
            return a * b if isinstance(node.op, ast.Mult) else a / b
        raise ValueError(f"not a number expression: {expr}")
    return ev(ast.parse(expr.strip(), mode="eval"))


METHOD = {"dynamo-saga": "saga", "native": "native", "chunked": "chunked", "java-library": "javalib", "seed 000": "javalib"}
WAY = {"native TransactWriteItems with client retries": "native", "dynamo-saga in-process": "inProcess",
       "dynamo-saga state machine": "stateMachine"}


def bench_figures(bench, usd):
    f = {}
    f["written"] = bench["written"]
    f["writtenDate"] = bench["written"][:10]
    rows = {(r["kind"], r["actions"], METHOD[r["method"]]): r for r in bench["rows"]}

    def dynamodb_usd(bill):
        return bill["writeUnits"] * usd["USD_PER_WRITE_UNIT"] + bill["readUnits"] * usd["USD_PER_READ_UNIT"]

    for (kind, n, m), r in rows.items():
        p = f"{kind}.{n}.{m}."
        stopped = re.search(r"after (\d+) actions", r.get("note") or "")
        if stopped:
            f[p + "stoppedAfter"] = int(stopped.group(1))
        b = r.get("bill")
        if b:
            f[p + "calls"] = b["calls"]
            f[p + "writeUnits"] = b["writeUnits"]
            f[p + "readUnits"] = b["readUnits"]
            f[p + "callsPerAction"] = b["calls"] / n
            f[p + "writeUnitsPerAction"] = b["writeUnits"] / n
            f[p + "readUnitsPerAction"] = b["readUnits"] / n
            f[p + "usdPer1000"] = dynamodb_usd(b) * 1000 / n
        if r.get("wallMs") is not None:
            f[p + "wallMs"] = r["wallMs"]
            chunked = rows.get((kind, n, "chunked"))
            if chunked and chunked.get("wallMs"):
                f[p + "wallVsChunked"] = r["wallMs"] / chunked["wallMs"]
        if r.get("modelledWallMs") is not None:
            f[p + "modelledMs"] = r["modelledWallMs"]
            chunked = rows.get((kind, n, "chunked"))
            if chunked and chunked.get("modelledWallMs"):
                f[p + "modelledVsChunked"] = r["modelledWallMs"] / chunked["modelledWallMs"]
    for kind in bench["kinds"]:
        for n in bench["sizes"]:
            saga, native = rows.get((kind, n, "saga")), rows.get((kind, n, "native"))
            if saga and saga.get("bill"):
                # Beyond the lock write and the apply write each item costs (1 unit each for these items).
                f[f"{kind}.{n}.saga.beyondTwoWriteUnitsPerAction"] = saga["bill"]["writeUnits"] / n - 2
                if native and native.get("bill"):
                    f[f"{kind}.{n}.headerWriteUnits"] = saga["bill"]["writeUnits"] - native["bill"]["writeUnits"]
            update = rows.get(("update", n, "saga"))
            if kind != "update" and saga and saga.get("bill") and update and update.get("bill"):
                f[f"{kind}.{n}.saga.overUpdateWriteUnitsPerAction"] = (
                    (saga["bill"]["writeUnits"] - update["bill"]["writeUnits"]) / n)

    for s in bench.get("stateMachine", []):
        n, p = s["actions"], f"stateMachine.{s['actions']}."
        billed_s = max(math.ceil(s["durationMs"] / 100), 1) / 10
        express = usd["USD_PER_EXPRESS_EXECUTION"] + billed_s * (64 / 1024) * usd["USD_PER_EXPRESS_GB_SECOND"]
        f.update({p + "transitions": s["transitions"], p + "historyEvents": s["historyEvents"],
                  p + "lambdaCalls": s["lambdaCalls"], p + "durationMs": s["durationMs"],
                  p + "durationS": s["durationMs"] / 1000, p + "standardUsd": s["usd"], p + "expressUsd": express,
                  p + "standardOverExpress": s["usd"] / express,
                  p + "standardUsdPer1000": s["usd"] * 1000 / n, p + "lambdaUsdPer1000": s["lambdaUsd"] * 1000 / n})
        if s.get("modelledWallMs") is not None:
            f[p + "modelledMs"] = s["modelledWallMs"]
        if s.get("modelledCommitMs") is not None:
            f[p + "modelledCommitMs"] = s["modelledCommitMs"]
        update = rows.get(("update", n, "saga"))
        if update and update.get("bill"):
            f[p + "totalUsdPer1000"] = dynamodb_usd(update["bill"]) * 1000 / n + (s["usd"] + s["lambdaUsd"]) * 1000 / n

    trips = bench.get("roundTrips", [])
    for t in trips:
        m, kind = METHOD[t["method"]], t.get("kind", "update")
        # Updates keep the names they had before other kinds ran: roundTrips.1000.saga.default, and for the others
        # roundTrips.upsert.1000.saga.default.
        at = f"roundTrips.{t['actions']}" if kind == "update" else f"roundTrips.{kind}.{t['actions']}"
        names = [f"{at}.{m}" + (f".{t['inFlight']}" if m == "saga" else "")]
        if t.get("default"):
            names.append(f"{at}.saga.default")
        chunked = next((c for c in trips if c["actions"] == t["actions"] and c["method"] == "chunked"
                        and c.get("kind", "update") == kind), None)
        for p in names:
            f[p] = t["roundTrips"]
            f[p + ".calls"] = t["calls"]
            f[p + ".wallMs"] = t["wallMs"]
            for key in ("commitWallMs", "commitModelledMs"):
                if t.get(key) is not None:
                    f[p + "." + key] = t[key]
            if "modelledWallMs" in t:
                f[p + ".modelledMs"] = t["modelledWallMs"]
                if chunked and chunked.get("modelledWallMs"):
                    f[p + ".modelledVsChunked"] = t["modelledWallMs"] / chunked["modelledWallMs"]
                for s in t.get("sensitivity", []):
                    c = next((x for x in (chunked or {}).get("sensitivity", []) if x["perCallMs"] == s["perCallMs"]
                              and x["perItemMs"] == s["perItemMs"]), None)
                    q = f"{p}.modelled.{s['perCallMs']:g}+{s['perItemMs']:g}"
                    f[q] = s["modelledWallMs"]
                    if c and c["modelledWallMs"]:
                        f[q + ".vsChunked"] = s["modelledWallMs"] / c["modelledWallMs"]
            for key, name in (("plainMedianMs", "plainMedianMs"), ("proxyMedianMs", "proxyMedianMs")):
                if t.get(key) is not None:
                    f[p + "." + name] = t[key]
                    if chunked and chunked.get(key):
                        f[p + "." + name.replace("MedianMs", "VsChunked")] = t[key] / chunked[key]
            cpu, cores = t.get("plainCpu"), bench.get("cores")
            if cpu:
                both = cpu["dynamodbMs"] + cpu["clientMs"]
                f.update({p + ".cpu.dynamodbMs": cpu["dynamodbMs"], p + ".cpu.clientMs": cpu["clientMs"],
                          p + ".cpu.bothMs": both})
                # A run shorter than the clock tick Linux counts CPU time in can show none: no ratio then.
                if chunked and chunked.get("plainCpu") and chunked["plainCpu"]["dynamodbMs"]:
                    f[p + ".cpu.dynamodbVsChunked"] = cpu["dynamodbMs"] / chunked["plainCpu"]["dynamodbMs"]
                if cores and chunked and chunked.get("plainMedianMs"):
                    # The least wall time the machine's cores allow this CPU time, against chunked's median.
                    floor = both * t["actions"] / cores
                    f[p + ".cpu.floorMs"] = floor
                    f[p + ".cpu.floorVsChunked"] = floor / chunked["plainMedianMs"]

    engine = {e["call"]: e["dynamodbMsPerItem"] for e in bench.get("engine", [])}
    if engine:
        f["cores"] = bench.get("cores")
        for call, ms in engine.items():
            f[f"engine.{call}.ms"] = ms
            if engine.get("Transact100"):
                f[f"engine.{call}.vsTransact"] = ms / engine["Transact100"]
        pairs = {"protocol": ("LockUpdate", "ApplyUpdate"), "partiql": ("PartiqlLock25", "PartiqlApply25")}
        for name, (lock, apply) in pairs.items():
            if lock in engine and apply in engine:
                f[f"engine.{name}.ms"] = engine[lock] + engine[apply]
                if engine.get("Transact100"):
                    f[f"engine.{name}.vsTransact"] = (engine[lock] + engine[apply]) / engine["Transact100"]

    seal = bench.get("largestSeal")
    if seal:
        mb = seal["requestBytes"] / 1e6
        f.update({"largestSeal.actions": seal["actions"], "largestSeal.itemBytes": seal["itemBytes"],
                  "largestSeal.requestMB": mb, "largestSeal.chunks": seal["chunks"], "largestSeal.sealMs": seal["sealMs"],
                  "largestSeal.sealS": seal["sealMs"] / 1000, "largestSeal.msPerMB": seal["sealMs"] / mb,
                  "largestSeal.stagePeakMib": seal["stagePeakMib"],
                  "largestSeal.bytesPerRequestByte": seal["stagePeakMib"] * 2**20 / seal["requestBytes"],
                  "largestSeal.writtenDate": seal["written"][:10]})

    for t in bench.get("throttled", []):
        p = f"throttled.{t['actions']}."
        f.update({p + "share": t["share"], p + "throttledMs": t["throttledMedianMs"],
                  p + "unthrottledMs": t["unthrottledMedianMs"],
                  p + "ratio": t["throttledMedianMs"] / t["unthrottledMedianMs"], p + "writes": t["writes"],
                  p + "throttled": t["throttled"]})

    for c in bench.get("committedReads", []):
        p, reads = f"committedReads.{c['actions']}.{c['way']}.", c["reads"]
        f.update({p + "firstReadUnits": c["first"]["readUnits"] / reads,
                  p + "firstWriteUnits": c["first"]["writeUnits"] / reads, p + "firstMs": c["firstMs"],
                  p + "againReadUnits": c["again"]["readUnits"] / reads,
                  p + "againWriteUnits": c["again"]["writeUnits"] / reads, p + "againMs": c["againMs"],
                  p + "finishWriteUnitsPerAction": c["finish"]["writeUnits"] / c["actions"]})

    for r in bench.get("revisit", []):
        p, n = f"revisit.{r['actions']}.", r["actions"]
        f.update({p + "readUnitsPerItem": r["visit"]["readUnits"] / n,
                  p + "writeUnitsPerItem": r["visit"]["writeUnits"] / n, p + "calls": r["visit"]["calls"],
                  p + "ms": r["visitMs"], p + "cleared": r["cleared"],
                  p + "transactionWriteUnitsPerItem": r["transaction"]["writeUnits"] / n})

    for c in bench.get("contention", []):
        k = re.search(r"(\d+)-(\d+) accounts", c["workload"]).group(2)
        p = f"contention.{WAY[c['way']]}.{k}."
        ended = c["committed"] + c["refused"]
        f.update({p + "transfers": c["transfers"], p + "committed": c["committed"], p + "refused": c["refused"],
                  p + "gaveUp": c["gaveUp"], p + "endedByOwnOutcome": ended,
                  p + "endedByOwnOutcomePct": 100 * ended / c["transfers"], p + "attempts": c["attempts"],
                  p + "committedPerS": c["committedPerS"], p + "p50Ms": c["p50Ms"], p + "p99Ms": c["p99Ms"],
                  p + "elapsedMs": c["elapsedMs"]})
    if "contention.inProcess.99.elapsedMs" in f and "contention.native.99.elapsedMs" in f:
        f["contention.inProcessOverNative.99"] = f["contention.inProcess.99.elapsedMs"] / f["contention.native.99.elapsedMs"]

    big = bench.get("largest")
    if big:
        fns = {x["function"].removeprefix("saga-"): x for x in big["functions"]}
        phases = [x for name, x in fns.items() if name != "stage"]
        called = [x for x in phases if x["calls"] > 0]
        lambda_usd = sum(x["totalMs"] / 1000 * x["memoryMb"] / 1024 * usd["USD_PER_LAMBDA_GB_SECOND"]
                         + x["calls"] * usd["USD_PER_LAMBDA_REQUEST"] for x in big["functions"])
        f.update({
            "largest.written": big["written"], "largest.writtenDate": big["written"][:10],
            "largest.actions": big["actions"], "largest.requestMB": big["requestBytes"] / 1e6,
            "largest.chunks": big["chunks"], "largest.appendMaxMs": big["appendMaxMs"], "largest.sealMs": big["sealMs"],
            "largest.transitions": big["transitions"], "largest.historyEvents": big["historyEvents"],
            "largest.lambdaCalls": big["lambdaCalls"], "largest.durationS": big["durationMs"] / 1000,
            "largest.standardUsd": big["transitions"] * usd["USD_PER_TRANSITION"], "largest.lambdaUsd": lambda_usd,
            "largest.lambdaUsdPer1000": lambda_usd * 1000 / big["actions"],
            "largest.writeUnitsReported": big["writeUnitsReported"], "largest.readUnitsReported": big["readUnitsReported"],
            "largest.phasePeakMinMib": min(x["peakMib"] for x in called),
            "largest.phasePeakMaxMib": max(x["peakMib"] for x in called),
            "largest.phaseSlowestCallS": max(x["maxMs"] for x in phases) / 1000,
        })
        for name, x in fns.items():
            p = f"largest.{name}."
            f.update({p + "calls": x["calls"], p + "maxS": x["maxMs"] / 1000, p + "totalS": x["totalMs"] / 1000,
                      p + "peakMib": x["peakMib"], p + "memoryMb": x["memoryMb"]})
            if x["calls"]:
                f[p + "cpuSPerCall"] = x["cpuMs"] / x["calls"] / 1000
                f[p + "cpuS"] = x["cpuMs"] / 1000
                f[p + "sPer1000Actions"] = x["totalMs"] / 1000 / (big["actions"] / 1000)
        if "stage" in fns:
            f["largest.stagePeakMib"] = fns["stage"]["peakMib"]
            f["largest.stageBytesPerRequestByte"] = fns["stage"]["peakMib"] * 2**20 / big["requestBytes"]
        f["largest.lockCpuSPerCall"] = f.get("largest.lock.cpuSPerCall")

    for r in bench.get("cpuPerRequest", []):
        p = f"cpuPerRequest.{r['actions']}."
        f.update({p + "ratio": r["ratio"], p + "runs": r["runs"], p + "sagaMsPerRequest": r["sagaMsPerRequest"],
                  p + "bareMsPerRequest": r["bareMsPerRequest"], p + "sagaMsPerUpdate": r["sagaMsPerUpdate"],
                  p + "bareMsPerUpdate": r["bareMsPerUpdate"], p + "sagaRequestsPerUpdate": r["sagaRequestsPerUpdate"],
                  p + "minRatio": min(r["ratios"]), p + "maxRatio": max(r["ratios"])})

    for r in bench.get("model", []):
        n = r["actions"]
        p = f"model.{n}."
        f.update({p + "modelledMs": r["modelledMs"], p + "modelledS": r["modelledMs"] / 1000,
                  p + "roundTripsOnlyMs": r["roundTripsOnlyMs"], p + "cpuMs": r["cpuMs"],
                  p + "cpuMsPerUpdate": r["cpuMs"] / n, p + "quotaFloorMs": r["quotaFloorMs"],
                  p + "quotaFloorS": r["quotaFloorMs"] / 1000, p + "fanOut": r["fanOut"],
                  p + "shareBatches": r["shareBatches"], p + "inFlight": r["inFlight"]})
        for factor, ms in r["sensitivity"]:
            f[p + f"cpuX{factor:g}Ms"] = ms
            f[p + f"cpuX{factor:g}S"] = ms / 1000
        chunked = f.get(f"update.{n}.chunked.modelledMs")
        if chunked:
            f[p + "vsChunked"] = r["modelledMs"] / chunked
        for ph in r["phases"]:
            q = p + ph["phase"].lower() + "."
            f.update({q + "modelledMs": ph["modelledMs"], q + "cpuMs": ph["cpuMs"], q + "chainMs": ph["chainMs"],
                      q + "invocations": ph["invocations"]})

    ddb10 = f.get("update.10.saga.usdPer1000")
    for r in bench.get("smallRequests", []):
        p = "small." + ("api" if r["function"] == "saga-stage" else "events") + "."
        orchestration = r["stepFunctionsUsdPer1000"] + r["lambdaUsdPer1000"]
        f.update({p + "executions": r["executions"], p + "requests": r["runs"] + 1, p + "medianMs": r["medianMs"],
                  p + "lambdaUsdPer1000": r["lambdaUsdPer1000"], p + "orchestrationUsdPer1000": orchestration})
        if ddb10:
            f[p + "vsDynamoDB"] = orchestration / ddb10
            f[p + "totalUsdPer1000"] = orchestration + ddb10

    for r in bench.get("allIn", []):
        n = r["actions"]
        p = f"allIn.{n}."
        extra = r["apiGatewayUsdPer1000"] + r["eventsUsdPer1000"] + r["logsUsdPer1000"]
        f.update({p + "apiRequests": r["apiRequests"], p + "lambdaCalls": r["lambdaCalls"],
                  p + "functionLogBytes": r["functionLogBytes"],
                  p + "logBytes": r["functionLogBytes"] + r["platformLogBytes"] + r["accessLogBytes"],
                  p + "apiGatewayUsdPer1000": r["apiGatewayUsdPer1000"], p + "eventsUsdPer1000": r["eventsUsdPer1000"],
                  p + "logsUsdPer1000": r["logsUsdPer1000"], p + "extraUsdPer1000": extra})
        # With DynamoDB, Step Functions and Lambda: the API's one call at 10 actions, the state machine above.
        base = f.get("small.api.totalUsdPer1000") if n == 10 else f.get(f"stateMachine.{n}.totalUsdPer1000")
        if base is not None:
            f[p + "totalUsdPer1000"] = base + extra

    for r in bench.get("mrsc", []):
        p = f"mrsc.{r['actions']}."
        for way, q in (("mrsc", p), ("singleRegion", p + "singleRegion.")):
            w = r[way]
            f.update({q + "writeUnits": w["writeUnitsPerAction"], q + "readUnits": w["readUnitsPerAction"],
                      q + "calls": w["calls"], q + "roundTrips": w["roundTrips"], q + "modelledMs": w["modelledMs"]})
            for write_ms, ms in w["crossRegion"]:
                f[q + f"write{write_ms:g}Ms"] = ms

    if bench.get("functions"):
        init = [x["initMs"] for x in bench["functions"]]
        f["functions.initMinMs"], f["functions.initMaxMs"] = min(init), max(init)
    cross = bench.get("nonTransactionalCrossCheck")
    if cross:
        for k in ("plainWriteUnits", "plainWriteReported", "plainReadUnits", "plainReadReported"):
            f["crossCheck." + k] = cross[k]
    return {k: v for k, v in f.items() if v is not None}


# ---------------------------------------------------------------------------------------------- the report of a run

# What the test suites report (tests/src/lib.rs `report`), one pattern per kind of line: each named group is a
# figure, named by the line's prefix and the group's name.
def _slug_way(way):
    return {"one call": "oneCall", "the protocol": "protocol", "the protocol, reads applying first": "applyFirst",
            "protocol": "protocol", "the library": "library", "as the library runs it": "asTheLibraryRuns",
            "the state machine": "stateMachine",
            "dynamo-saga in-process": "inProcess", "dynamo-saga state machine": "stateMachine"}[way]


SUITE_LINES = [
    (r"(?P<actions>[\d,]+) actions through the state machine: (?P<lambdaCalls>\d+) Lambda calls, (?P<transitions>\d+)"
     r" transitions, about (?P<historyEvents>\d+) history events, (?P<ms>\d+) ms",
     lambda d: "e2e.largest"),
    (r"Begin carrying a request out in one call, crashed before each write and after the last, retried: "
     r"(?P<points>\d+) crash points, (?P<violations>\d+) violations",
     lambda d: "crash.begin"),
    (r"bad input through the library: (?P<requests>\d+) requests rejected with ValidationError, (?P<writes>\d+) writes",
     lambda d: "badInput.library"),
    (r"bad input through the state machine: (?P<stateMachine>\d+) requests failed with ValidationError; through the "
     r"staging API: (?P<staging>\d+), plus (?P<httpOnly>\d+) bad calls only an HTTP API meets; (?P<writes>\d+) writes",
     lambda d: "badInput"),
    (r"committed reads \((?P<way>[^)]+)\): (?P<stopPoints>\d+) stop points, (?P<between>\d+) reads between before and "
     r"after; uncommitted reads differed at (?P<uncommittedDiffered>\d+)",
     lambda d: "reads." + _slug_way(d.pop("way"))),
    (r"concurrency: (?P<transfers>\d+) transfers over (?P<accounts>\d+) accounts, (?P<minK>\d+)-(?P<maxK>\d+) accounts"
     r" each, by (?P<workers>\d+) workers \((?P<way>[^)]+)\): (?P<committed>\d+) committed, (?P<refused>\d+) refused by"
     r" their own condition, (?P<gaveUp>\d+) given up \([^)]*\); (?P<plainWrites>\d+) plain writes \((?P<heldOff>\d+)"
     r" held off by a lock\); slowest transfer (?P<slowestS>[\d.]+) s; (?P<totalS>[\d.]+) s in all; total balance "
     r"conserved, no lost update; (?P<attempts>\d+) attempts in all, each transfer ended within its deadline",
     lambda d: "concurrency." + _slug_way(d.pop("way"))),
    (r"crash crash-(?P<scenario>[a-z]+\d+)(?: \((?P<way>one call|protocol)\))?: (?P<actions>\d+) actions, (?P<path>.+?), "
     r"(?P<points>\d+) crash points of (?P<writes>\d+) writes, recovered by the (?P<by>coordinator|sweeper), "
     r"(?P<violations>\d+) violations",
     lambda d: "crash." + d.pop("scenario") + ("." + _slug_way(d.pop("way")) if d.get("way") else "")),
    (r"crash recovered by the state machine's retry: (?P<scenarios>\d+) scenarios \(.*\), (?P<violations>\d+) violations",
     lambda d: "crash.stateMachineRetry"),
    (r"killed driver then sweep --older-than 0: (?P<runs>\d+) runs \(.*?\), no stray item or attribute once the bound "
     r"passed \((?P<outcomes>.*)\)",
     lambda d: "killedDriver"),
    (r"late lock write after the end \((?P<end>[a-z]+), items (?P<items>[a-z]+)\): landed after the end, cleared "
     r"(?P<boundS>\d+) s after it, (?P<read>\d+) items read",
     lambda d: "lateAfterEnd." + d.pop("end") + "." + d.pop("items")),
    (r"late lock write of a Lock call that timed out, through the state machine: landed after the end, the execution "
     r"ended with its transaction, cleared by the stack's sweeper once due \((?P<cases>.*)\)",
     lambda d: "lateStateMachine"),
    (r"lost answers through the state machine: (?P<lost>\d+) write answers lost of (?P<writes>\d+) writes, each "
     r"landing up to (?P<lateS>\d+) s late; executions ended with their transactions \(median (?P<times>.*)\), every "
     r"one all-or-nothing; (?P<visited>\d+) visited by the sweeper after the bound, audit clean",
     lambda d: "lostAnswers"),
    (r"late lock write: delivered after its item was applied, before apply was recorded: (?P<adds>\d+) ADDs applied "
     r"once, the late lock cleared",
     lambda d: "lateLock"),
    (r"parity with native TransactWriteItems: (?P<cases>\d+) cases, (?P<actions>\d+) actions: (?P<committed>\d+) "
     r"committed, (?P<cancelled>\d+) cancelled, all equal to native, (?P<oneCall>\d+) of them in one call and all "
     r"(?P<protocol>\d+) through the protocol too",
     lambda d: "parity"),
    (r"refusal catalogue through (?P<way>the library|the state machine): (?P<cases>\d+) cases of (?P<rules>\d+) rules at "
     r"(?P<small>\d+) and (?P<large>\d+) actions, each equal to native, (?P<partlyApplied>\d+) partly applied, "
     r"(?P<locksLeft>\d+) locks left",
     lambda d: "refusals." + _slug_way(d.pop("way"))),
    (r"shop \((?P<way>[^)]+)\): (?P<orders>\d+) concurrent orders for (?P<units>\d+) units: (?P<filled>\d+) wholly "
     r"filled, (?P<refused>\d+) refused by their own condition, (?P<sold>\d+) units sold once each, (?P<s>[\d.]+) s",
     lambda d: "shop." + _slug_way(d.pop("way"))),
    (r"snapshot reads: (?P<answered>\d+) snapshots of a (?P<accounts>\d+)-account bank while (?P<transfers>\d+) "
     r"transfers of (?P<minK>\d+)-(?P<maxK>\d+) accounts committed \((?P<rounds>\d+) rounds\), each with the bank's "
     r"total \((?P<conflicts>\d+) cancelled by TransactionConflict, at most (?P<passes>\d+) passes\)",
     lambda d: "snapshot.bank"),
    (r"snapshot reads: a 4-action transaction \(update, delete, insert, check\) stopped between every two of its "
     r"(?P<writes>\d+) writes, read all before or all after at each: (?P<states>.*)",
     lambda d: "snapshot.stops"),
    (r"snapshot reads: a 1,000-update transaction stopped between every two of its (?P<writes>\d+) writes, all 1,000 "
     r"items read all before or all after at each: (?P<states>.*)",
     lambda d: "snapshot.large"),
    (r"snapshot reads: a 1,000-update transaction stopped at (?P<points>\d+) of its (?P<writes>\d+) writes, read all "
     r"before or all after at each \((?P<states>.*)\)",
     lambda d: "snapshot.large"),
    (r"snapshot reads: 1,000 items of about 1 KB read in (?P<passes>\d+) passes, (?P<calls>\d+) calls, "
     r"(?P<readUnits>[\d.]+) read units \(native TransactGetItems: 2 an item\)",
     lambda d: "snapshot.cost"),
    (r"snapshot reads through the API: (?P<answered>\d+) answers of a (?P<accounts>\d+)-account bank while "
     r"(?P<transfers>\d+) transfers committed \((?P<rounds>\d+) rounds\), each with the bank's total "
     r"\((?P<conflicts>\d+) cancelled by TransactionConflict\); read-only entitlements, bad requests and answers over 6 MB refused",
     lambda d: "snapshot.api"),
    (r"status API during a (?P<actions>\d+)-action transaction: (?P<reads>\d+) reads while it ran, (?P<states>\d+) "
     r"distinct progress states",
     lambda d: "statusApi"),
    (r"the API \(POST /transactions, Lambda proxy\): a (?P<bodyKB>\d+) KB body .*; (?P<invalidBodies>\d+) invalid bodies "
     r"answered 4xx, (?P<executions>\d+) executions started, (?P<writes>\d+) writes",
     lambda d: "api"),
    (r"throttling: (?P<updates>\d+) updates in-process with a tenth of (?P<writes>\d+) writes throttled "
     r"\((?P<throttled>\d+)\): committed, each item once; (?P<ms>\d+) ms against (?P<plainMs>\d+) ms unthrottled through "
     r"the same proxy \((?P<ratio>[\d.]+)x\)",
     lambda d: "throttling"),
    (r"update evaluator vs DynamoDB Local, refusals by kind: (?P<kinds>\{.*\})",
     lambda d: "eval"),
    (r"update evaluator vs DynamoDB Local: (?P<updates>\d+) random updates \(seed (?P<seed>\d+)\) in (?P<s>[\d.]+) s, "
     r"(?P<disagreements>\d+) disagreements; (?P<accepted>\d+) accepted, (?P<refused>\d+) refused",
     lambda d: "eval"),
    (r"wound-wait: a (?P<actions>\d+)-action transaction committed in (?P<s>[\d.]+) s while (?P<workers>\d+) workers ran "
     r"(?P<newer>\d+) newer (?P<newerActions>\d+)-action transactions over its items \((?P<newerCommitted>\d+) committed\)",
     lambda d: "woundWait"),
    (r"writes near DynamoDB's limits \(seed (?P<seed>\d+)\): (?P<generated>\d+) generated at (?P<small>\d+) and "
     r"(?P<large>\d+) actions, each equal to native, (?P<partlyApplied>\d+) partly applied",
     lambda d: "nearLimits"),
]
# How each kind of line begins: a line that holds one of these after something other than white space is two lines
# run together (two test binaries appending at once), and is split there.
LINE_STARTS = ["10,000 actions through the state machine", "Begin carrying a request", "bad input through",
               "committed reads (", "concurrency: ", "crash crash-", "crash recovered by", "killed driver then sweep",
               "late lock write after the end", "late lock write of a Lock call", "parity with native",
               "refusal catalogue through", "shop (", "snapshot reads", "status API during", "the API (POST", "throttling: ",
               "update evaluator vs",
               "wound-wait: ", "writes near DynamoDB's limits", "MRSC mode, through the stand-in: ", "MRSC stand-in"]
# The suites run again in MRSC mode print their lines after this: read as the others, their figures named mrscMode.*.
MRSC_MODE = "MRSC mode, through the stand-in: "
SPLIT = re.compile(r"(?<=\S)(?=" + "|".join(re.escape(s) for s in LINE_STARTS) + ")")


def split_lines(raw):
    """The report's lines: blank ones dropped, lines run together split apart, sorted as `sort` in the C locale."""
    out = []
    for line in raw:
        out += [part.strip() for part in SPLIT.split(line.strip()) if part.strip()]
    return sorted(out)


def number(text):
    text = text.replace(",", "")
    return float(text) if "." in text else int(text)


def suite_figures(lines):
    mrsc = [line[len(MRSC_MODE):] for line in lines if line.startswith(MRSC_MODE)]
    lines = [line for line in lines if not line.startswith(MRSC_MODE)]
    f, unknown, concurrency = {}, [], []
    for line in lines:
        for pattern, prefix in SUITE_LINES:
            m = re.fullmatch(pattern, line)
            if not m:
                continue
            d = {k: v for k, v in m.groupdict().items() if v is not None}
            name = prefix(d)
            if name.startswith("concurrency.inProcess"):
                concurrency.append(d)
                break
            for k, v in d.items():
                if k == "kinds":
                    kinds = json.loads(v)
                    f["eval.refusalKinds"] = len(kinds)
                    for kind, count in kinds.items():
                        f[f"eval.kind.{kind}"] = count
                elif re.fullmatch(NUMBER, v):
                    f[f"{name}.{k}"] = number(v)
                else:
                    f[f"{name}.{k}"] = v
            break
        else:
            unknown.append(line)
    # The two in-process banks print the same label: the one through the protocol (one call turned off) is the one
    # whose plain writers met locks (tests/concurrency.rs asserts they did), the other runs each transfer in one call.
    concurrency.sort(key=lambda d: -int(d["heldOff"]))
    for d, way in zip(concurrency, ["protocol", "oneCall"]):
        for k, v in d.items():
            f[f"concurrency.{way}.{k}"] = number(v)
    for by in ("coordinator", "sweeper"):
        runs = [k[:-3] for k, v in f.items() if k.startswith("crash.") and k.endswith(".by") and v == by]
        f[f"crash.{by}.points"] = sum(f[r + ".points"] for r in runs)
        f[f"crash.{by}.violations"] = sum(f[r + ".violations"] for r in runs)
        f[f"crash.{by}.scenarios"] = len(runs)
    if mrsc:
        figures, not_read = suite_figures(mrsc)
        f.update({"mrscMode." + k: v for k, v in figures.items()})
        unknown += [MRSC_MODE + line for line in not_read]
    return f, unknown


IAM_CONFIG = re.compile(r"(?P<config>[a-z-]+): (?P<evaluated>\d+) distinct requests evaluated \((?P<logLines>\d+) log "
                        r"lines, (?P<recorded>\d+) distinct recorded requests; (?P<notLocal>\d+) not run locally\), "
                        r"(?P<denied>\d+) denied; (?P<held>\d+) permissions held")


def iam_figures(lines):
    f, configs = {}, []
    for line in lines:
        if m := re.fullmatch(r"over (\d+) logged calls", line):
            f["iam.loggedCalls"] = int(m.group(1))
        elif m := IAM_CONFIG.fullmatch(line):
            configs.append({k: (v if k == "config" else int(v)) for k, v in m.groupdict().items()})
        elif m := re.fullmatch(r"unused permissions \(held, and used by no call in some configuration\): (\d+)", line):
            f["iam.unused"] = int(m.group(1))
        elif m := re.match(r"(\d+) denied, (\d+) unused permissions without a justification", line):
            f["iam.denied"], f["iam.unjustified"] = int(m.group(1)), int(m.group(2))
    if configs:
        f["iam.configurations"] = len(configs)
        f["iam.recordedRequests"] = max(c["recorded"] for c in configs)
        f["iam.notRunLocallyMax"] = max(c["notLocal"] for c in configs)
        f["iam.deniedInConfigurations"] = sum(c["denied"] for c in configs)
    return f


def parse_report(text):
    """The sections of a report as write_report writes it."""
    lines = text.split("\n")
    head = re.fullmatch(r"# Test report: commit (\S+), (\d{4}-\d\d-\d\d) UTC, ([\d,]+) s \((.+)\)", lines[0])
    if not head:
        raise ValueError("its first line is not '# Test report: commit C, YYYY-MM-DD UTC, N s (NAME)'")
    report = {"commit": head.group(1), "date": head.group(2), "seconds": number(head.group(3)),
              "name": head.group(4), "suites": [], "iam": [], "artifacts": [], "notes": []}
    section = None
    for line in lines[1:]:
        if line.startswith("## "):
            title = line[3:]
            section = ("suites" if title.startswith("Measured by the test suites") else
                       "iam" if title.startswith("Permission simulation") else
                       "artifacts" if title.startswith("Release packages") else None)
        elif section and line.startswith("- "):
            report["notes" if section == "artifacts" else section].append(line[2:])
        elif section == "artifacts" and line.startswith("| ") and not line.startswith("| function") \
                and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            report["artifacts"].append({"function": cells[0], "bootstrapBytes": number(cells[1]),
                                        "zipBytes": number(cells[2]), "initMs": number(cells[3]),
                                        "invokeMs": number(cells[4])})
    report["suites"] = split_lines(report["suites"])
    return report


def report_figures(report):
    f = {"run.commit": report["commit"], "run.date": report["date"], "run.seconds": report["seconds"],
         "run.minutes": report["seconds"] / 60, "run.name": report["name"]}
    if ".ci/run" in report["name"]:
        f["ci.minutes"] = report["seconds"] / 60
    suites, unknown = suite_figures(report["suites"])
    f.update(suites)
    f.update(iam_figures(report["iam"]))
    rows = report["artifacts"]
    if rows:
        f.update({"artifacts.functions": len(rows),
                  "artifacts.zipMinMB": min(r["zipBytes"] for r in rows) / 1e6,
                  "artifacts.zipMaxMB": max(r["zipBytes"] for r in rows) / 1e6,
                  "artifacts.zipTotalMB": sum(r["zipBytes"] for r in rows) / 1e6,
                  "artifacts.bootstrapMinMB": min(r["bootstrapBytes"] for r in rows) / 1e6,
                  "artifacts.bootstrapMaxMB": max(r["bootstrapBytes"] for r in rows) / 1e6,
                  "artifacts.initMinMs": min(r["initMs"] for r in rows),
                  "artifacts.initMaxMs": max(r["initMs"] for r in rows)})
    for note in report["notes"]:
        if m := re.search(r"qemu and the arm64 loader alone: ([\d.]+) ms", note):
            f["artifacts.loaderMs"] = float(m.group(1))
    return f, unknown


def write_report(out, raw_lines, commit, date, seconds, name, iam_calls=None, iam_output=None, artifacts=None,
                 steps=None, cpu=None):
    lines = split_lines(raw_lines)
    text = [f"# Test report: commit {commit}, {date} UTC, {seconds:,} s ({name})", "",
            "What one run measured, written by `tools/test.sh` (`.local/test-report.md`) and published with "
            "`python3 tools/check_figures.py publish-report`. [guarantees.md](guarantees.md) and "
            "[testing.md](testing.md) quote it; `tools/check_figures.py` holds them to it.", "",
            "## Measured by the test suites", ""]
    text += [f"- {line}" for line in lines]
    if iam_output is not None:
        text += ["", "## Permission simulation (tools/iam-sim.sh)", ""]
        if iam_calls is not None:
            text.append(f"- over {iam_calls} logged calls")
        for line in iam_output:
            # The summary lines; the lists under a heading ending in ":" are in .local/iam.
            if line.strip() and not line[0].isspace() and not line.rstrip().endswith(":"):
                text.append("- " + re.sub(r"\S*/docs/iam\.md", "docs/iam.md", line.rstrip()))
    if artifacts:
        text += ["", "## Release packages (tools/check-artifacts.sh, the same commit)", "",
                 "| function | bootstrap (bytes) | zip (bytes) | init (ms, least) | invoke (ms, least) |",
                 "| --- | ---: | ---: | ---: | ---: |"]
        for r in artifacts["functions"]:
            text.append(f"| {r['function']} | {r['bootstrap_bytes']:,} | {r['zip_bytes']:,} | "
                        f"{min(r.get('init_ms') or [math.nan]):.1f} | {min(r.get('invoke_ms') or [math.nan]):.1f} |")
        text.append("")
        if artifacts.get("emulated"):
            loader = artifacts.get("loaderMs")
            text.append("- init of arm64 under qemu-user on x86_64" +
                        (f"; qemu and the arm64 loader alone: {loader:.1f} ms" if loader is not None else ""))
        else:
            text.append("- init on arm64")
    if steps:
        cores = os.cpu_count() or 1
        text += ["", "## Steps", "",
                 f"What each step of the run took, in its order (`tools/steps.sh`): its wall time, and the CPU time the "
                 f"whole machine was busy meanwhile (every process, the servers the tests talk to included), of the "
                 f"{cores} cores' {cores} seconds a second. A step run beside another follows it, marked so: the machine's busy "
                 f"time then counts both, and the totals count only the steps run one after another.", "",
                 "| step | seconds | busy core-seconds | cores busy |", "| --- | ---: | ---: | ---: |"]
        # A step run beside another (a fourth field naming it) follows that step's row; both count the machine's busy
        # time while they ran, so only the steps run one after the other make the totals.
        main = [s for s in steps if not s[3]]
        rows = []
        for step in main:
            rows += [step] + [s for s in steps if s[3] == step[0]]
        rows += [s for s in steps if s[3] and s[3] not in {m[0] for m in main}]
        for name, secs, busy, by in rows:
            label = f"{name} (beside: {by})" if by else name
            text.append(f"| {label} | {secs:,} | {busy:,} | {busy / secs / cores:.0%} |" if secs else
                        f"| {label} | {secs:,} | {busy:,} | - |")
        wall, busy = sum(s[1] for s in main), sum(s[2] for s in main)
        text.append(f"| all steps | {wall:,} | {busy:,} | {busy / max(wall, 1) / cores:.0%} |")
    if steps and cpu:
        text += cpu_table(steps, cpu)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write("\n".join(text) + "\n")
    return lines


def cpu_table(steps, cpu):
    """The report's table of each long step's CPU seconds by kind of process. `cpu` is (samples, windows): the rows
    tools/cpu_by_process.py wrote, and each step's (name, began, ended) as tools/steps.sh wrote them."""
    samples, windows = cpu
    long_steps = [s for s in steps if not s[3] and s[1] >= 60]
    rows = []
    for name, secs, busy, _ in long_steps:
        window = next((w for w in windows if w[0] == name), None)
        kinds = window and cpu_by_process.between(samples, window[1], window[2])
        if kinds is not None:
            rows.append((name, busy, kinds))
    if not rows:
        return []
    order = [k for k, _ in cpu_by_process.KINDS] + [cpu_by_process.OTHER]
    shown = [k for k in order if any(round(r[2].get(k, 0)) > 0 for r in rows)]
    text = ["", "## CPU by kind of process", "",
            "The CPU seconds each kind of process spent during each step of a minute or more, by samples of every "
            "process every 2 s (`tools/cpu_by_process.py`), steps run beside it included; \"unseen\" is the "
            "machine's busy time no sample saw (processes that began and ended between two samples, such as a "
            "build's compiler runs).", "",
            "| step | busy | " + " | ".join(shown) + " | unseen |",
            "| --- | ---: | " + " | ".join("---:" for _ in shown) + " | ---: |"]
    for name, busy, kinds in rows:
        seen = sum(kinds.values())
        text.append(f"| {name} | {busy:,} | " + " | ".join(f"{round(kinds.get(k, 0)):,}" for k in shown) +
                    f" | {max(0, round(busy - seen)):,} |")
    return text


# ------------------------------------------------------------------------------------------------------ the check

def all_figures(root):
    """name -> (value, source)."""
    figures = {}
    bench = json.load(open(os.path.join(root, BENCH_JSON), encoding="utf-8"))
    for k, v in bench_figures(bench, prices(root)).items():
        figures[k] = (v, BENCH_JSON)
    report_path = os.path.join(root, REPORT_MD)
    unknown = []
    if os.path.exists(report_path):
        try:
            rep, unknown = report_figures(parse_report(open(report_path, encoding="utf-8").read()))
        except ValueError as e:
            raise SystemExit(f"check_figures: {REPORT_MD}: {e}")
        for k, v in rep.items():
            figures[k] = (v, REPORT_MD)
    return figures, unknown


def shown(value):
    if isinstance(value, str):
        return value
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1:
        return f"{value:,.0f}"
    return f"{value:.6g}" if abs(value) < 1 else f"{value:,.4f}".rstrip("0").rstrip(".")


def agrees(written, value):
    """A written number agrees with its value rounded to the decimals written; a string must be written exactly."""
    if isinstance(value, str):
        return written == value
    w = Decimal(written.replace(",", ""))
    decimals = max(-w.as_tuple().exponent, 0)
    return abs(float(w) - value) <= 0.5 * 10 ** -decimals * (1 + 1e-9) + 1e-12


def prose_lines(lines):
    """(index, line) of each line outside fenced code blocks, its inline code spans blanked: markers there are
    examples, not bindings."""
    fenced = False
    for i, line in enumerate(lines):
        if re.match(r"\s*(```|~~~)", line):
            fenced = not fenced
            continue
        if not fenced:
            yield i, re.sub(r"`[^`]*`", lambda c: " " * len(c.group(0)), line)


def check_markdown(path, rel, figures, problems, used):
    n = 0
    for i, line in prose_lines(open(path, encoding="utf-8").read().split("\n")):
        i += 1
        for m in MARKER.finditer(line):
            name, before = m.group(1), line[:m.start()]
            n += 1
            if name not in figures:
                problems.append(f"{rel}:{i}: the marker names no figure of {BENCH_JSON} or {REPORT_MD}: {name}")
                continue
            value, source = figures[name]
            used.add(name)
            if isinstance(value, str):
                ok = before.rstrip().endswith(value)
                written = before.rstrip()[-len(value):] if before.strip() else ""
            else:
                w = WRITTEN_NUMBER.search(before)
                if not w:
                    problems.append(f"{rel}:{i}: no number right before the marker of {name}")
                    continue
                written = w.group(1)
                ok = agrees(written, value)
            if not ok:
                problems.append(f"{rel}:{i}: {written!r} written, {source} gives {shown(value)} ({name})")
    return n


def binding_regex(text):
    parts = []
    for piece in re.split(r"(\{\}|\s+)", text):
        if piece == "{}":
            parts.append("(" + DATE + "|" + NUMBER + ")")
        elif piece and piece.isspace():
            parts.append(r"\s+(?:#\s+)?")
        elif piece:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def page_bindings(root):
    """(file, text, names) of each binding of tools/doc-figures.txt."""
    path = os.path.join(root, DOC_FIGURES)
    out = []
    for line in open(path, encoding="utf-8").read().split("\n") if os.path.exists(path) else []:
        if line.strip() and not line.startswith("#"):
            rel, *text, names = line.split(BOUND_AS)
            out.append((rel, BOUND_AS.join(text), [n.strip() for n in names.split(",")]))
    return out


def check_bindings(root, figures, problems, used, bindings=None):
    counts = {}
    for rel, text, names in bindings or TEXT_BINDINGS:
        content = open(os.path.join(root, rel), encoding="utf-8").read()
        found = list(binding_regex(text).finditer(content))
        if len(found) != 1:
            problems.append(f"{rel}: the text bound to {', '.join(dict.fromkeys(names))} is "
                            f"{'not in the file' if not found else 'there more than once'}: {text!r}")
            continue
        m = found[0]
        for g, name in enumerate(names, 1):
            counts[rel] = counts.get(rel, 0) + 1
            line = content.count("\n", 0, m.start(g)) + 1
            if name not in figures:
                problems.append(f"{rel}:{line}: the binding names no figure of {BENCH_JSON} or {REPORT_MD}: {name}")
                continue
            value, source = figures[name]
            used.add(name)
            if not agrees(m.group(g), value):
                problems.append(f"{rel}:{line}: {m.group(g)!r} written, {source} gives {shown(value)} ({name})")
    return counts


def check(root, bindings=None):
    """(problems, figures bound per file, report lines no pattern knows)."""
    figures, unknown = all_figures(root)
    problems, used, counts = [], set(), {}
    for path in md_files(root):
        rel = os.path.relpath(path, root)
        n = check_markdown(path, rel, figures, problems, used)
        if n:
            counts[rel] = n
    bound = check_bindings(root, figures, problems, used, (bindings or TEXT_BINDINGS) + page_bindings(root))
    for rel, n in bound.items():
        counts[rel] = counts.get(rel, 0) + n
    return problems, counts, unknown


def main_check():
    problems, counts, unknown = check(ROOT)
    for u in unknown:
        print(f"check_figures: note: a line of {REPORT_MD} no pattern reads: {u}")
    for p in problems:
        print(p)
    total = sum(counts.values())
    per_file = ", ".join(f"{k} {v}" for k, v in counts.items())
    if problems:
        print(f"check_figures: {len(problems)} of {total} bound figures disagree with their source", file=sys.stderr)
        return 1
    print(f"check_figures: {total} figures bound ({per_file}); all agree with {BENCH_JSON} and {REPORT_MD}")
    return 0


# -------------------------------------------------------------------------------------------------------- rewrite

STRING_FIGURE = re.compile(r"(?:[0-9a-f]{7,40}|\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2} UTC)?)$")


def written_as(old, value):
    """`value` written the way `old` was: as many decimals, thousands separated by commas."""
    w = Decimal(old.replace(",", ""))
    decimals = max(-w.as_tuple().exponent, 0)
    return f"{value:,.{decimals}f}"


def rewrite(root):
    """Rewrites every bound figure that disagrees with its source to the source's value, keeping the decimals it was
    written with. Returns the figures changed, as (file:line, old, new, name)."""
    figures, _ = all_figures(root)
    changed = []
    for path in md_files(root):
        rel = os.path.relpath(path, root)
        lines = open(path, encoding="utf-8").read().split("\n")
        for i, masked in prose_lines(lines):
            line = lines[i]
            # Right to left, so that earlier positions stay where they were.
            for m in reversed(list(MARKER.finditer(masked))):
                name = m.group(1)
                if name not in figures:
                    continue
                value, _ = figures[name]
                before = line[:m.start()]
                if isinstance(value, str):
                    w = STRING_FIGURE.search(before)
                    if not w or w.group(0) == value:
                        continue
                    new = value
                else:
                    w = WRITTEN_NUMBER.search(before)
                    if not w or agrees(w.group(1), value):
                        continue
                    new = written_as(w.group(1), value)
                start, end = w.start(1 if w.re is WRITTEN_NUMBER else 0), w.end(1 if w.re is WRITTEN_NUMBER else 0)
                changed.append((f"{rel}:{i + 1}", before[start:end], new, name))
                line = line[:start] + new + line[end:]
            lines[i] = line
        open(path, "w", encoding="utf-8").write("\n".join(lines))
    for rel, text, names in TEXT_BINDINGS + page_bindings(root):
        path = os.path.join(root, rel)
        content = open(path, encoding="utf-8").read()
        found = list(binding_regex(text).finditer(content))
        if len(found) != 1:
            continue
        m = found[0]
        for g in reversed(range(1, len(names) + 1)):
            name = names[g - 1]
            if name not in figures or agrees(m.group(g), figures[name][0]):
                continue
            value = figures[name][0]
            new = value if isinstance(value, str) else written_as(m.group(g), value)
            line = content.count("\n", 0, m.start(g)) + 1
            changed.append((f"{rel}:{line}", m.group(g), new, name))
            content = content[:m.start(g)] + new + content[m.end(g):]
        open(path, "w", encoding="utf-8").write(content)
    return changed


# -------------------------------------------------------------------------------------------------- move markers

def move_markers(root, path, figures):
    """Moves the markers of the page at `path` (of the repository at `root`) into tools/doc-figures.txt, each bound to
    its number with the words around it that hold no other bound number, as few as make the text unique on the page;
    the figures of a line that cannot be bound apart (a table's row) are bound together by the whole line. Returns
    (moved, kept): the markers of a line that is not unique stay where they are."""
    body = open(path, encoding="utf-8").read()
    plain = MARKER.sub("", body)
    lines = body.split("\n")
    bindings, kept = [], 0
    # Another bound number next to this one is no word to bind by: it changes when its figure does.
    barrier = re.compile(r"(?:" + DATE + "|" + NUMBER + r")?\s*" + MARKER.pattern)
    for i, masked in prose_lines(lines):
        line = lines[i]
        marks = list(MARKER.finditer(masked))
        if not marks:
            continue
        each = []
        for m in marks:
            before = barrier.sub("\0", line[:m.start()])
            after = barrier.sub("\0", line[m.end():])
            string = isinstance(figures.get(m.group(1), (0,))[0], str)
            w = (WRITTEN_DATE if string else WRITTEN_NUMBER).search(before)
            text = bound_text(before[:w.start(1)], after, plain) if w else None
            each.append(f"{text}{BOUND_AS}{m.group(1)}" if text else None)
        if all(each):
            bindings += each
        else:
            # A row of a table, most often: the whole line binds its figures together.
            text = " ".join(re.sub(r"(?:" + DATE + "|" + NUMBER + r")\s*" + MARKER.pattern, "{}", line).split())
            names = [m.group(1) for m in marks]
            if text.count("{}") != len(names) or len(list(binding_regex(text).finditer(plain))) != 1:
                kept += len(marks)
                continue
            bindings.append(f"{text}{BOUND_AS}{', '.join(names)}")
        lines[i] = MARKER.sub("", line)
    open(path, "w", encoding="utf-8").write("\n".join(lines))
    rel = os.path.relpath(path, root)
    if bindings:
        with open(os.path.join(root, DOC_FIGURES), "a", encoding="utf-8") as f:
            f.write("".join(f"{rel}{BOUND_AS}{b}\n" for b in bindings))
    return len(bindings), kept


def bound_text(before, after, page):
    """The fewest words of `before` and `after` (none past another bound number, `\\0`) around {}
    that make a binding found once in `page`; None when no such text is unique."""
    words_before = before.split()
    if before and not before[-1].isspace() and words_before:
        glued = words_before.pop()
    else:
        glued = ""
    if "\0" in glued:
        return None
    after_words = after.split()
    glued_after = after_words.pop(0) if after and not after[0].isspace() and after_words else ""
    if "\0" in glued_after or BOUND_AS.strip() in before + after or "-->" in before + after:
        return None
    usable_before = []
    for word in reversed(words_before):
        if "\0" in word:
            break
        usable_before.insert(0, word)
    usable_after = []
    for word in after_words:
        if "\0" in word:
            break
        usable_after.append(word)
    for total in range(1, 25):
        for nb in range(min(total, len(usable_before)), -1, -1):
            na = total - nb
            if na > len(usable_after):
                continue
            text = " ".join(usable_before[len(usable_before) - nb:] + [glued + "{}" + glued_after] + usable_after[:na])
            if len(list(binding_regex(text).finditer(page))) == 1:
                return text.strip()
    return None


# ------------------------------------------------------------------------------------------------------ self-test

def copy_tree(dst):
    files = [BENCH_JSON, REPORT_MD, BENCH_RS, TEMPLATE, ASL, DOC_FIGURES] + [os.path.relpath(p, ROOT) for p in md_files(ROOT)]
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), os.path.join(dst, rel))


def edit(path, old, new, count=1):
    text = open(path, encoding="utf-8").read()
    if old not in text:
        raise AssertionError(f"self-test: {old!r} is not in {path}")
    open(path, "w", encoding="utf-8").write(text.replace(old, new, count))


def bumped(number_text):
    """The same number written with its last digit moved by one."""
    last = int(number_text[-1])
    return number_text[:-1] + str(last + 1 if last < 9 else last - 1)


def self_test():
    results = []

    def case(what, change, expect):
        with tempfile.TemporaryDirectory() as tmp:
            copy_tree(tmp)
            where = change(tmp)
            try:
                problems, _, _ = check(tmp)
            except SystemExit as e:
                problems = [str(e)]
            if expect is None:
                ok = not problems
                detail = "passes" if ok else f"fails: {problems[:3]}"
            else:
                hits = [p for p in problems if expect(p, where)]
                ok = bool(hits)
                detail = f"caught: {hits[0]}" if ok else f"MISSED (problems: {problems[:3]})"
            results.append(ok)
            print(f"self-test: {what}: {detail}")

    case("an unchanged copy", lambda tmp: None, None)

    def change_markdown(tmp):
        rel = os.path.join("docs", "performance.md")
        path = os.path.join(tmp, rel)
        content = open(path, encoding="utf-8").read()
        found = (binding_regex(t).search(content) for r, t, _ in page_bindings(tmp) if r == rel)
        m = next(m for m in found if m and re.fullmatch(NUMBER, m.group(1)))
        open(path, "w", encoding="utf-8").write(content[:m.start(1)] + bumped(m.group(1)) + content[m.end(1):])
        return f"{rel}:{content.count(chr(10), 0, m.start(1)) + 1}:"
    case("a figure changed in docs/performance.md", change_markdown, lambda p, where: p.startswith(where))

    def wrong_marker(tmp):
        path = os.path.join(tmp, "docs", "performance.md")
        content = open(path, encoding="utf-8").read()
        at = content.index("\n") + 1
        line = "Ten thousand updates took 1<!-- fig: update.10000.saga.wallMs --> ms.\n"
        open(path, "w", encoding="utf-8").write(content[:at] + line + content[at:])
        return "docs/performance.md:2:"
    case("a marker in the prose with a wrong number", wrong_marker, lambda p, where: p.startswith(where))

    def moved_marker(tmp):
        figures, _ = all_figures(tmp)
        value = figures["update.10000.saga.wallMs"][0]
        path = os.path.join(tmp, "README.md")
        content = open(path, encoding="utf-8").read()
        at = content.index("\n") + 1
        line = f"Ten thousand updates took {value:,.0f}<!-- fig: update.10000.saga.wallMs --> ms in one run.\n"
        open(path, "w", encoding="utf-8").write(content[:at] + line + content[at:])
        moved, kept = move_markers(tmp, path, figures)
        after = open(path, encoding="utf-8").read()
        assert (moved, kept) == (1, 0) and not MARKER.search(after), (moved, kept)
        assert any(n == ["update.10000.saga.wallMs"] for r, _, n in page_bindings(tmp) if r == "README.md")
    case("a marker moved into its page's block by --move-markers", moved_marker, None)

    def change_binding(rel):
        def change(tmp):
            text_, names = next((t, n) for r, t, n in TEXT_BINDINGS if r == rel)
            path = os.path.join(tmp, rel)
            content = open(path, encoding="utf-8").read()
            m = binding_regex(text_).search(content)
            content = content[:m.start(1)] + bumped(m.group(1)) + content[m.end(1):]
            open(path, "w", encoding="utf-8").write(content)
            return f"{rel}:{content.count(chr(10), 0, m.start(1)) + 1}:"
        return change
    case("a figure changed in template.yaml", change_binding(TEMPLATE), lambda p, where: p.startswith(where))
    case(f"a figure changed in {ASL}'s Comment", change_binding(ASL), lambda p, where: p.startswith(where))

    def change_bench(tmp):
        path = os.path.join(tmp, BENCH_JSON)
        bench = json.load(open(path, encoding="utf-8"))
        for r in bench["rows"]:
            if (r["kind"], r["actions"], r["method"]) == ("update", 1000, "dynamo-saga"):
                r["modelledWallMs"] *= 1.5
        json.dump(bench, open(path, "w", encoding="utf-8"), indent=2)
    case("a measurement changed in docs/benchmarks.json", change_bench,
         lambda p, where: p.endswith("(update.1000.saga.modelledMs)"))

    def change_bench_and_rewrite(tmp):
        change_bench(tmp)
        path = os.path.join(tmp, BENCH_JSON)
        bench = json.load(open(path, encoding="utf-8"))
        bench["largest"]["chunks"] *= 2
        json.dump(bench, open(path, "w", encoding="utf-8"), indent=2)
        names = {name for _, _, _, name in rewrite(tmp)}
        assert {"update.1000.saga.modelledMs", "largest.chunks"} <= names, names
    case("measurements changed, then --rewrite", change_bench_and_rewrite, None)

    def change_report(tmp):
        path = os.path.join(tmp, REPORT_MD)
        text = open(path, encoding="utf-8").read()
        m = re.search(r"^- parity with native TransactWriteItems: (\d+) cases", text, re.M)
        open(path, "w", encoding="utf-8").write(text[:m.start(1)] + str(int(m.group(1)) + 1) + text[m.end(1):])
    case("a figure changed in docs/test-report.md", change_report,
         lambda p, where: p.endswith("(parity.cases)") and p.startswith("docs/guarantees.md:"))

    def unknown_name(tmp):
        path = os.path.join(tmp, DOC_FIGURES)
        content = open(path, encoding="utf-8").read()
        first = next(line for line in content.split("\n") if line.startswith("README.md" + BOUND_AS))
        head, _, names = first.rpartition(BOUND_AS)
        wrong = head + BOUND_AS + ", ".join(["no.such.figure"] + [n.strip() for n in names.split(",")][1:])
        open(path, "w", encoding="utf-8").write(content.replace(first, wrong, 1))
        return "README.md:"
    case("a binding naming no figure", unknown_name,
         lambda p, where: p.startswith(where) and p.endswith(": no.such.figure"))

    def binding_text_gone(tmp):
        text_ = next(t for r, t, n in TEXT_BINDINGS if r == TEMPLATE and not t.startswith("{}"))
        path = os.path.join(tmp, TEMPLATE)
        content = open(path, encoding="utf-8").read()
        m = binding_regex(text_).search(content)
        open(path, "w", encoding="utf-8").write(content[:m.start() + 1] + "X" + content[m.start() + 1:])
    case("bound text edited away in template.yaml", binding_text_gone,
         lambda p, where: p.startswith("template.yaml: the text bound to") and "not in the file" in p)

    # Two report lines run together (two processes appending at once) read as the same figures as apart.
    report = parse_report(open(os.path.join(ROOT, REPORT_MD), encoding="utf-8").read())
    apart, _ = suite_figures(report["suites"])
    joined_lines = list(report["suites"])
    a = next(i for i, x in enumerate(joined_lines) if x.startswith("concurrency: "))
    joined_lines[a:a + 3] = [joined_lines[a] + joined_lines[a + 1] + joined_lines[a + 2]]
    together, unknown = suite_figures(split_lines(joined_lines))
    ok = together == apart and unknown == suite_figures(report["suites"])[1]
    results.append(ok)
    print(f"self-test: report lines run together read as apart: {'yes' if ok else 'NO'}")

    # The CPU table: each long step's kinds between its start and end, what no sample saw apart, short steps left out.
    samples = [(100, {"DynamoDB Local": 0.0}), (102, {"DynamoDB Local": 10.0, "builds": 1.0}),
               (190, {"DynamoDB Local": 100.0, "builds": 1.0, "test processes": 50.0})]
    table = cpu_table([("suites", 88, 170, ""), ("format", 2, 2, ""), ("lane", 80, 60, "suites")],
                      (samples, [("format", 100, 102), ("suites", 102, 190), ("lane", 105, 185)]))
    ok = table[-1] == "| suites | 170 | 90 | 50 | 30 |" and table[-3].startswith("| step | busy | DynamoDB Local | "
                                                                                "test processes | unseen |")
    results.append(ok)
    print(f"self-test: the CPU table gives each long step's kinds and what no sample saw: {'yes' if ok else 'NO'}")

    if all(results):
        print(f"self-test: all {len(results)} cases as expected")
        return 0
    print("self-test: FAILED", file=sys.stderr)
    return 1


# ------------------------------------------------------------------------------------------------- the commands

def option(args, name, default=None):
    if name in args:
        return args[args.index(name) + 1]
    return default


def main_write_report(args):
    out, lines_file = option(args, "--out"), option(args, "--lines")
    if not out or not lines_file:
        raise SystemExit("check_figures write-report: --out and --lines are required")
    raw = open(lines_file, encoding="utf-8").read().split("\n") if os.path.exists(lines_file) else []
    iam_log, iam_out = option(args, "--iam-log"), option(args, "--iam-output")
    iam_calls = sum(1 for _ in open(iam_log, encoding="utf-8")) if iam_log and os.path.exists(iam_log) else None
    if option(args, "--iam-calls"):
        iam_calls = int(option(args, "--iam-calls"))
    iam_output = open(iam_out, encoding="utf-8").read().split("\n") if iam_out and os.path.exists(iam_out) else None
    artifacts, artifacts_path = None, option(args, "--artifacts")
    commit = option(args, "--commit", "unknown")
    if artifacts_path and os.path.exists(artifacts_path):
        a = json.load(open(artifacts_path, encoding="utf-8"))
        if a.get("commit") == commit:
            artifacts = a
        else:
            print(f"check_figures: {artifacts_path} is of commit {a.get('commit')}, not {commit}: "
                  f"the report leaves the release packages out", file=sys.stderr)
    steps, steps_path = [], option(args, "--steps")
    if steps_path and os.path.exists(steps_path):
        for row in open(steps_path, encoding="utf-8").read().splitlines():
            fields = row.split("\t")
            if len(fields) in (3, 4) and fields[1].isdigit() and fields[2].isdigit():
                steps.append((fields[0], int(fields[1]), int(fields[2]), fields[3] if len(fields) == 4 else ""))
    cpu, samples_path, windows_path = None, option(args, "--cpu-samples"), option(args, "--step-windows")
    if samples_path and windows_path and os.path.exists(samples_path) and os.path.exists(windows_path):
        cpu = (cpu_by_process.load(samples_path), cpu_by_process.load_windows(windows_path))
    write_report(out, raw, commit, option(args, "--date"), int(option(args, "--seconds", "0")),
                 option(args, "--name", "tools/test.sh"), iam_calls, iam_output, artifacts, steps, cpu)
    rep, unknown = report_figures(parse_report(open(out, encoding="utf-8").read()))
    for u in unknown:
        print(f"check_figures: note: a report line no pattern of tools/check_figures.py reads: {u}", file=sys.stderr)
    return 0


def main_publish(args):
    if not args:
        raise SystemExit("check_figures publish-report: name the report, e.g. .local/test-report.md")
    src = args[0]
    try:
        report = parse_report(open(src, encoding="utf-8").read())
    except ValueError as e:
        raise SystemExit(f"check_figures publish-report: {src}: {e}")
    if ".ci/run" not in report["name"]:
        print(f"check_figures: note: {src} is of a run of {report['name']}, not of .ci/run: the CI time "
              f"docs/testing.md quotes (ci.minutes) has no source in it")
    shutil.copy(src, os.path.join(ROOT, REPORT_MD))
    print(f"check_figures: {REPORT_MD} is now the report of commit {report['commit']} ({report['date']})")
    problems, counts, unknown = check(ROOT)
    for u in unknown:
        print(f"check_figures: note: a line no pattern reads: {u}")
    for p in problems:
        print(p)
    if problems:
        print(f"check_figures: {len(problems)} quoted figures now disagree with the report: bring the docs to them",
              file=sys.stderr)
        return 1
    print("check_figures: every quoted figure agrees with the published report")
    return 0


def main(argv):
    if argv[:1] == ["--self-test"]:
        return self_test()
    if argv[:1] == ["--list"]:
        figures, _ = all_figures(ROOT)
        for name in sorted(figures):
            value, source = figures[name]
            print(f"{name}\t{shown(value)}\t{source}")
        return 0
    if argv[:1] == ["--move-markers"]:
        paths = [os.path.abspath(p) for p in argv[1:]] or md_files(ROOT)
        figures, _ = all_figures(ROOT)
        for path in paths:
            moved, kept = move_markers(ROOT, path, figures)
            if moved or kept:
                print(f"{os.path.relpath(path, ROOT)}: {moved} bindings to {DOC_FIGURES}, {kept} markers kept in place")
        return main_check()
    if argv[:1] == ["--rewrite"]:
        for where, old, new, name in rewrite(ROOT):
            print(f"{where}: {old} -> {new} ({name})")
        return main_check()
    if argv[:1] == ["write-report"]:
        return main_write_report(argv[1:])
    if argv[:1] == ["publish-report"]:
        return main_publish(argv[1:])
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    return main_check()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

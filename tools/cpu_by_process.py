#!/usr/bin/env python3
"""The machine's CPU time by kind of process, sampled while a run goes on, for the test report's steps.

  tools/cpu_by_process.py sample OUT [--interval SECONDS] [--parent PID]
      every interval (default 1 s), appends to OUT a line: the epoch second, a tab, and a JSON object giving each
      kind of process (KINDS) the CPU seconds its processes have spent since sampling began, exited processes included
      (as last sampled), its own time left out. Runs until PID (default: the caller) has ended.
  tools/cpu_by_process.py --self-test

A process is sampled by its /proc/PID/stat (user and system time), so a process that starts and ends between two
samples is not seen, nor the part of a process's time after its last sample: the report gives what no sample saw
(the machine's busy time less the kinds') a column of its own. Builds, made of many short compiler runs, land there.
"""
import json
import os
import sys
import time

# (kind, test on the process's command line as a list of arguments): the first that matches names the kind.
KINDS = [
    ("DynamoDB Local", lambda a: os.path.basename(a[0]) == "java" and any("DynamoDBLocal" in x for x in a)),
    ("test processes", lambda a: "/target/debug/deps/" in a[0]),
    ("Lambda functions", lambda a: os.path.basename(a[0]).startswith("saga-")),
    ("node", lambda a: os.path.basename(a[0]) == "node"),
    ("python", lambda a: os.path.basename(a[0]).startswith("python")),
    ("cargo lambda watch", lambda a: os.path.basename(a[0]) == "cargo-lambda" or a[1:2] == ["lambda"]),
    ("builds", lambda a: os.path.basename(a[0]) in {"rustc", "clippy-driver", "cargo", "cc", "cc1", "ld", "ld.lld",
                                                     "as", "zig", "cmake", "make", "c++", "cc1plus", "collect2"}),
]
OTHER = "other"


def kind_of(args):
    if not args:
        return OTHER
    for kind, test in KINDS:
        try:
            if test(args):
                return kind
        except IndexError:
            pass
    return OTHER


def read_processes(hz):
    """(pid, start time) -> (args, CPU seconds) of every process readable now."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read().decode("utf-8", "replace")
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                args = [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        # After the command's name: state is field 3, utime 14, stime 15, starttime 22 (proc(5)).
        out[(int(pid), fields[19])] = (args, (int(fields[11]) + int(fields[12])) / hz)
    return out


def sample(out, interval, parent):
    hz = os.sysconf("SC_CLK_TCK")
    # Each process's CPU seconds when last sampled, from its time before sampling began; its time since goes to the
    # kind its command line says at each sample (`cargo run` execs the program it runs, which then is another kind).
    last = {key: cpu for key, (_, cpu) in read_processes(hz).items()}
    totals = {}
    while True:
        now = read_processes(hz)
        for key, (args, cpu) in now.items():
            if key[0] == os.getpid():
                continue
            kind = kind_of(args)
            totals[kind] = totals.get(kind, 0.0) + cpu - last.get(key, 0.0)
            last[key] = cpu
        last = {key: cpu for key, cpu in last.items() if key in now}
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(f"{time.time():.0f}\t{json.dumps({k: round(v, 1) for k, v in sorted(totals.items())})}\n")
        try:
            os.kill(parent, 0)
        except OSError:
            return 0
        time.sleep(interval)


def load(path):
    """[(epoch, {kind: cumulative seconds})] from a file `sample` wrote."""
    rows = []
    for line in open(path, encoding="utf-8"):
        when, _, totals = line.rstrip("\n").partition("\t")
        try:
            rows.append((int(when), json.loads(totals)))
        except ValueError:
            continue
    return rows


def load_windows(path):
    """[(step, began, ended)] from the file tools/steps.sh writes to SAGA_STEP_WINDOWS."""
    windows = []
    for row in open(path, encoding="utf-8").read().splitlines():
        fields = row.split("\t")
        if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
            windows.append((fields[0], int(fields[1]), int(fields[2])))
    return windows


def between(rows, began, ended):
    """Each kind's CPU seconds from the last sample at or before `began` to the first at or after `ended`."""
    before = [r for r in rows if r[0] <= began]
    after = [r for r in rows if r[0] >= ended]
    if not before or not after:
        return None
    a, b = before[-1][1], after[0][1]
    return {k: b[k] - a.get(k, 0.0) for k in b if b[k] - a.get(k, 0.0) > 0}


def self_test():
    assert kind_of(["/usr/bin/java", "-XX:+UseSerialGC", "-jar", "/x/DynamoDBLocal.jar"]) == "DynamoDB Local"
    assert kind_of(["/r/target/debug/deps/crash-0123", "--test-threads", "4"]) == "test processes"
    assert kind_of(["/r/target/debug/saga-lock"]) == "Lambda functions"
    assert kind_of(["node", "tools/ddb-proxy.mjs"]) == "node"
    assert kind_of(["/r/.local/venv/bin/cargo", "lambda", "watch"]) == "cargo lambda watch"
    assert kind_of(["/root/.cargo/bin/rustc", "--crate-name", "x"]) == "builds"
    assert kind_of([]) == OTHER and kind_of(["bash"]) == OTHER
    rows = [(10, {"a": 1.0}), (12, {"a": 3.0, "b": 1.0}), (15, {"a": 7.0, "b": 1.0})]
    assert between(rows, 11, 14) == {"a": 6.0, "b": 1.0}, between(rows, 11, 14)
    assert between(rows, 12, 12) == {}
    assert between(rows, 9, 14) is None and between(rows, 11, 16) is None
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as fh:
        fh.write("crate\t100\t253\nbroken line\nsuites\t300\t2086\n")
    assert load_windows(fh.name) == [("crate", 100, 253), ("suites", 300, 2086)], load_windows(fh.name)
    os.unlink(fh.name)
    me = read_processes(os.sysconf("SC_CLK_TCK"))
    assert any(k[0] == os.getpid() for k in me), "this process is read"
    print("cpu-by-process: self-test passed")
    return 0


def main(argv):
    if argv[:1] == ["--self-test"]:
        return self_test()
    if len(argv) >= 2 and argv[0] == "sample":
        opts = dict(zip(argv[2::2], argv[3::2]))
        return sample(argv[1], float(opts.get("--interval", "1")), int(opts.get("--parent", os.getppid())))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""The docs speak to their readers, not about the project's history.

    python3 tools/check_docs.py [--self-test]

Fails, naming the file and line, on text in the README and the pages under docs/ (and the crates' and events'
READMEs) that a reader of a clone cannot use:
  - a commit hash (7 to 40 lowercase hex digits with at least one letter and one digit, standing alone);
  - this project's issue numbers ("issue 26"; another project's, "owner/repo issue 110", is a source and allowed);
  - "this machine" (the reader's machine is not the one that measured);
  - the names of runs ("the clean-clone run", "run of commit", "stop 12");
  - paths outside the repository (the team's design notes and tool library);
  - the design's starting points by their working names ("seed 003", "the seeds").
docs/test-report.md is the report of one named run and names its commit by design; it is not checked.
--self-test shows, on a copy of the docs, that each kind is caught.
"""
import pathlib
import re
import shutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (name, pattern, allowed): a line fails when `pattern` matches it and `allowed` (if any) does not match there.
RULES = [
    ("commit hash", re.compile(r"(?<![\w./:-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w/-])"), None),
    ("issue number", re.compile(r"\b[Ii]ssues? #?\d+"), re.compile(r"[\w.-]+/[\w.-]+ issues? #?\d+")),
    ("this machine", re.compile(r"\bthis machine\b", re.I), None),
    ("a run's name", re.compile(r"clean-clone (CI )?run|\brun of commit\b|\bstop \d+\b", re.I), None),
    ("a path outside the repository", re.compile(r"\.\./shared/(seeds|design)|\.\./\.library|PROTOCOL\.md"), None),
    # The design's starting points by their working names ("seed 003's saga", "the seeds"); a random generator's seed
    # is a word of its own and passes.
    ("a design seed's name", re.compile(r"\bseeds?[ _-]?0\d\d\b|\bseeds\b", re.I), None),
]

# An example of each kind, for the self-test.
EXAMPLES = {
    "commit hash": "As built in 7ef7f80, the stack builds once.",
    "issue number": "The refusals issue 26 found are listed below.",
    "this machine": "It took 3 s on this machine.",
    "a run's name": "In the clean-clone run the suites took 13 minutes.",
    "a path outside the repository": "See ../shared/design/PROTOCOL.md for the design.",
    "a design seed's name": "The parent lock works as seed 003's saga does.",
}


def pages(root):
    """The Markdown files the check reads."""
    out = [root / "README.md"]
    out += sorted(p for p in (root / "docs").glob("*.md") if p.name != "test-report.md")
    out += [p for p in (root / "events" / "README.md", root / "expressions" / "README.md", root / "shared" / "README.md")
            if p.is_file()]
    return out


def findings(root):
    found = []
    for page in pages(root):
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for name, pattern, allowed in RULES:
                for m in pattern.finditer(line):
                    if allowed and any(a.start() <= m.start() < a.end() for a in allowed.finditer(line)):
                        continue
                    found.append(f"{page.relative_to(root)}:{n}: {name}: {m.group(0)!r}")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp)
        for page in pages(ROOT):
            target = copy / page.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(page, target)
        clean = findings(copy)
        if clean:
            print("check_docs --self-test: the copy fails before anything is added:", *clean, sep="\n  ", file=sys.stderr)
            return 1
        for name, text in EXAMPLES.items():
            page = copy / "docs" / "guarantees.md"
            before = page.read_text()
            page.write_text(before + "\n" + text + "\n")
            caught = [f for f in findings(copy) if f": {name}: " in f]
            page.write_text(before)
            if not caught:
                print(f"check_docs --self-test: {name!r} not caught in: {text}", file=sys.stderr)
                return 1
        allowed = "Captured by an emulator project, nubo-db/dynoxide issue 110; ARN ...:execution:local-f0f92010-0c7a."
        page = copy / "docs" / "guarantees.md"
        page.write_text(page.read_text() + "\n" + allowed + "\n")
        if findings(copy):
            print("check_docs --self-test: an allowed line fails:", *findings(copy), sep="\n  ", file=sys.stderr)
            return 1
    print(f"check_docs --self-test: each of the {len(RULES)} kinds is caught, and the allowed forms pass")
    return 0


def main():
    if "--self-test" in sys.argv[1:]:
        return self_test()
    found = findings(ROOT)
    if found:
        print("check_docs: text a reader of the repository cannot use:", *found, sep="\n  ", file=sys.stderr)
        return 1
    print(f"check_docs: {len(pages(ROOT))} pages speak to their readers")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks the relative links of the repository's Markdown: every [text](path) and [text](path#anchor) in README.md,
docs/*.md and events/README.md must name a file that exists and, with an anchor, a heading of that file (GitHub's
anchors: the heading lowercased, punctuation but - and _ dropped, spaces made -, a repeated one numbered -1, -2 ...).
Links with a scheme (https:, mailto:) are not followed. Exit status 1, listing each broken link, when any is broken.

  python3 tools/check_links.py [FILE.md ...]
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text):
    """The text outside fenced code blocks and inline code spans, line by line."""
    out, in_fence = [], False
    for line in text.split("\n"):
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            out.append("")
            continue
        out.append("" if in_fence else re.sub(r"`[^`]*`", "``", line))
    return out


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    found, seen = set(), {}
    in_fence = False
    for line in open(path, encoding="utf-8").read().split("\n"):
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            for name in re.findall(r'<a\s+(?:name|id)="([^"]+)"', line):
                found.add(name)
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def check(md):
    broken = []
    text = open(md, encoding="utf-8").read()
    for lineno, line in enumerate(prose(text), 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(dest):
                broken.append(f"{os.path.relpath(md, ROOT)}:{lineno}: {target}: no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                broken.append(f"{os.path.relpath(md, ROOT)}:{lineno}: {target}: no heading #{anchor}")
    return broken


def main():
    files = sys.argv[1:] or (
        [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "events", "README.md")]
        + sorted(os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    )
    broken = [b for f in files for b in check(os.path.abspath(f))]
    for b in broken:
        print(b)
    print(f"check_links: {len(files)} files, {len(broken)} broken links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())

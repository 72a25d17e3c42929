#!/usr/bin/env python3
"""Declared dependencies nothing uses.

    python3 tools/check_deps.py [--self-test]

Fails, naming each, on
  - an entry of the root Cargo.toml's [workspace.dependencies] that no member's Cargo.toml names, and
  - a dependency of a member (normal, dev or build) whose crate name never appears in that member's Rust sources
    (`name::`, `use name`, `extern crate name`, or `name!` for a macro crate).
A crate that is used only for its side effects (a feature it turns on in another crate, a linker symbol) is listed in
ALLOWED with the reason. --self-test shows that an unused entry of either kind is caught on a copy of the tree.
"""
import pathlib
import re
import shutil
import sys
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (member directory, crate): why it is declared though no source names it.
ALLOWED = {
    ("functions/common", "tokio"): "turns on tokio's `process` so the functions share the tests' SDK build",
    ("cli", "aws-config"): "turns on the credential providers a person's shell uses (SSO, credential_process)",
}


def members(root):
    ws = tomllib.loads((root / "Cargo.toml").read_text())["workspace"]
    out = []
    for pattern in ws.get("members", []):
        out.extend(sorted(p for p in root.glob(pattern) if (p / "Cargo.toml").is_file()))
    return ws, out


def crate_names(manifest, member):
    """Each dependency, and the name its crate has in code: its [lib] name, for a path dependency that sets one."""
    names = {}
    for section in ("dependencies", "dev-dependencies", "build-dependencies"):
        for name, spec in manifest.get(section, {}).items():
            ident = name
            if isinstance(spec, dict) and "path" in spec:
                target = tomllib.loads((member / spec["path"] / "Cargo.toml").read_text())
                ident = target.get("lib", {}).get("name", name)
            names[name] = ident
    return names


def sources(member):
    text = []
    for path in member.rglob("*.rs"):
        if "target" not in path.parts:
            text.append(path.read_text(errors="replace"))
    return "\n".join(text)


def problems(root):
    ws, found = members(root)
    declared = set(ws.get("dependencies", {}))
    named = set()
    out = []
    for member in found:
        manifest = tomllib.loads((member / "Cargo.toml").read_text())
        code = sources(member)
        rel = member.relative_to(root).as_posix()
        for name, ident in crate_names(manifest, member).items():
            named.add(name)
            ident = ident.replace("-", "_")
            if (rel, name) in ALLOWED:
                continue
            if not re.search(rf"(\b{ident}::|\buse {ident}\b|extern crate {ident}\b|\b{ident}!)", code):
                out.append(f"{rel}/Cargo.toml: {name} is declared, and no source of {rel} uses it")
    for name in sorted(declared - named):
        out.append(f"Cargo.toml: [workspace.dependencies] {name} is declared, and no member names it")
    return out


def self_test():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case, edit in [
            ("an unused workspace dependency", lambda t: (t / "Cargo.toml").write_text(
                (t / "Cargo.toml").read_text().replace("[workspace.dependencies]\n",
                                                       "[workspace.dependencies]\nnever-used-crate = \"1\"\n", 1))),
            ("an unused member dependency", lambda t: (t / "cli/Cargo.toml").write_text(
                (t / "cli/Cargo.toml").read_text().replace("[dependencies]\n",
                                                           "[dependencies]\nnever-used-crate = \"1\"\n", 1))),
        ]:
            copy = pathlib.Path(tmp) / case.replace(" ", "-")
            shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("target", ".local", ".git", "node_modules"))
            edit(copy)
            found = problems(copy)
            caught = any("never-used-crate" in p for p in found)
            print(f"self-test: {case}: {'caught' if caught else 'NOT caught'}")
            failures += not caught
    return failures


def main():
    if "--self-test" in sys.argv[1:]:
        sys.exit(1 if self_test() else 0)
    found = problems(ROOT)
    for p in found:
        print(f"check_deps: {p}", file=sys.stderr)
    if found:
        sys.exit(1)
    print("check_deps: every declared dependency is used")


if __name__ == "__main__":
    main()

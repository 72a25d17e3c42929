#!/usr/bin/env python3
"""Checks that the largest staged request the template admits seals inside API Gateway's integration timeout.

The seal (POST /transactions/staged/{id}/seal) validates and begins a whole request in one call of the API function.
Its time per MB is the costlier of the benchmark's measured seals (docs/benchmarks.json: `largestSeal`, the largest
request staged and sealed by `tools/bench.sh --seal-only`, and `largest`, the largest transaction's; sealMs for
requestBytes, on one full core of an optimised build), scaled to the largest request the API function takes at the template's highest StageMemorySize
(a fortieth of its memory, MEMORY_BYTES_PER_REQUEST_BYTE in shared/src/constants.rs) and to the CPU share Lambda
gives that memory (one vCPU at 1,769 MB; the validation runs on one thread, so more memory adds no speed beyond it).
Fails when that estimate leaves less than a fifth of the 29 s spare, and prints the table docs/deploy.md shows.

  python3 tools/check_api_timeout.py
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
API_TIMEOUT_S = 29.0
SPARE = 0.2
FULL_VCPU_MB = 1769


def template_param(text, name, key):
    block = re.search(rf"^  {name}:\n((?:    .*\n)+)", text, re.M)
    if not block:
        sys.exit(f"check_api_timeout: template.yaml has no parameter {name}")
    m = re.search(rf"^    {key}: (\d+)$", block.group(1), re.M)
    if not m:
        sys.exit(f"check_api_timeout: parameter {name} has no {key}")
    return int(m.group(1))


def main():
    template = open(os.path.join(ROOT, "template.yaml")).read()
    constants = open(os.path.join(ROOT, "shared/src/constants.rs")).read()
    per_byte = int(re.search(r"MEMORY_BYTES_PER_REQUEST_BYTE: usize = (\d+);", constants).group(1))
    bench = json.load(open(os.path.join(ROOT, "docs/benchmarks.json")))
    runs = [r for r in (bench.get("largestSeal"), bench.get("largest")) if r]
    # The costlier per MB of the measured seals: many small actions cost more a byte than few large ones.
    largest = max(runs, key=lambda r: r["sealMs"] / r["requestBytes"])
    ms_per_mb = largest["sealMs"] / (largest["requestBytes"] / 1e6)
    for r in runs:
        print(f"seal run: {r['sealMs']} ms for {r['requestBytes'] / 1e6:.1f} MB "
              f"({r['sealMs'] / (r['requestBytes'] / 1e6):.0f} ms per MB, {r['actions']} actions, {r['written']})")
    default = template_param(template, "StageMemorySize", "Default")
    highest = template_param(template, "StageMemorySize", "MaxValue")
    print(f"seal measured: {largest['sealMs']} ms for {largest['requestBytes'] / 1e6:.1f} MB ({ms_per_mb:.0f} ms per MB, "
          f"benchmark of {largest['written']})")
    worst = 0.0
    for mb in sorted({default, FULL_VCPU_MB, highest}):
        request_mb = mb * 1024 * 1024 / per_byte / 1e6
        share = min(1.0, mb / FULL_VCPU_MB)
        seconds = request_mb * ms_per_mb / share / 1000
        worst = max(worst, seconds)
        print(f"  StageMemorySize {mb}: largest request {request_mb:.1f} MB, {share:.2f} vCPU, seal about {seconds:.1f} s")
    limit = API_TIMEOUT_S * (1 - SPARE)
    if worst > limit:
        sys.exit(f"check_api_timeout: a seal at StageMemorySize {highest} would take about {worst:.1f} s, over "
                 f"{limit:.1f} s ({API_TIMEOUT_S:.0f} s less a fifth): lower its MaxValue or raise the API's timeout")
    print(f"check_api_timeout: the largest seal the template admits takes about {worst:.1f} s, inside {limit:.1f} s")


if __name__ == "__main__":
    main()

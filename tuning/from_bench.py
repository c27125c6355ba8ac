#!/usr/bin/env python3
"""Builds a tuning table (tuning/*.json, format netcl-tuning-1) from benchmark results: the `decisions` of
`netcl bench --json` lines and autotune cache files, for one device.

    python3 tuning/from_bench.py --vendor "NVIDIA Corporation" --name "NVIDIA H200" --compute-units 132 \
        --opencl 3.0 --type gpu --measured "..." FILE... > tuning/nvidia-h200.json

Later files win over earlier ones. Only keys of the named device are taken; checksums are dropped (a table is a
first guess, checked by measurement where the tuner measures).
"""
import argparse
import json
import sys


def split(key):
    parts = key.split("::", 2)
    if len(parts) != 3:
        return None
    device, kernel, shape = parts
    return device, kernel.split("@", 1)[0], shape


def main():
    ap = argparse.ArgumentParser()
    for a in ("vendor", "name", "opencl", "type", "measured"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--compute-units", type=int, required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    entries = {}
    for f in args.files:
        if f.endswith(".jsonl"):
            for line in open(f):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                for d in json.loads(line).get("decisions", []):
                    if d.get("source") not in ("measured", "cache"):
                        continue
                    s = split(d["key"])
                    if s and s[0].split("|")[0] == args.name:
                        entries[f"{s[1]}::{s[2]}"] = d["winner"]
        else:
            for k, v in json.load(open(f)).items():
                s = split(k)
                if s and s[0].split("|")[0] == args.name:
                    entries[f"{s[1]}::{s[2]}"] = v
    table = {
        "format": "netcl-tuning-1",
        "device": {
            "vendor": args.vendor,
            "name": args.name,
            "compute_units": args.compute_units,
            "opencl": args.opencl,
            "type": args.type,
        },
        "measured": args.measured,
        "entries": dict(sorted(entries.items())),
    }
    json.dump(table, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Adds the programs of recorded tables (`netcl tune export` output) to a tuning table of the same device class,
keeping that table's winners:

    python3 tuning/merge_programs.py tuning/nvidia-h200.json recorded-a.json recorded-b.json \
        --measured "..." > merged.json

The programs of the base table come first, then each recorded table's new ones in order, each program once.
A recorded table of another device class is refused: its programs were built for another device.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("recorded", nargs="+")
    ap.add_argument("--measured", help="replaces the base table's `measured` text")
    args = ap.parse_args()
    base = json.load(open(args.base))
    programs = [list(p) for p in base.get("programs", [])]
    seen = {tuple(p) for p in programs}
    for f in args.recorded:
        t = json.load(open(f))
        if t.get("device") != base.get("device"):
            sys.exit(f"{f}: device {t.get('device')} is not the base table's {base.get('device')}")
        for p in t.get("programs", []):
            if tuple(p) not in seen:
                seen.add(tuple(p))
                programs.append(list(p))
    base["programs"] = programs
    if args.measured:
        base["measured"] = args.measured
    json.dump(base, sys.stdout, indent=1)
    sys.stdout.write("\n")
    print(f"{len(programs)} programs", file=sys.stderr)


if __name__ == "__main__":
    main()

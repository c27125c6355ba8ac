#!/usr/bin/env python3
"""Side-by-side table of `netcl bench` lines against netcl 0.3.2 (and optionally PyTorch) lines.

    python3 bench/compare.py NETCL.jsonl PEER.jsonl [TORCH.jsonl] [--median]

Each file holds JSON lines with `case`, `impl` and `ms` (and `median_ms`); lines without a `case` are skipped.
Speed-ups are peer time / netcl time at the minimum (or the median with --median). Prints a Markdown table.
"""
import json
import sys


def load(path, impl_prefix=None):
    out = {}
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if "case" not in d:
            continue
        if impl_prefix and not str(d.get("impl", "")).startswith(impl_prefix):
            continue
        out[d["case"]] = d
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    key = "median_ms" if "--median" in sys.argv else "ms"
    if len(args) < 2:
        sys.exit(__doc__)
    ours = load(args[0])
    peer = load(args[1], "netcl-0.3.2")
    torch = load(args[2], "torch") if len(args) > 2 else {}
    head = ["case", f"netcl {key}", "device ms", f"netcl 0.3.2 {key}", "speed-up"]
    if torch:
        head += ["cuDNN ms", "vs cuDNN"]
    head += ["rate"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for case, d in ours.items():
        p = peer.get(case)
        row = [case, f"{d[key]:.4f}", f"{d['device_ms']:.4f}" if d.get("device_ms") else "–"]
        row += [f"{p[key]:.4f}" if p else "–", f"{p[key] / d[key]:.2f}×" if p else "–"]
        if torch:
            t = torch.get(case)
            row += [f"{t['ms']:.4f}" if t else "–", f"{t['ms'] / d['ms']:.2f}×" if t else "–"]
        if d.get("gflops") is not None:
            row.append(f"{d['gflops']:.0f} GFLOP/s")
        elif d.get("gbps") is not None:
            row.append(f"{d['gbps']:.0f} GB/s")
        else:
            row.append("–")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

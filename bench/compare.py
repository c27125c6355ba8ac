#!/usr/bin/env python3
"""Side-by-side table of `netcl bench` lines against netcl 0.3.2 (and optionally PyTorch) lines.

    python3 bench/compare.py NETCL.jsonl PEER.jsonl [TORCH.jsonl] [--median]
    python3 bench/compare.py NETCL.jsonl --bandwidth

Each file holds JSON lines with `case`, `impl` and `ms` (and `median_ms`); lines without a `case` are skipped.
Speed-ups are peer time / netcl time at the minimum (or the median with --median). Prints a Markdown table.
With --bandwidth, prints the memory-bound cases' wall and device bandwidth and their share of `copy_large`'s.
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


def bandwidth(path):
    ours = load(path)
    copy = ours["copy_large"]
    ref_dev, ref_wall = copy["device_gbps"], copy["gbps"]
    print(f"Yardstick: `copy_large` {ref_dev:.0f} GB/s by device time, {ref_wall:.0f} GB/s by wall time.\n")
    print("| case | ms (wall) | GB/s (wall) | device ms | GB/s (device) | share (device) | share (wall) |")
    print("|---|---|---|---|---|---|---|")
    for case, d in ours.items():
        if d.get("gbps") is None:
            continue
        print(
            f"| `{case}` | {d['ms']:.4f} | {d['gbps']:.0f} | {d['device_ms']:.4f} | {d['device_gbps']:.0f} "
            f"| {100 * d['device_gbps'] / ref_dev:.0f} % | {100 * d['gbps'] / ref_wall:.0f} % |"
        )


def main():
    if "--bandwidth" in sys.argv:
        return bandwidth([a for a in sys.argv[1:] if not a.startswith("--")][0])
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    key = "median_ms" if "--median" in sys.argv else "ms"
    if len(args) < 2:
        sys.exit(__doc__)
    ours = load(args[0])
    peer = load(args[1], "netcl-0.3.2")
    torch = load(args[2], "torch") if len(args) > 2 else {}
    dkey = "device_median_ms" if key == "median_ms" else "device_ms"
    head = ["case", f"netcl {key}", dkey.replace("_", " "), f"netcl 0.3.2 {key}", "speed-up"]
    if torch:
        head += ["cuDNN ms", "vs cuDNN"]
    head += ["rate"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for case, d in ours.items():
        p = peer.get(case)
        row = [case, f"{d[key]:.4f}", f"{d[dkey]:.4f}" if d.get(dkey) else "–"]
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

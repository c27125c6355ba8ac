#!/usr/bin/env python3
"""Charts and the summary table of the Benchmarks page, from the JSON lines under bench/results/.

Usage: python3 bench/chart.py [--h200 NETCL.jsonl PEER.jsonl] [--pocl NETCL.jsonl PEER.jsonl] [--check]

NETCL is the output of `netcl bench`; PEER the output of `bench/peer_netcl.py` (netcl 0.3.2, with
`--torch` also PyTorch/cuDNN) on the same machine. Without options the latest runs are used (see RUNS).
Writes web-wiki/content/charts/h200.svg and pocl.svg, and rewrites the "## Summary" section of
web-wiki/content/benchmarks.md. With --check nothing is written; the exit status is 1 when a file differs from
what the results give (the page or a chart is stale).

Times are the minimum wall-clock time of a call (`ms`), the key every implementation reports.
"""
import json
import math
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
PAGE = os.path.join(ROOT, "web-wiki", "content", "benchmarks.md")
CHARTS = os.path.join(ROOT, "web-wiki", "content", "charts")

# machine: (title, netcl results, peer results)
RUNS = {
    "h200": ("NVIDIA H200 (OpenCL 3.0, driver 580), 2026-12-03",
             "h200-2026-12-03-netcl.jsonl", "h200-2026-12-03-netcl032-torch.jsonl"),
    "pocl": ("PoCL 3.1 on a 2-core AMD EPYC, --small shapes, 2026-12-03",
             "pocl-2026-12-03-netcl-small.jsonl", "pocl-2026-12-03-netcl032-small.jsonl"),
}
SERIES = [("netcl", "netcl", "#0b63c5"), ("netcl-0.3.2", "netcl 0.3.2", "#b15c00"),
          ("torch-cudnn-fp32", "PyTorch/cuDNN", "#1a7f37")]
# The whole-model chart (charts/models.svg): (title, [(results file, series key)]). A netcl file's lines are keyed
# by their precision ("netcl-fp32", "netcl-tf32"); a peer's by its impl.
MODELS = ("NVIDIA H100 (OpenCL 3.0, driver 580): whole models against PyTorch eager, 2026-12-06 (later calls)",
          ["h100-2026-12-06b-models-netcl-fp32.jsonl", "h100-2026-12-06b-models-torch-fp32.jsonl",
           "h100-2026-12-06b-models-netcl-tf32.jsonl", "h100-2026-12-06b-models-torch-tf32.jsonl"])
MODEL_SERIES = [("netcl-fp32", "netcl FP32", "#0b63c5"), ("torch-eager-fp32", "PyTorch FP32", "#1a7f37"),
                ("netcl-tf32", "netcl TF32", "#7fb2ea"), ("torch-eager-tf32", "PyTorch TF32", "#8fd19e")]


def load(path, by_precision=False):
    """{(case, impl): ms} of a results file (netcl's impl suffixed with its precision when `by_precision`); the
    device line and lines without a time are skipped."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON: {e}")
            if "case" in row and isinstance(row.get("ms"), (int, float)):
                impl = row.get("impl", "netcl")
                if by_precision and impl == "netcl":
                    impl = f"netcl-{row.get('precision', 'fp32')}"
                out[(row["case"], impl)] = float(row["ms"])
    return out


def runs(args):
    chosen = dict(RUNS)
    i = 0
    while i < len(args):
        flag = args[i].lstrip("-")
        if flag in chosen and i + 3 <= len(args):
            chosen[flag] = (chosen[flag][0] + " (files given)", args[i + 1], args[i + 2])
            i += 3
        elif args[i] == "--check":
            i += 1
        else:
            sys.exit(f"unknown or incomplete option `{args[i]}`; see the usage at the top of {__file__}")
    data = {}
    for machine, (title, netcl, peer) in chosen.items():
        times = {}
        for name in (netcl, peer):
            path = name if os.path.isabs(name) else os.path.join(RESULTS, name)
            if not os.path.isfile(path):
                sys.exit(f"{path}: no such results file")
            times.update(load(path))
        cases = sorted({c for (c, impl) in times if impl != "netcl"} & {c for (c, impl) in times if impl == "netcl"},
                       key=order_key)
        data[machine] = (title, netcl, peer, cases, times)
    return data


def order_key(case):
    families = ["pw_", "conv3x3", "dw3x3", "matmul", "sum"]
    return (next((i for i, f in enumerate(families) if case.startswith(f)), len(families)), case)


def fmt(ms):
    if ms is None:
        return "–"
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(data):
    h200, pocl = data["h200"], data["pocl"]
    cases = sorted(set(h200[3]) | set(pocl[3]), key=order_key)
    lines = [
        "## Summary",
        "",
        "Minimum wall-clock time of one call in milliseconds (lower is better), the latest run on each machine. netcl",
        "and netcl 0.3.2 ran one after the other on the same device; PyTorch/cuDNN on the same GPU (it has no OpenCL",
        "CPU device). Generated by `python3 bench/chart.py` from",
        f"`bench/results/{h200[1]}`, `{h200[2]}`, `{pocl[1]}` and `{pocl[2]}`; the dated runs below hold the",
        "detail (device time, medians, first calls, the tuner's decisions).",
        "",
        "| case | H200 netcl | H200 netcl 0.3.2 | H200 PyTorch/cuDNN | PoCL netcl | PoCL netcl 0.3.2 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    ratios = {"h200_old": [], "h200_torch": [], "pocl_old": []}
    for case in cases:
        def t(machine, impl):
            return data[machine][4].get((case, impl))
        hn, ho, ht = t("h200", "netcl"), t("h200", "netcl-0.3.2"), t("h200", "torch-cudnn-fp32")
        pn, po = t("pocl", "netcl"), t("pocl", "netcl-0.3.2")
        if hn and ho:
            ratios["h200_old"].append(ho / hn)
        if hn and ht:
            ratios["h200_torch"].append(ht / hn)
        if pn and po:
            ratios["pocl_old"].append(po / pn)
        lines.append(f"| `{case}` | {fmt(hn)} | {fmt(ho)} | {fmt(ht)} | {fmt(pn)} | {fmt(po)} |")
    g = {k: geomean(v) for k, v in ratios.items()}
    lines += [
        "",
        f"Geometric mean over these cases: on the H200 netcl is {g['h200_old']:.2f}× as fast as netcl 0.3.2 and "
        f"{g['h200_torch']:.2f}× as fast as PyTorch/cuDNN (below 1: slower); on PoCL {g['pocl_old']:.2f}× as fast as "
        "netcl 0.3.2.",
        "",
        "![Time per call on the H200, log scale](charts/h200.svg)",
        "",
        "![Time per call on PoCL, log scale](charts/pocl.svg)",
        "",
    ]
    return "\n".join(lines)


def esc(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def chart(title, cases, times, all_series=SERIES):
    """Grouped horizontal bars on a log-scale axis of milliseconds, one group per case."""
    series = [s for s in all_series if any((c, s[0]) in times for c in cases)]
    bar, gap, left, right, top = 7, 8, 150, 20, 48
    width = 720
    group = bar * len(series) + gap
    height = top + group * len(cases) + 40
    values = [times[(c, s[0])] for c in cases for s in series if (c, s[0]) in times]
    lo = 10 ** math.floor(math.log10(min(values)))
    hi = 10 ** math.ceil(math.log10(max(values)))
    span = math.log10(hi) - math.log10(lo)

    def x(ms):
        return left + (width - left - right) * (math.log10(ms) - math.log10(lo)) / span

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{esc(title)}: time per call, log scale">',
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           '<g font-family="sans-serif" font-size="11" fill="#1d232b">',
           f'<text x="{left}" y="16" font-size="13" font-weight="bold">{esc(title)}</text>']
    for i, (_, label, colour) in enumerate(series):
        lx = left + i * 130
        out.append(f'<rect x="{lx}" y="26" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{lx + 14}" y="35">{esc(label)}</text>')
    decade = lo
    while decade <= hi * 1.0001:
        gx = x(decade)
        out.append(f'<line x1="{gx:.1f}" y1="{top - 4}" x2="{gx:.1f}" y2="{height - 30}" stroke="#dde2e8"/>'
                   f'<text x="{gx:.1f}" y="{height - 16}" text-anchor="middle">{fmt(decade)} ms</text>')
        decade *= 10
    for ci, case in enumerate(cases):
        gy = top + ci * group
        out.append(f'<text x="{left - 6}" y="{gy + group / 2 + 1:.1f}" text-anchor="end">{esc(case)}</text>')
        for si, (impl, label, colour) in enumerate(series):
            ms = times.get((case, impl))
            if ms is None:
                continue
            out.append(f'<rect x="{left}" y="{gy + si * bar}" width="{max(x(ms) - left, 1):.1f}" height="{bar - 1}" '
                       f'fill="{colour}"><title>{esc(case)}, {esc(label)}: {fmt(ms)} ms</title></rect>')
    out.append("</g></svg>\n")
    return "\n".join(out)


def write(path, text, check, stale):
    old = open(path, encoding="utf-8").read() if os.path.isfile(path) else None
    if old == text:
        return
    if check:
        stale.append(path)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".chart-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    print(f"wrote {os.path.relpath(path, ROOT)}")


def main():
    args = sys.argv[1:]
    check = "--check" in args
    data = runs(args)
    stale = []
    for machine, (title, _, _, cases, times) in data.items():
        write(os.path.join(CHARTS, f"{machine}.svg"), chart(title, cases, times), check, stale)
    title, files = MODELS
    times = {}
    for name in files:
        times.update(load(os.path.join(RESULTS, name), by_precision=True))
    cases = [c for c in ["resnet18_infer_224", "resnet18_infer_112", "resnet18_train_224", "resnet18_train_112",
                         "mobilenet_v2_infer_224", "mobilenet_v2_infer_112", "mobilenet_v2_train_224",
                         "mobilenet_v2_train_112"] if any(k[0] == c for k in times)]
    write(os.path.join(CHARTS, "models.svg"), chart(title, cases, times, MODEL_SERIES), check, stale)
    page = open(PAGE, encoding="utf-8").read()
    start = page.find("\n## Summary\n")
    if start < 0:
        sys.exit(f"{PAGE}: no `## Summary` section to rewrite")
    end = page.find("\n## ", start + 1)
    # What the section holds after the generated part (written by hand) stays.
    marker = "](charts/pocl.svg)\n"
    kept = page.find(marker, start, end if end >= 0 else len(page))
    rest = page[kept + len(marker):end] if kept >= 0 else ""
    new = page[:start + 1] + summary(data).rstrip("\n") + "\n" + rest + (page[end:] if end >= 0 else "\n")
    write(PAGE, new, check, stale)
    if stale:
        sys.exit("stale (run python3 bench/chart.py): " + ", ".join(os.path.relpath(p, ROOT) for p in stale))


if __name__ == "__main__":
    main()

# Usage: python3 bench/gpu/ptxscan.py PROGRAM_CACHE_DIR OUT_DIR [KERNEL_REGEX]
# Scans netcl's program cache (NVIDIA: PTX inside) for kernels with a local-memory stack frame or spills.
import os, re, sys
d = sys.argv[1]
out = sys.argv[2]
keep = re.compile(sys.argv[3]) if len(sys.argv) > 3 else None
os.makedirs(out, exist_ok=True)
rep = []
for f in sorted(os.listdir(d)):
    b = open(os.path.join(d, f), "rb").read()
    t = b.decode("latin-1")
    for m in re.finditer(r"\.entry\s+(\w+)", t):
        name = m.group(1)
        end = t.find(".entry", m.end())
        body = t[m.end(): end if end > 0 else len(t)]
        depot = re.search(r"__local_depot\d+\[(\d+)\]", body)
        ldl = len(re.findall(r"ld\.local", body)); stl = len(re.findall(r"st\.local", body))
        regs = len(set(re.findall(r"%f\d+", body)))
        rep.append(f"{name}\tdepot={depot.group(1) if depot else 0}\tld.local={ldl}\tst.local={stl}\tfregs={regs}\tfile={f}")
        if keep and keep.search(name):
            open(os.path.join(out, f + ".ptx"), "w").write(t)
open(os.path.join(out, "report.txt"), "w").write("\n".join(rep) + "\n")
print(len(rep), "kernels scanned;", sum(1 for r in rep if "depot=0" not in r), "with a local depot")

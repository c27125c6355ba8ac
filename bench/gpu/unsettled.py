# Counts the autotune decisions of `netcl bench` JSON lines that background mode has yet to measure
# ("measured on later calls", "once helper", "when the process is idle"): 0 means the caches have settled.
import json, re, sys
pat = re.compile(r"measured (on later calls|once helper|when the process is idle)")
n = 0
for path in sys.argv[1:]:
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        for dec in d.get("decisions") or []:
            if pat.search(dec.get("note") or ""):
                n += 1
print(n)

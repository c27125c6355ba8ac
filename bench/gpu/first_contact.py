#!/usr/bin/env python3
"""Summarises a first-contact run: `python3 bench/gpu/first_contact.py FIRST_CONTACT.jsonl` prints the number of
cases, the median first call, the five slowest and every case over one second (first_call_ms of each line)."""
import json
import sys

rows = []
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if 'case' in d:
        rows.append((d.get('first_call_ms') or 0, d['case']))
rows.sort()
print(len(rows), 'cases; median', rows[len(rows) // 2] if rows else None, 'slowest', rows[-5:])
print('over 1 s:', [r for r in rows if r[0] > 1000])

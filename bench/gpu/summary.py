#!/usr/bin/env python3
"""Summaries of the GPU call scripts' JSON lines.

    python3 bench/gpu/summary.py tune TUNE.jsonl...     each case's time and, per decision, its six fastest
                                                         candidates as the tuner timed them
    python3 bench/gpu/summary.py rounds ROUNDS.jsonl [PEER.jsonl...]
                                                         per case and build, the median of the rounds' medians
                                                         and each round's median; then the peer's lines
"""
import json
import statistics
import sys


def lines(path):
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if 'case' in d:
            yield d


def tune(paths):
    for path in paths:
        for d in lines(path):
            print(path.split('/')[-1], d['case'], 'min', d['ms'], 'median', d['median_ms'], 'first',
                  d.get('first_call_ms'))
            for dec in d.get('decisions') or []:
                c = sorted((x for x in dec.get('candidates') or [] if x.get('ms')), key=lambda x: x['ms'])
                print('   ', dec.get('kernel'), dec.get('winner_label'),
                      [(x['label'], round(x['ms'], 4)) for x in c[:6]])


def rounds(path, peers):
    rows = {}
    for d in lines(path):
        rows.setdefault((d['case'], d['build']), []).append(d['median_ms'])
    for (case, build), v in sorted(rows.items()):
        print(case, build, 'median of round medians', round(statistics.median(v), 4), v)
    for peer in peers:
        for d in lines(peer):
            print(d.get('impl'), d['case'], d['ms'], d['median_ms'])


if __name__ == '__main__':
    if sys.argv[1] == 'tune':
        tune(sys.argv[2:])
    else:
        rounds(sys.argv[2], sys.argv[3:])

#!/usr/bin/env python3
"""Summarises the ST lines of an instrumented dense kernel (dev/stamp_dense.py),
read from stdin, of ONE launch: the phases' median and maximum durations (us)
over the blocks; the launch's span; the blocks resident a SM over time (the
ramp, the steady state, the tail); and each row's start and end.
Usage: ... | dev/stamp_report.py [--rows]"""
import collections
import statistics
import sys

PHASES = ["pdl wait", "copies", "pass 1", "reduce 1", "pass 2", "reduce 2", "exit"]
blocks = []  # (row, rank, smid, entry ns, exit ns, stamps)
for line in sys.stdin:
    f = line.split()
    if len(f) == 13 and f[0] == "ST":
        mode, r, rank, smid, t0, *d = map(int, f[1:])
        blocks.append((r, rank, smid, t0, t0 + d[6], d))
if not blocks:
    sys.exit("stamp_report.py: no ST lines")
t_first = min(b[3] for b in blocks)
t_last = max(b[4] for b in blocks)
sms = {b[2] for b in blocks}
print(f"{len(blocks)} blocks on {len(sms)} SMs, span {(t_last - t_first) / 1e3:.2f} us"
      " (first entry to last exit)")
print("phase        median    max   (us, from the previous stamp that ran)")
durations = collections.defaultdict(list)
for *_, d in blocks:
    prev = 0
    for i, p in enumerate(PHASES):
        if d[i]:
            durations[p].append((d[i] - prev) / 1e3)
            prev = d[i]
for p in PHASES:
    if durations[p]:
        print(f"{p:10s} {statistics.median(durations[p]):8.2f} {max(durations[p]):6.2f}")
lives = [(b[4] - b[3] - b[5][0]) / 1e3 for b in blocks]
print(f"block life after the PDL wait: median {statistics.median(lives):.2f} us")
step = max((t_last - t_first) // 12, 1)
print("blocks resident a SM (of the SMs used):",
      " ".join(f"{(t - t_first) / 1e3:.0f}us:"
               f"{sum(1 for b in blocks if b[3] <= t < b[4]) / len(sms):.2f}"
               for t in range(t_first, t_last, step)))
if "--rows" in sys.argv:
    rows = collections.defaultdict(list)
    for b in blocks:
        rows[b[0]].append(b)
    print("row  start us  end us  (from the first entry)")
    for r, bl in sorted(rows.items(), key=lambda kv: min(b[3] for b in kv[1])):
        print(f"{r:4d} {(min(b[3] for b in bl) - t_first) / 1e3:8.2f}"
              f" {(max(b[4] for b in bl) - t_first) / 1e3:7.2f}")

#!/usr/bin/env python3
"""Summarises the ST lines of an instrumented dense kernel (dev/stamp_dense.py),
read from stdin, of ONE launch (the largest of read_launches'): the phases'
median and maximum durations (us) over the blocks; the launch's span; the
blocks resident a SM over time (the ramp, the steady state, the tail); and
each row's start and end.
Usage: ... | dev/stamp_report.py [--rows]"""
import collections
import statistics
import sys

PHASES = ["pdl wait", "copies", "pass 1", "reduce 1", "pass 2", "reduce 2", "exit"]


def read_launches(lines):
    """The ST lines' blocks, (row, rank, smid, entry ns, exit ns, stamps),
    cut into launches. A launch is B x C blocks (the distinct (row, rank)
    pairs) entering roughly in row order, a launch after the other: block
    (r, rank) at place `order` of the entries belongs to launch
    round((order - offset - r x C) / (B x C)), for the offset that puts no
    pair twice in a launch (around a seam a few blocks of the last row may
    enter after the next launch's first). The first and last launches may
    be partial."""
    blocks = []
    for line in lines:
        f = line.split()
        if len(f) == 14 and f[0] == "ST":
            mode, r, rank, smid, t0, *d, order = map(int, f[1:])
            blocks.append((order, (r, rank, smid, t0, t0 + d[6], d)))
    if not blocks:
        return []
    n = len({b[:2] for _, b in blocks})
    C = max(b[1] for _, b in blocks) + 1
    base = min(o for o, _ in blocks)
    best, best_dups = None, None
    for offset in range(0, n, C):
        cut = collections.defaultdict(list)
        for order, b in blocks:
            cut[round((order - base - offset - b[0] * C) / n)].append(b)
        dups = sum(len(l) - len({b[:2] for b in l}) for l in cut.values())
        if best is None or dups < best_dups:
            best, best_dups = [cut[k] for k in sorted(cut)], dups
    return best


def main():
    launches = read_launches(sys.stdin)
    if not launches:
        sys.exit("stamp_report.py: no ST lines")
    # the first may have begun before the recorded blocks, the last be cut off
    blocks = max(launches, key=len)
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


if __name__ == "__main__":
    main()

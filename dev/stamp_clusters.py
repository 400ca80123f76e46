#!/usr/bin/env python3
"""Where the clusters of an instrumented dense kernel land and how long
their slots sat free first: reads the ST lines of several consecutive
launches (dev/stamp_dense.py; dev/stamp_device.sh runs it) from stdin.
Prints the SM groups that clusters share (a union of the SM sets of the
clusters: on Hopper a GPC's, as far as the clusters show it), the slots
an SM holds (the most blocks seen on one at once), and for the clusters
of the inner launches (the first and last are cut off by what was not
recorded): the delay between the moment C SMs of its group had a free
slot and its start; the spread of its blocks' entries and exits; the
slots of the group that stayed free meanwhile.
Usage: ... | dev/stamp_clusters.py"""
import collections
import statistics
import sys

from stamp_report import read_launches

blocks = [(i, *b[:5]) for i, l in enumerate(read_launches(sys.stdin)) for b in l]
launches = sorted({b[0] for b in blocks})  # (launch, row, rank, smid, entry ns, exit ns)
if len(launches) < 3:
    sys.exit("stamp_clusters.py: needs the lines of three launches or more")
clusters = collections.defaultdict(list)
for b in blocks:
    clusters[(b[0], b[1])].append(b)
C = max(len(v) for v in clusters.values())

# SM groups: union-find over each cluster's SMs
parent = {}
def find(x):
    parent.setdefault(x, x)
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x
for bl in clusters.values():
    for b in bl[1:]:
        parent[find(b[3])] = find(bl[0][3])
groups = collections.defaultdict(set)
for b in blocks:
    groups[find(b[3])].add(b[3])
print(f"{len(clusters)} clusters of {C} blocks, {len(launches)} launches; "
      f"{len(groups)} SM groups:")
for g in sorted(groups.values(), key=lambda s: (-len(s), min(s))):
    print(f"  {len(g):2d} SMs: {' '.join(map(str, sorted(g)))}")

# occupancy of an SM at time t (blocks of every recorded launch)
per_sm = collections.defaultdict(list)
for b in blocks:
    per_sm[b[3]].append((b[4], b[5]))
def resident(sm, t):
    return sum(1 for e, x in per_sm[sm] if e <= t < x)
slots = max(max(resident(sm, e) for e, _ in iv) for sm, iv in per_sm.items())
print(f"slots a SM: {slots} (the most blocks seen on one SM at once)")

inner = [k for k in clusters if launches[0] < k[0] < launches[-1]]
delays, entry_spread, exit_spread, free_at_start = [], [], [], []
for k in inner:
    bl = clusters[k]
    start = min(b[4] for b in bl)
    g = groups[find(bl[0][3])]
    # walk back over the group's block exits before start: the last moment
    # fewer than C of its SMs had a free slot
    exits = sorted({b[5] for b in blocks if b[3] in g and b[5] <= start}, reverse=True)
    ready = start
    for t in exits:
        if sum(1 for sm in g if resident(sm, t) < slots) >= C:
            ready = t
        else:
            break
    delays.append((start - ready) / 1e3)
    entry_spread.append((max(b[4] for b in bl) - start) / 1e3)
    exit_spread.append((max(b[5] for b in bl) - min(b[5] for b in bl)) / 1e3)
    free_at_start.append(sum(slots - resident(sm, start - 1) for sm in g))

def dist(name, v):
    v = sorted(v)
    print(f"{name:44s} median {statistics.median(v):6.2f}  p90 {v[int(0.9 * len(v))]:6.2f}"
          f"  max {v[-1]:6.2f}")
print(f"clusters of the inner launches: {len(inner)}")
dist("delay: C SMs of the group free -> start (us)", delays)
dist("spread of a cluster's block entries (us)", entry_spread)
dist("spread of a cluster's block exits (us)", exit_spread)
dist("free slots in the group just before a start", free_at_start)
# the whole GPU over the inner launches: resident blocks / slots of the SMs used
t_a = min(min(b[4] for b in clusters[k]) for k in inner)
t_b = max(max(b[5] for b in clusters[k]) for k in inner)
step = max((t_b - t_a) // 16, 1)
print("resident / slots of the SMs used, over the inner launches:",
      " ".join(f"{(t - t_a) / 1e3:.0f}us:"
               f"{sum(resident(sm, t) for sm in per_sm) / (slots * len(per_sm)):.2f}"
               for t in range(t_a, t_b, step)))
# the seams: when a launch's last cluster entered (from then on, under PDL,
# the next launch may start), its last exit, the next one's first entry
print("seams (us, from a launch's first entry): last cluster entered, last exit,"
      " next launch's first entry")
for i in launches[1:-1]:
    mine = [b for b in blocks if b[0] == i]
    nxt = [b for b in blocks if b[0] == i + 1]
    t0 = min(b[4] for b in mine)
    print(f"  launch {i}: {(max(b[4] for b in mine) - t0) / 1e3:7.2f}"
          f" {(max(b[5] for b in mine) - t0) / 1e3:7.2f}"
          f" {(min(b[4] for b in nxt) - t0) / 1e3:7.2f}")

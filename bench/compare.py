"""Compares `ingot bench --json` results of two or more versions, row by row.

Each version is LABEL=FILE[,FILE...]: several files are rounds of the same
version (run them interleaved with the other versions', as bench/ab.sh does),
and a row's figure is its minimum us/call over the rounds, the least noisy
estimate of what the code can do. The last column is each later version
against the first (+5.0% = 5% slower). Rows whose check failed in any round
are marked FAILED.

Usage: python3 bench/compare.py base=a1.json,a2.json new=b1.json,b2.json [--json out.json]
"""

import argparse
import json
import sys


def load(files):
    best, failed, machine = {}, set(), None
    for path in files:
        with open(path) as f:
            doc = json.load(f)
        machine = machine or doc.get("machine", {}).get("device_name")
        for row in doc["cases"]:
            key = f"{row['family']}/{row['op']} {row['name']}"
            if row["status"] == "failed":
                failed.add(key)
            if row["time_s"] is None:
                continue
            t = row["time_s"] * 1e6
            if key not in best or t < best[key]:
                best[key] = t
    return best, failed, machine


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("versions", nargs="+", help="LABEL=FILE[,FILE...]")
    ap.add_argument("--json", help="also write the table as JSON")
    args = ap.parse_args()
    labels, data = [], []
    for spec in args.versions:
        label, _, files = spec.partition("=")
        if not files:
            sys.exit(f"compare.py: {spec!r} is not LABEL=FILE[,FILE...]")
        labels.append(label)
        data.append(load(files.split(",")))
    rows = []
    for best, _, _ in data:
        rows += [k for k in best if k not in rows]
    width = max([len(r) for r in rows] + [20])
    print(f"device: {', '.join(sorted({m for _, _, m in data if m}))}; min us/call over the rounds")
    print(f"{'row':<{width}}" + "".join(f"{l:>12}" for l in labels) + "".join(
        f"{l + ' vs ' + labels[0]:>16}" for l in labels[1:]))
    out, worst = [], 0.0
    for r in rows:
        ts = [d[0].get(r) for d in data]
        cells = "".join(f"{t:>12.2f}" if t is not None else f"{'-':>12}" for t in ts)
        rel = []
        for t in ts[1:]:
            if t is None or ts[0] is None or ts[0] <= 0:
                rel.append(None)
            else:
                rel.append(100.0 * (t / ts[0] - 1.0))
                worst = max(worst, rel[-1])
        cells += "".join(f"{x:>+15.1f}%" if x is not None else f"{'-':>16}" for x in rel)
        flag = "  FAILED" if any(r in d[1] for d in data) else ""
        print(f"{r:<{width}}{cells}{flag}")
        out.append({"row": r, "us_per_call": dict(zip(labels, ts)),
                     "change_percent": dict(zip(labels[1:], rel)), "failed": bool(flag)})
    print(f"\nlargest slowdown against {labels[0]}: {worst:+.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"versions": labels, "rows": out}, f, indent=1)
    return 1 if any(r["failed"] for r in out) else 0


if __name__ == "__main__":
    sys.exit(main())

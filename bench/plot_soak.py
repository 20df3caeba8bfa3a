"""Draws the soak's series (bench/src/soak.rs writes soak.csv) as one PNG: claim latency
p50 and p99, dead tuples, and index size over time, ours beside graphile-worker, the span of
the held REPEATABLE READ transactions shaded.

usage: plot_soak.py SOAK_CSV OUT_PNG   (tests/scripts/bench.sh installs matplotlib)
"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    meta, rows = {}, []
    with open(path, newline="") as f:
        first = f.readline()
        for item in first.lstrip("# ").split():
            key, _, value = item.partition("=")
            meta[key] = float(value)
        for row in csv.DictReader(f):
            rows.append(row)
    return meta, rows


def main(src, out):
    meta, rows = read(src)
    sides = {}
    for r in rows:
        sides.setdefault(r["side"], []).append(r)
    fig, (lat, dead, index) = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    colours = {"ours": "tab:blue", "graphile-worker": "tab:orange"}
    for name, series in sides.items():
        minutes = [float(r["at_secs"]) / 60 for r in series]
        c = colours.get(name)
        num = lambda key: [float(r[key]) if r[key] not in ("", "NaN") else float("nan") for r in series]
        lat.plot(minutes, num("p99_ms"), color=c, label=f"{name} p99")
        lat.plot(minutes, num("p50_ms"), color=c, linestyle="--", label=f"{name} p50")
        dead.plot(minutes, num("dead_tuples"), color=c, label=name)
        index.plot(minutes, [v / 1024 for v in num("index_bytes")], color=c, label=name)
    for ax in (lat, dead, index):
        ax.axvspan(meta["held_from_secs"] / 60, meta["held_to_secs"] / 60, color="grey", alpha=0.15,
                   label="REPEATABLE READ held")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    lat.set_ylabel("claim latency (ms)")
    lat.set_yscale("log")
    dead.set_ylabel("dead tuples in the queue table")
    index.set_ylabel("queue table's indexes (KiB)")
    index.set_xlabel("minutes")
    fig.suptitle(f"Soak: {int(meta['rate_per_sec'])} jobs/s into each side at once")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

"""The on/off ratios of fleet_mode.sh's adjacent phase pairs, with a bootstrap interval.

Usage: python3 pair_ratios.py PHASES_FILE [PHASES_FILE ...]

Each file holds fleet_mode.sh's `phase N mode=on|off wall_us_per_step=... cpu_us_per_step=...`
(and `process_cpu_us_per_step=...`) lines (other lines are skipped). Phases pair up in order (on off off on ... pairs each "on" with
the "off" beside it), so a drift of the machine cancels. Prints, per metric, the median of the
pairs' on/off ratios as a slowdown in percent, the 95% bootstrap interval of that median
(10,000 resamples of the pairs, fixed seed) and the least and most of the ratios.
"""
import random
import re
import statistics
import sys


def phases(path):
    out = []
    for line in open(path):
        fields = dict(re.findall(r"(\w+)=([\w.]+)", line))
        if line.startswith("phase ") and "mode" in fields:
            out.append(fields)
    return out


def ratios(rows, metric):
    result = []
    for i in range(0, len(rows) - 1, 2):
        a, b = rows[i], rows[i + 1]
        on, off = (a, b) if a["mode"] == "on" else (b, a)
        result.append(float(on[metric]) / float(off[metric]))
    return result


def interval(values, resamples=10_000, seed=1):
    rng = random.Random(seed)
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples)
    )
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def pct(x):
    return f"{100 * (x - 1):+.1f}%"


for path in sys.argv[1:]:
    rows = phases(path)
    for metric in ("wall_us_per_step", "cpu_us_per_step", "process_cpu_us_per_step"):
        if not rows or metric not in rows[0]:
            continue
        r = ratios(rows, metric)
        if not r:
            continue
        low, high = interval(r)
        values = [float(p[metric]) for p in rows]
        print(f"== {path} {metric}: {len(r)} pairs, median {pct(statistics.median(r))} "
              f"(95% bootstrap {pct(low)} to {pct(high)}), range {pct(min(r))} to {pct(max(r))}; "
              f"phases {min(values):.0f}-{max(values):.0f} us")

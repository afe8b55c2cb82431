"""Estimated against true launches for benches/gpu/budget.sh's `estimate` section.

Usage: python3 budget_estimate.py OUT MODEL

Reads OUT/timeline-{exact,budget}.txt (budget_loop.py's steady timeline: `ready pid=P`, then
`t=UNIX steps=N`) and the cuda_stats rows of OUT/lake-{exact,budget}. Launches per step come
from the exact run (every launch counted, observed_fraction 1); for the budget run, every
statistics interval inside the steady run gets its true launches (steps in it, interpolated
from the timeline, times launches per step) beside the sum of its rows' calls_estimated.
LAUNCHES_PER_STEP=38.0 takes launches per step from an earlier exact run instead.
Works from the tarballs too (OUT may be a copy with the lakes unpacked).
"""
import glob
import os
import sys

out, model = sys.argv[1], sys.argv[2]
try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:
    sys.exit("pyarrow missing: analyse the lake tarballs elsewhere")


def timeline(run):
    pid, points = None, []
    for line in open(f"{out}/timeline-{run}.txt"):
        if line.startswith("ready pid="):
            pid = int(line.split("=")[1])
        elif line.startswith("t="):
            fields = dict(f.split("=") for f in line.split())
            points.append((float(fields["t"]), int(fields["steps"])))
    return pid, points


def steps_at(points, t):
    for (t0, s0), (t1, s1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return s0 + (s1 - s0) * (t - t0) / (t1 - t0)
    return None


def intervals(run, pid, points):
    files = glob.glob(f"{out}/lake-{run}/cuda_stats/**/*.parquet", recursive=True)
    table = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
    by_end = {}
    for r in table.to_pylist():
        if r["pid"] != pid or not r["function"].startswith("cuLaunchKernel"):
            continue
        key = (r["time_ns"], r["interval_ns"])
        seen, estimated, least = by_end.get(key, (0, 0, 1.0))
        by_end[key] = (
            seen + r["calls"],
            estimated + (r.get("calls_estimated") or r["calls"]),
            min(least, r.get("observed_fraction") or 1.0),
        )
    first, last = points[0][0] + 1.0, points[-1][0]
    kept = []
    for (end_ns, length_ns), (seen, estimated, least) in sorted(by_end.items()):
        end, start = end_ns / 1e9, (end_ns - length_ns) / 1e9
        if start >= first and end <= last:
            kept.append((start, end, seen, estimated, least, steps_at(points, end) - steps_at(points, start)))
    return kept


pid, points = timeline("exact")
exact = intervals("exact", pid, points)
launches = sum(k[2] for k in exact)
steps = sum(k[5] for k in exact)
if os.environ.get("LAUNCHES_PER_STEP"):
    # An exact run whose steady part held no whole statistics interval: launches per step of
    # an earlier exact run of the same model.
    per_step = float(os.environ["LAUNCHES_PER_STEP"])
    print(f"== {model}, launches per step given: {per_step:.3f}")
elif not steps:
    sys.exit(f"the exact run held no whole statistics interval ({len(points)} timeline points);"
             " run it longer or give LAUNCHES_PER_STEP")
else:
    per_step = launches / steps
    print(f"== {model}, exact run: {launches} launches in {steps:.0f} steps over {len(exact)}"
          f" intervals = {per_step:.3f} launches per step")
pid, points = timeline("budget")
kept = intervals("budget", pid, points)
print(f"== {model}, under the default budget: {len(kept)} intervals inside the steady run")
total_true = total_estimated = total_seen = 0.0
for start, end, seen, estimated, least, steps in kept:
    true = steps * per_step
    total_true, total_estimated, total_seen = total_true + true, total_estimated + estimated, total_seen + seen
    print(f"   {end - start:5.2f} s  seen {seen:8d}  estimated {estimated:8d}  true {true:10.0f}"
          f"  observed {least:.3f}  error {100 * (estimated - true) / true:+.2f}%")
span = kept[-1][1] - kept[0][0] if kept else 0
print(f"== over {span:.0f} s: seen {total_seen:.0f}, estimated {total_estimated:.0f}, true {total_true:.0f}"
      f" ({100 * total_seen / total_true:.1f}% observed): error {100 * (total_estimated - total_true) / total_true:+.2f}%")

"""The overhead budget's cost inside a sampled process, from one steady run
(benches/gpu/budget_windows.sh): the loop's step rate inside each sampling window against the
rate in the seconds around it.

Usage: python3 budget_windows.py AGENT_LOG TIMELINE [WINDOW_S]

AGENT_LOG has the budget's debug lines (`<time> DEBUG ...: window opened pid=P took_us=U`);
TIMELINE is budget_loop.py's steady output (`ready pid=P`, then `t=UNIX steps=N` at every
100 ms boundary). A window is taken as [opened, opened + WINDOW_S] (default 0.5 s, the default
sampling_window_ms; it closes on the drain timer, up to 100 ms later). Inside: the 100 ms
buckets within [opened + 0.05, opened + WINDOW_S - 0.05]. Around: the buckets within 2.5 s
before or after it that are at least 0.3 s before and 0.6 s after every window (attach and
detach edges left out). Per window, slowdown = rate around / rate inside - 1; printed: the
median over windows with a 95% bootstrap interval, the same for placebo windows (times half
way between two real windows, which probe nothing: the method's own noise), the share of the
run inside windows, and their product, the run's cost from the probes inside windows.
"""
import datetime
import random
import re
import statistics
import sys

log_path, timeline_path = sys.argv[1], sys.argv[2]
window_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.5

points, pid = [], None
for line in open(timeline_path):
    if line.startswith("ready pid="):
        pid = int(line.split("=")[1])
    m = re.match(r"t=([\d.]+) steps=(\d+)", line)
    if m:
        points.append((float(m.group(1)), int(m.group(2))))
if pid is None or len(points) < 100:
    sys.exit("the timeline has no run")

opened = []
for line in open(log_path):
    if "window opened" not in line or f"pid={pid}" not in line:
        continue
    stamp = line.split()[0].rstrip("Z")
    when = datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc)
    opened.append(when.timestamp())
start, end = points[0][0], points[-1][0]
opened = [w for w in opened if start + 3 < w < end - 3]
if len(opened) < 5:
    sys.exit(f"only {len(opened)} windows of pid {pid} inside the run")

buckets = [(a[0], b[0], b[1] - a[1]) for a, b in zip(points, points[1:]) if b[0] > a[0]]


def rate(selected):
    time = sum(b - a for a, b, _ in selected)
    return sum(n for _, _, n in selected) / time if time > 0 else None


def clear_of_windows(a, b):
    return all(b <= w - 0.3 or a >= w + window_s + 0.6 for w in opened)


def slowdowns(starts, whole=False):
    found = []
    for w in starts:
        if whole:
            # The window with its edges: the attach before it, the close on the drain timer
            # and the detach after it.
            inside = [x for x in buckets if x[1] > w - 0.3 and x[0] < w + window_s + 0.6]
        else:
            inside = [x for x in buckets if x[0] >= w + 0.05 and x[1] <= w + window_s - 0.05]
        around = [
            x for x in buckets
            if w - 2.5 <= x[0] and x[1] <= w + window_s + 2.5 and clear_of_windows(x[0], x[1])
            and not (x[1] > w and x[0] < w + window_s)
        ]
        r_in, r_out = rate(inside), rate(around)
        if r_in and r_out and len(inside) >= 2 and len(around) >= 4:
            found.append(r_out / r_in - 1)
    return found


def median_interval(values, rounds=5000):
    rng = random.Random(1)
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds)
    )
    return statistics.median(values), medians[int(0.025 * rounds)], medians[int(0.975 * rounds)]


real = slowdowns(opened)
placebo_starts = [
    (a + b) / 2 - window_s / 2 for a, b in zip(opened, opened[1:]) if b - a > window_s + 3.5
]
placebo = slowdowns(placebo_starts)
share = len(opened) * (window_s + 0.05) / (end - start)
steps = points[-1][1] - points[0][1]
print(f"run: {end - start:.0f} s, {steps} steps ({(end - start) / steps * 1e6:.0f} us a step), "
      f"{len(opened)} windows of pid {pid}")
m, lo, hi = median_interval(real)
print(f"inside a window vs around it: {m * 100:+.1f}% ({lo * 100:+.1f} to {hi * 100:+.1f}), "
      f"{len(real)} windows")
if len(placebo) >= 5:
    pm, plo, phi = median_interval(placebo)
    print(f"placebo windows (no probes): {pm * 100:+.1f}% ({plo * 100:+.1f} to {phi * 100:+.1f}), "
          f"{len(placebo)} windows")
print(f"share of the run inside windows: {share * 100:.1f}%")
print(f"cost of the probes to the run: {share * m * 100:+.2f}% "
      f"({share * lo * 100:+.2f} to {share * hi * 100:+.2f})")
# The same with each window's edges (0.3 s before it to 0.6 s after it): what attaching,
# probing and detaching cost together, over the share of the run those spans take.
whole = slowdowns(opened, whole=True)
wm, wlo, whi = median_interval(whole)
span_share = len(opened) * (window_s + 0.9) / (end - start)
print(f"windows with their edges vs around them: {wm * 100:+.1f}% ({wlo * 100:+.1f} to "
      f"{whi * 100:+.1f}), {span_share * 100:.1f}% of the run: cost to the run "
      f"{span_share * wm * 100:+.2f}% ({span_share * wlo * 100:+.2f} to {span_share * whi * 100:+.2f})")
if len(placebo_starts) >= 5:
    pw = slowdowns(placebo_starts, whole=True)
    pwm, pwlo, pwhi = median_interval(pw)
    print(f"placebo windows with their edges: {pwm * 100:+.1f}% ({pwlo * 100:+.1f} to "
          f"{pwhi * 100:+.1f}), {len(pw)} windows")

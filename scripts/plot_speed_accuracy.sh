#!/usr/bin/env bash
# plot_speed_accuracy.sh - the speed-vs-accuracy plot of a paper table:
# each row of table.json (scripts/paper_table.sh) as a point, its accuracy
# against its throughput relative to the first AR row, one marker per
# decoder kind.
#
#   scripts/plot_speed_accuracy.sh [TABLE_JSON [OUT_SVG]]
#       default: results/paper_table.json -> results/speed_accuracy.svg
#   PNG=1 scripts/plot_speed_accuracy.sh ...   # also OUT_SVG with .png (pngcairo)
#
# Left, every row on a log scale; right, the rows at or above ZOOM_ACC
# percent (default 70: the AR-grade decoders, which crowd near 1x) again on
# a linear scale, inside the frame drawn on the left. Each row's name is
# placed by a greedy search over positions around its point, so that no
# two names overlap and none covers a point; a name set away from its
# point gets a thin line to it. Needs python3 and gnuplot.
set -euo pipefail
cd "$(dirname "$0")/.."
TABLE=${1:-results/paper_table.json}
OUT=${2:-results/speed_accuracy.svg}
ZOOM_ACC=${ZOOM_ACC:-70}
command -v gnuplot >/dev/null || { echo "plot_speed_accuracy.sh: gnuplot not found" >&2; exit 1; }

script=$(mktemp)
trap 'rm -f "$script" "$OUT.tmp"' EXIT
python3 - "$TABLE" "$ZOOM_ACC" >"$script" <<'PY'
import json, math, random, sys

table, zoom_acc = sys.argv[1], float(sys.argv[2])
rows = json.load(open(table))["rows"]
ar = next(r for r in rows if r["decoder"] == "ar")["overall"]["tokens_per_s"]
pts = [(r["name"], r["kind"], r["overall"]["tokens_per_s"] / ar, 100 * r["overall"]["accuracy"]) for r in rows]
kinds = [("ar", 7, 1.3, "#1f77b4", "AR"), ("refusion", 5, 1.2, "#ff7f0e", "ReFusion (reference decoder)"),
         ("refusion-verified", 9, 1.5, "#2ca02c", "ReFusion, AR-verified"), ("mdm", 13, 1.4, "#d62728", "MDM")]

W, H = 1200, 660                 # canvas (pixels)
CHAR_W, LABEL_H = 5.8, 12        # a 9-point sans label: width per character, height
MARK_R = 8                       # a marker's radius (svg draws them larger than pngcairo)

zoomed = [p for p in pts if p[3] >= zoom_acc]
xs, ys = [p[2] for p in pts], [p[3] for p in pts]
panels = [  # screen left, right, bottom, top; data ranges; log x; the rows it names
    dict(box=(0.065, 0.40, 0.10, 0.86), x=(min(xs) / 1.6, max(xs) * 1.6), y=(0, math.ceil(max(ys) / 10) * 10 + 5),
         log=True, named=[p for p in pts if p not in zoomed])]
if zoomed:
    zx, zy = [p[2] for p in zoomed], [p[3] for p in zoomed]
    dx = (max(zx) - min(zx)) * 0.12 or 0.05
    panels.append(dict(box=(0.49, 0.985, 0.10, 0.86), x=(min(zx) - dx, max(zx) + dx),
                       y=(math.floor(min(zy)) - 1.5, math.ceil(max(zy)) + 1.5), log=False, named=zoomed))


def to_px(pn, x, y):
    l, r, b, t = pn["box"]
    f = math.log10 if pn["log"] else (lambda v: v)
    gx = (f(x) - f(pn["x"][0])) / (f(pn["x"][1]) - f(pn["x"][0]))
    gy = (y - pn["y"][0]) / (pn["y"][1] - pn["y"][0])
    return (l + gx * (r - l)) * W, (b + gy * (t - b)) * H


def overlaps(a, b, pad=2):
    return a[0] < b[2] + pad and b[0] < a[2] + pad and a[1] < b[3] + pad and b[1] < a[3] + pad


def hits_circle(box, c, rad):
    nx, ny = min(max(c[0], box[0]), box[2]), min(max(c[1], box[1]), box[3])
    return (nx - c[0]) ** 2 + (ny - c[1]) ** 2 < rad * rad


def segment_hits(box, p, q, steps=24):
    return any(box[0] < p[0] + (q[0] - p[0]) * s / steps < box[2] and box[1] < p[1] + (q[1] - p[1]) * s / steps < box[3]
               for s in range(1, steps))


def try_place(order, marks):
    """labels (name, box, point) for the points in this order, or None where one finds no place"""
    placed, lines = [], []
    for name, c in order:
        w, best = len(name) * CHAR_W + 4, None
        for rad in (9, 16, 26, 40, 56, 76, 100, 130, 170, 220):
            for k in range(24):
                a = math.pi * 2 * k / 24
                dx, dy = math.cos(a), math.sin(a)
                cx = c[0] + rad * dx + (w / 2 if dx > 0.3 else -w / 2 if dx < -0.3 else 0)
                cy = c[1] + rad * dy + (LABEL_H / 2 if dy > 0.3 else -LABEL_H / 2 if dy < -0.3 else 0)
                box = (cx - w / 2, cy - LABEL_H / 2, cx + w / 2, cy + LABEL_H / 2)
                if box[0] < AREA[0] or box[2] > AREA[1] or box[1] < AREA[2] or box[3] > AREA[3]:
                    continue
                end = (min(max(c[0], box[0]), box[2]), min(max(c[1], box[1]), box[3]))
                if (any(overlaps(box, o[1]) for o in placed) or any(hits_circle(box, m, MARK_R) for m in marks)
                        or any(segment_hits(box, p, q) for p, q in lines)
                        or (rad > 12 and any(segment_hits(o[1], c, end) for o in placed))):
                    continue
                best = (box, end)
                break
            if best:
                break
        if not best:
            return None
        placed.append((name, best[0], c))
        if math.dist(c, best[1]) > 12:
            lines.append((c, best[1]))
    return placed, lines


def place(pn):
    """labels: no box over another box, a marker or a leader line; the most
    crowded points choose first, then other orders until one fits"""
    global AREA
    AREA = tuple(v * s for v, s in zip(pn["box"], (W, W, H, H)))
    marks = [to_px(pn, p[2], p[3]) for p in pts
             if pn["x"][0] <= p[2] <= pn["x"][1] and pn["y"][0] <= p[3] <= pn["y"][1]]
    named = [(p[0], to_px(pn, p[2], p[3])) for p in pn["named"]]
    orders = [sorted(named, key=lambda n: -sum(math.dist(n[1], m) < 60 for m in marks)),
              sorted(named, key=lambda n: n[1][0]), sorted(named, key=lambda n: -n[1][0])]
    rng = random.Random(1)
    for _ in range(200):
        orders.append(rng.sample(named, len(named)))
    for order in orders:
        got = try_place(order, marks)
        if got:
            return got
    sys.exit("plot_speed_accuracy.sh: no placement of the labels without overlaps")


def graph(pn, x, y):
    l, r, b, t = pn["box"]
    return (x / W - l) / (r - l), (y / H - b) / (t - b)


print(f'set terminal svg size {W},{H} noenhanced font "sans,11" background rgb "white"')
print("set encoding utf8")
print("$pts << EOD")
for kind in kinds:
    for p in pts:
        if p[1] == kind[0]:
            print(f'"{p[0]}" {p[2]:.6g} {p[3]:.6g}')
    print('"" 1e-9 -1e9\n\n')  # keeps every block (and its key entry) present
print("EOD")
print("set multiplot")
print(f'set label 1000 "Accuracy vs throughput on the test set ({table})" at screen 0.5, 0.975 center font ",13"')
# the key: a plot with nothing in it across the top, its entries in one row
print("set lmargin at screen 0.05; set rmargin at screen 0.95; set bmargin at screen 0.895; "
      "set tmargin at screen 0.945")
print("unset border; unset tics; set xrange [0:1]; set yrange [0:1]")
print("set key inside center center horizontal maxrows 1 samplen 1 width 2")
print("plot " + ", ".join(f'NaN with points pt {pt} ps {ps} lc rgb "{col}" title "{title}"'
                          for _, pt, ps, col, title in kinds))
print("unset key; unset label; set border; set tics")
print("set grid")
for i, pn in enumerate(panels):
    l, r, b, t = pn["box"]
    print(f"set lmargin at screen {l}; set rmargin at screen {r}; set bmargin at screen {b}; set tmargin at screen {t}")
    print(f"set xrange [{pn['x'][0]:.6g}:{pn['x'][1]:.6g}]; set yrange [{pn['y'][0]:.6g}:{pn['y'][1]:.6g}]")
    print("set logscale x" if pn["log"] else "unset logscale x")
    print('set xlabel "throughput relative to AR' + (' (log scale)"' if pn["log"] else '"'))
    print('set ylabel "accuracy (%)"' if i == 0 else "unset ylabel")
    if i == 0 and len(panels) > 1:
        z = panels[1]
        print(f"set object 1 rect from {z['x'][0]:.6g},{z['y'][0]:.6g} to {z['x'][1]:.6g},{z['y'][1]:.6g} "
              "fs empty border lc rgb '#777777' dt 2")
        print(f'set label 1001 "≥ {zoom_acc:g}%: right" at {z["x"][0]:.6g},{z["y"][0]:.6g} right offset -0.5,0.6 '
              'font ",9" tc rgb "#555555"')
    placed, lines = place(pn)
    for j, (name, box, c) in enumerate(placed):
        gx, gy = graph(pn, (box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
        print(f'set label {j + 1} "{name}" at graph {gx:.4f}, {gy:.4f} center font ",9"')
    for j, (p, q) in enumerate(lines):
        (x0, y0), (x1, y1) = graph(pn, *p), graph(pn, *q)
        print(f"set arrow {j + 1} from graph {x0:.4f}, {y0:.4f} to graph {x1:.4f}, {y1:.4f} nohead "
              "lw 0.6 lc rgb '#999999'")
    plots = [f'$pts index {k} using 2:3 with points pt {pt} ps {ps} lc rgb "{col}" notitle'
             for k, (_, pt, ps, col, _) in enumerate(kinds)]
    print("plot " + ", ".join(plots))
    print("unset label; unset arrow; unset object")
print("unset multiplot")
PY

gnuplot -e "set output '$OUT.tmp'" "$script"
mv "$OUT.tmp" "$OUT"
echo "wrote $OUT"
if [ "${PNG:-0}" = 1 ]; then
  # pngcairo counts font sizes in points (4/3 pixel): fontscale 0.75 gives the svg's pixel sizes
  sed -e 's/^set terminal svg \(.*\) background.*/set terminal pngcairo \1 fontscale 0.75 background rgb "white"/' "$script" | gnuplot -e "set output '${OUT%.svg}.png'" -
  echo "wrote ${OUT%.svg}.png"
fi

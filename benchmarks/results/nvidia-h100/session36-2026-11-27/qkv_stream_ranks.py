"""Session 36 reading of a skinny_gemm_timeline.py log (early/timeline-early.log.gz): for every launch of one
shape (default: 405B qkv at 32 tokens, 108 CTAs in clusters of 3), each CTA's stream time (its last full stage
minus its first, us) by cluster rank (= K-slice: rank 0 streams 10 of the 32 K-blocks, ranks 1 and 2 stream 11),
and the SMs whose CTAs end their streams furthest from the launch's median, over all launches.

    python qkv_stream_ranks.py early/timeline-early.log.gz [N K M]
"""
import collections
import gzip
import re
import statistics
import sys

LINE = re.compile(r"FP8DK_TL " + " ".join([r"(\d+)"] * 14))
path, shape = sys.argv[1], tuple(int(x) for x in (sys.argv[2:5] or (2304, 16384, 32)))
case, rows = None, []
for line in gzip.open(path, "rt"):
    if line.startswith("CASE "):
        case = line[5:].strip()
    elif (m := LINE.search(line)) and tuple(int(x) for x in m.groups()[:3]) == shape:
        rows.append((case, [int(x) for x in m.groups()]))
rows.sort(key=lambda r: r[1][6])  # by entry time; a launch = entries closer than 50 us
launches = []
for c, v in rows:
    if launches and v[6] - launches[-1][-1][1][6] < 50000:
        launches[-1].append((c, v))
    else:
        launches.append([(c, v)])
grid = rows[0][1][3]
by_rank, by_sm, rank_of_sm = collections.defaultdict(list), collections.defaultdict(list), collections.defaultdict(set)
print(f"launches of N={shape[0]} K={shape[1]} M={shape[2]} with all {grid} CTAs (launches that overlap are skipped)")
for launch in launches:
    if len(launch) != grid:
        continue
    stream = [((v[9] - v[8]) / 1e3, v[13], v[4]) for _, v in launch]  # (us, smid, cta)
    med = statistics.median(s for s, _, _ in stream)
    for s, sm, cta in stream:
        by_rank[cta % 3].append(s - med)
        by_sm[sm].append(s - med)
        rank_of_sm[sm].add(cta % 3)
    print(f"  {launch[0][0]}: stream min/median/max {min(stream)[0]:.2f} / {med:.2f} / {max(stream)[0]:.2f}")
print("stream time minus the launch's median, by cluster rank (mean us):",
      {r: round(statistics.mean(x), 2) for r, x in sorted(by_rank.items())})
ranked = sorted((statistics.mean(x), sm) for sm, x in by_sm.items())
fmt = lambda part: [(sm, round(d, 2), sorted(rank_of_sm[sm])) for d, sm in part]
print("slowest SMs (smid, mean us over the median, ranks it hosted):", fmt(ranked[::-1][:10]))
print("fastest SMs:", fmt(ranked[:10]))

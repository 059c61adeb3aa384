"""Summarizes timeline-fine.log.gz: a -DFP8DK_DIAG_TIMELINE build of e936d9b with
docs/experiments/skinny_gemm_tma_diag_meet_steps.patch, whose cluster meet marks slots 7-14 after the pass over red,
the fence, the cluster wait, the barrier, the copies issued, the peers' rows landed, the outputs stored and the copies
read. Prints, per launch of 108 CTAs, the median over the CTAs and the CTA that ended last of each step, in us:

    python fine_steps.py timeline-fine.log.gz
"""
import gzip
import statistics
import sys

NAMES = ["pass", "fence", "clwait", "bar", "copies", "landed", "finish", "cpread", "end"]
# FP8DK_TL fields: n k m grid cta out t0 t1 t2 t3 t4(end) t5 t6(reduction) smid t7 .. t14
MARKS = [12, 14, 15, 16, 17, 18, 19, 20, 21, 10]

records, case = {}, "warm-up launches"
for line in gzip.open(sys.argv[1], "rt"):
    if line.startswith("CASE"):
        case = line[5:].strip()
    elif line.startswith("FP8DK_TL"):
        records.setdefault(case, []).append(list(map(int, line.split()[1:])))
for case, rows in records.items():
    rows.sort(key=lambda v: v[6])
    launches, cur = [], [rows[0]]
    for v in rows[1:]:
        if v[6] - cur[-1][6] > 3000:
            launches.append(cur)
            cur = [v]
        else:
            cur.append(v)
    launches.append(cur)
    print(case)
    for launch in launches:
        if len(launch) != 108:
            continue
        steps = [[(v[MARKS[i + 1]] - v[MARKS[i]]) / 1000 for i in range(len(NAMES))] for v in launch]
        last = max(launch, key=lambda v: v[10])
        med = [statistics.median(s[i] for s in steps) for i in range(len(NAMES))]
        print("  median " + " ".join(f"{n}={x:.2f}" for n, x in zip(NAMES, med)))
        print("  last   " + " ".join(f"{n}={(last[MARKS[i + 1]] - last[MARKS[i]]) / 1000:.2f}"
                                     for i, n in enumerate(NAMES)))

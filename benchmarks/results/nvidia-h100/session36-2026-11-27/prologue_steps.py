"""Session 36 diagnostic: per case of a skinny_gemm_timeline.py log (built with skinny_gemm_tma_diag_prologue.patch, in this folder),
the medians over CTAs of each prologue mark after the CTA's own entry (us): thread 0's inits (t7), the producer
past the barrier and the work split (t8), its policy and map prefetches (t9), its first copy (t1), the first window
requested (t10), the first full stage (t2). Without the patch (or with the producer-first patch) t7-t10 read 0/-."""
import gzip, re, statistics, sys
LINE = re.compile(r"FP8DK_TL (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) " + r" ".join([r"(\d+)"] * 12))
case, rows = None, {}
path = sys.argv[1]
for line in (gzip.open(path, "rt") if path.endswith(".gz") else open(path)):
    if line.startswith("CASE "):
        case = line[5:].strip()
        continue
    m = LINE.search(line)
    if not m:
        continue
    v = [int(x) for x in m.groups()]
    t0, t1, t2, t3, t4, t5, t6, smid, t7, t8, t9, t10 = v[6:]
    d = lambda t: (t - t0) / 1e3 if t else float("nan")
    rows.setdefault((case, v[0], v[1], v[2]), []).append((d(t7), d(t8), d(t9), d(t1), d(t10), d(t2)))
print("case | inits(t7) | past barrier+split(t8) | policy+prefetch(t9) | first copy(t1) | window(t10) | first stage(t2) | ctas")
for key, r in rows.items():
    med = [statistics.median([x[j] for x in r]) for j in range(6)]
    print(key, " | ".join(f"{x:6.2f}" for x in med), "|", len(r))

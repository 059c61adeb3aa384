"""Session 36: per full launch of 405B qkv at 32 tokens in early/timeline-early.log.gz, the last stream end now, the
last if rank 0 streamed 11 K-blocks and rank 1 10 (their stream times scaled), and the last by rank (us).

    python qkv_split_scaled.py   # from this folder
"""
import collections, gzip, re, statistics, sys
LINE = re.compile(r"FP8DK_TL " + " ".join([r"(\d+)"] * 14))
rows=[]
for line in gzip.open("early/timeline-early.log.gz","rt"):
    m=LINE.search(line)
    if m and tuple(int(x) for x in m.groups()[:3])==(2304,16384,32): rows.append([int(x) for x in m.groups()])
rows.sort(key=lambda v:v[6]); L=[]
for v in rows:
    if L and v[6]-L[-1][-1][6]<50000: L[-1].append(v)
    else: L.append([v])
for g in L:
    if len(g)!=108: continue
    t0=min(v[6] for v in g)
    # stream end relative to launch start; stream = last stage - first stage
    cur=max((v[9]-t0)/1e3 for v in g)
    sim=[]
    for v in g:
        r=v[4]%3; fs=(v[8]-t0)/1e3; d=(v[9]-v[8])/1e3
        d2 = d*11/10 if r==0 else d*10/11 if r==1 else d
        sim.append(fs+d2)
    per=[max((v[9]-t0)/1e3 for v in g if v[4]%3==r) for r in range(3)]
    print("last stream end now %.2f  simulated 11/10/11: %.2f   per-rank last now: %s" % (cur, max(sim), [round(x,2) for x in per]))

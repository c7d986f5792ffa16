#!/usr/bin/env python3
"""Cut a recording down for testkit/accuracy/testdata. usage: cutdown.py RUNDIR OUTDIR
metrics/<ms>.prom: only the llamacpp: samples (no comments); server-stderr-ts.log.gz: the relay's copy, gzipped
as recorded; requests.txt.gz: one request a line, "t_start t_end ok level first d1 d2 ..." in Unix microseconds,
each arrival after the first as microseconds after the one before (tokentruth.LoadRequests)."""
import gzip, json, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(os.path.join(dst, "metrics"), exist_ok=True)
for f in sorted(os.listdir(os.path.join(src, "metrics"))):
    lines = [l for l in open(os.path.join(src, "metrics", f)) if l.startswith("llamacpp:")]
    open(os.path.join(dst, "metrics", f), "w").writelines(lines)
with open(os.path.join(src, "server-stderr-ts.log"), "rb") as i, gzip.GzipFile(os.path.join(dst, "server-stderr-ts.log.gz"), "wb", mtime=0) as o:
    shutil.copyfileobj(i, o)
us = lambda s: int(round(s * 1e6))
recs = json.load(open(os.path.join(src, "client-records.json")))["requests"]
with gzip.GzipFile(os.path.join(dst, "requests.txt.gz"), "wb", mtime=0) as o:
    for r in recs:
        f = [us(r["t_start"]), us(r["t_end"]), 1 if r["completed"] and not r["error"] else 0, r["level"]]
        prev = None
        for t in r["token_times"]:
            f.append(us(t) if prev is None else us(t) - prev)
            prev = us(t)
        o.write((" ".join(map(str, f)) + "\n").encode())
print(dst, len(recs), "requests", sum(len(r["token_times"]) for r in recs), "tokens")

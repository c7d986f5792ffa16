#!/usr/bin/env python3
"""Load driver for llama-server on 127.0.0.1 with a load shape given as JSON. Adapted from the sweep's
client_sweep.py (same request body, same per-token record). usage: client_shapes.py OUT.json PORT SEED SHAPE.json

SHAPE: {"phases": [{"name": str, "streams": N, "secs": S, "n_predict": [..], "p_long": P, "think": [lo, hi]}, ...]}
Phases run back to back on the wall clock, the first on a 10 s boundary of Unix time after a lead-in idle of
"lead_idle" s. A phase with streams 0 is idle. Each stream is a thread issuing streaming /completion requests
until its phase ends, pausing "think" seconds (uniform in [lo, hi], default none) between its requests; a
request started before the end is allowed to finish (never cancelled by the client). Per request it records
t_start (just before connect+send), t_first_token, the arrival time of every token (time the SSE line carrying
it was read), t_end, tokens, prompt tokens and whether it completed (final chunk with stop=true received)."""
import json, sys, time, threading, http.client, random

HOST = "127.0.0.1"
OUT, PORT, SEED, SHAPE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.load(open(sys.argv[4]))
SHORT_PROMPTS = ["Once upon a time in a small village", "The quick brown fox jumps over the lazy dog and",
                 "In the beginning the universe was created", "Write a story about a robot who learns to paint"]
LONG_PROMPTS = [
    ("The following is a detailed report on the history of the small harbour town, its fishing fleet, its market, "
     "the families who built the first stone houses along the quay, the storms that flooded the lower streets in "
     "three separate winters, the arrival of the railway, the slow decline of the cannery and the long argument "
     "about whether the old lighthouse should be pulled down or turned into a museum. ") * 4
    + "Summarise the report and then continue the story of the lighthouse keeper:",
    ("System notes: the user is planning a long journey by train across several countries and wants advice on "
     "tickets, luggage, connections, food on board, sleeping cars, border checks, currency, weather in each season, "
     "what to read on the way, how to keep a phone charged, and which cities are worth a stop of one or two nights. ") * 4
    + "Answer the user's question about the first leg of the journey in detail:",
]

records, lock = [], threading.Lock()
rid = [0]
HARD_DEADLINE = None


def post_json(path, obj, timeout=10):
    c = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    c.request("POST", path, json.dumps(obj).encode(), {"Content-Type": "application/json"})
    r = c.getresponse(); body = r.read(); c.close()
    return r.status, json.loads(body)


def one(ph, stream, rng, prompt_tok):
    with lock:
        rid[0] += 1; my = rid[0]
    n_predict = rng.choice(ph["n_predict"])
    long_p = rng.random() < ph.get("p_long", 0.0)
    prompt = rng.choice(LONG_PROMPTS if long_p else SHORT_PROMPTS)
    seed = rng.randrange(2 ** 31)
    body = json.dumps({"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "stream": True,
                       "return_tokens": True, "cache_prompt": False, "temperature": 0.8, "seed": seed}).encode()
    rec = {"id": my, "phase": ph["name"], "level": ph["streams"], "stream": stream, "n_predict": n_predict,
           "long_prompt": long_p, "prompt_chars": len(prompt), "prompt_tokens_client": prompt_tok.get(prompt),
           "sampling_seed": seed, "t_start": None, "t_first_token": None, "token_times": [], "t_end": None,
           "tokens": 0, "prompt_tokens": None, "completed": False, "status": None, "error": None,
           "multi_token_chunks": 0, "chunks": 0}
    tt = rec["token_times"]
    try:
        rec["t_start"] = time.time()
        c = http.client.HTTPConnection(HOST, PORT, timeout=120)
        c.request("POST", "/completion", body, {"Content-Type": "application/json"})
        r = c.getresponse(); rec["status"] = r.status
        while True:
            line = r.readline()
            if not line:
                break
            now = time.time()
            if not line.startswith(b"data: "):
                continue
            d = json.loads(line[6:])
            stop = bool(d.get("stop"))
            toks = d.get("tokens")
            k = len(toks) if toks is not None else (0 if stop else 1)
            if k:
                rec["chunks"] += 1
                if k > 1:
                    rec["multi_token_chunks"] += 1
                tt.extend([now] * k)
            if stop:
                rec["completed"] = True
                rec["tokens_predicted"] = d.get("tokens_predicted")
                rec["tokens_evaluated"] = d.get("tokens_evaluated")
                rec["stop_type"] = d.get("stop_type")
                rec["timings"] = d.get("timings")
                if d.get("timings"):
                    rec["prompt_tokens"] = d["timings"].get("prompt_n")
                break
        c.close()
    except Exception as e:
        rec["error"] = repr(e)
    rec["t_end"] = time.time()
    rec["tokens"] = len(tt)
    if tt:
        rec["t_first_token"] = tt[0]
    if rec["prompt_tokens"] is None:
        rec["prompt_tokens"] = rec["prompt_tokens_client"]
    with lock:
        records.append(rec)


def worker(ph, stream, seed, prompt_tok):
    rng = random.Random(seed)
    think = ph.get("think")
    n = 0
    while time.time() < ph["end"] and time.time() < HARD_DEADLINE and n < 100000:
        one(ph, stream, rng, prompt_tok)
        n += 1
        if think:
            time.sleep(rng.uniform(*think))


def main():
    global HARD_DEADLINE
    prompt_tok = {}
    for p in SHORT_PROMPTS + LONG_PROMPTS:
        try:
            st, d = post_json("/tokenize", {"content": p, "add_special": True})
            prompt_tok[p] = len(d["tokens"])
        except Exception as e:
            print("tokenize failed", repr(e), flush=True)
    print("prompt tokens", sorted(set(prompt_tok.values())), flush=True)
    lead = SHAPE.get("lead_idle", 15)
    first = (int(time.time() + lead + 2) // 10 + 1) * 10
    sched, t = [{"name": "idle_start", "streams": 0, "start": first - lead, "end": first}], first
    for i, ph in enumerate(SHAPE["phases"]):
        ph = dict(ph, start=t, end=t + ph["secs"], order=i); t += ph["secs"]
        sched.append(ph)
    HARD_DEADLINE = t + 60
    print("schedule", json.dumps(sched), flush=True)
    time.sleep(max(0, sched[0]["start"] - time.time()))
    running = []
    for ph in sched:
        time.sleep(max(0, ph["start"] - time.time()))
        for s in range(ph["streams"]):
            th = threading.Thread(target=worker, args=(ph, s, SEED * 100000 + ph["order"] * 100 + s, prompt_tok))
            th.start(); running.append(th)
    time.sleep(max(0, sched[-1]["end"] - time.time()))
    for th in running:
        th.join(timeout=90)
    for ph in sched:
        mine = [r for r in records if r["phase"] == ph["name"]]
        ph["requests"] = len(mine)
        ph["last_t_end"] = max((r["t_end"] for r in mine), default=None)
        ph["incomplete"] = sum(1 for r in mine if not r["completed"])
    records.sort(key=lambda r: r["t_start"])
    for r in records:
        for k in ("t_start", "t_first_token", "t_end"):
            if r[k] is not None:
                r[k] = round(r[k], 6)
        r["token_times"] = [round(x, 6) for x in r["token_times"]]
    meta = {"client": "client_shapes.py", "seed": SEED, "shape": SHAPE, "short_prompts": SHORT_PROMPTS,
            "long_prompts": LONG_PROMPTS, "prompt_tokens_client": {p: prompt_tok.get(p) for p in SHORT_PROMPTS + LONG_PROMPTS},
            "request_body": {"stream": True, "ignore_eos": True, "return_tokens": True, "cache_prompt": False, "temperature": 0.8},
            "endpoint": "POST http://%s:%d/completion" % (HOST, PORT)}
    json.dump({"meta": meta, "schedule": sched, "requests": records}, open(OUT, "w"), separators=(",", ":"))
    print("wrote", OUT, len(records), "requests", sum(r["tokens"] for r in records), "tokens",
          sum(1 for r in records if not r["completed"]), "incomplete", flush=True)


main()

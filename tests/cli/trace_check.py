#!/usr/bin/env python3
# trace_check.py: checks one rank's Chrome trace of note [trace] (written by
# SHARC_PROFILE_TRACE) against the run's metrics.jsonl; used by trace.sh.
# usage: trace_check.py TRACE METRICS RANK FIRST LAST MICRO
import json
import re
import sys

path, metrics, rank, a, b, micro = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
EPS = 0.0021  # ts and dur are printed to 0.001 us each


def fail(msg):
    print(f"FAIL: {path}: {msg}")
    sys.exit(1)


doc = json.load(open(path))
if doc.get("displayTimeUnit") != "ms" or not isinstance(doc.get("traceEvents"), list):
    fail("not a trace-event object with traceEvents and displayTimeUnit ms")
xs = []
for e in doc["traceEvents"]:
    if e.get("ph") == "M":
        if e.get("name") not in ("process_name", "thread_name") or e.get("pid") != rank:
            fail(f"bad metadata event {e}")
        continue
    if e.get("ph") != "X":
        fail(f"event not a complete (X) event: {e}")
    for k, ty in (("name", str), ("cat", str), ("ts", (int, float)), ("dur", (int, float)), ("pid", int), ("tid", int), ("args", dict)):
        if not isinstance(e.get(k), ty):
            fail(f"event without a {k}: {e}")
    if e["ts"] < 0 or e["dur"] < 0 or e["pid"] != rank or e["tid"] not in (0, 1, 2):
        fail(f"bad ts/dur/pid/tid: {e}")
    xs.append(e)
comp = [e for e in xs if e["tid"] == 0]
comm = [e for e in xs if e["tid"] == 1]
host = [e for e in xs if e["tid"] == 2]
if not comp or not comm or not host:
    fail(f"tracks: {len(comp)} compute, {len(comm)} comm, {len(host)} host events")
steps = sorted(int(e["name"].split()[1]) for e in comp if e["cat"] == "step")
if steps != list(range(a, b + 1)):
    fail(f"step events {steps}, want {a}..{b}")
if not any(e["name"] == "optimizer" for e in host) or not any(e["name"] == "loss read" for e in host):
    fail("host track without optimizer / loss read")
# one all_gather per gather the metrics report, over the window's steps
rows = [json.loads(l) for l in open(metrics)]
gathers = sum(r["fsdp/gathers"] for r in rows if "fsdp/gathers" in r and a <= r["step"] <= b)
ag = [e for e in comm if e["name"].startswith("all_gather unit ")]
if len(ag) != gathers:
    fail(f"{len(ag)} all_gather events, metrics report {gathers} gathers in steps {a}..{b}")
units = {e["args"]["unit"] for e in ag}
rs = {}
for e in comm:
    if e["name"].startswith("reduce_scatter unit "):
        rs[e["args"]["unit"]] = rs.get(e["args"]["unit"], 0) + 1
    if not re.fullmatch(r"(all_gather|reduce_scatter|all_reduce) unit (\d+) \(.+\)", e["name"]) or int(e["name"].split()[2]) != e["args"]["unit"]:
        fail(f"comm event not named with its unit: {e['name']}")
nsteps = b - a + 1
if set(rs) != units or any(n != nsteps * micro for n in rs.values()):
    fail(f"reductions per unit {rs}, want {nsteps * micro} for each of units {sorted(units)}")
# nesting on the compute track: each event inside the one open around it
stack = []
for e in sorted(comp, key=lambda e: (e["ts"], -e["dur"])):
    while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - EPS and not (e["dur"] == 0 and e["ts"] < stack[-1]["ts"] + stack[-1]["dur"]):
        stack.pop()
    if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + EPS:
        fail(f"compute event {e['name']} [{e['ts']}, +{e['dur']}] overlaps {stack[-1]['name']} [{stack[-1]['ts']}, +{stack[-1]['dur']}] without nesting")
    if e["cat"] != "step" and not stack:
        fail(f"compute event {e['name']} at {e['ts']} outside every step")
    stack.append(e)
# each gather ends before the compute stream first has the unit (forward mark) after it
marks = sorted((e for e in comp if e["cat"] == "unit"), key=lambda e: e["ts"])
checked = 0
for g in ag:
    u, end = g["args"]["unit"], g["ts"] + g["dur"]
    after = [m for m in marks if m["args"].get("unit") == u and m["ts"] + EPS >= g["ts"]]
    if not after:
        fail(f"{g['name']} at {g['ts']}: no compute use of the unit after it")
    if after[0]["ts"] + EPS < end:
        fail(f"{g['name']} ends at {end}, after {after[0]['name']} begins at {after[0]['ts']}")
    checked += 1
print(f"{path}: {len(xs)} events ({len(comp)} compute, {len(comm)} comm, {len(host)} host); {len(ag)} all-gathers = "
      f"metrics; {sum(rs.values())} reductions over {len(units)} units; nesting and gather-before-use hold")

#!/usr/bin/python3
"""bench/e2e: statecache end to end on a fixed agentic workload, and
checkpoint placement on every workload shape.

    /usr/bin/python3 bench/e2e/run.py [--build build] [--out build/e2e]
    bench/e2e/run.py --quick           (a tiny configuration: the smoke test)

One command (bench/e2e/README.md says how to read what it prints):

 1. generates a fixed workload with bench/workload/gen_workload.py (seed 1,
    100 agent sessions, short replies: --output-median 16);
 2. per pool size (--pools, default 20, 40 and 256 slots: where this
    workload's hit ratio at concurrency 16 is poor, middling and saturated)
    starts a statecached of its own (a Unix socket in a temporary directory,
    ready on --ready_fd, metrics on as deployed) and runs statecache-loadgen
    --json against it at concurrency 1, 4 and 16 for each policy
    (statecache, prompt-end, none); each loadgen run also replays the same
    workload through the daemon's core in-process;
 3. prints ONE table: per pool size, concurrency and policy, the hit ratio,
    the prefill tokens saved (and their share of the prompt tokens), the
    checkpoint fates, the daemon's step p50/p99, the in-process p50 and the
    daemon / in-process p50 ratio; and a check line: the daemon's hit ratio
    equals the in-process core's in every row (exit status 3 if not); then
    the host tier: the statecache policy at the highest concurrency per
    pool on a daemon with state memory, the tier off, 1x and 4x the pool;
 4. drives the same workload through the Python package: the loadgen's run
    at concurrency 4 (policy statecache, the middle pool) is recorded
    (--record), then replayed on a fresh daemon each through the C++ client
    (statecache-loadgen --replay) and through `statecache` (replay.py:
    Session.step(), the packed form), every result checked against the
    record; prints the step p50/p99 of the loadgen's run, the C++ replay and
    the Python replay, and Python / C++. And the issue's target: a
    256-operation pass (rpc_bench's pass shape, python_step_bench's port of
    it), the same sequence of them through both clients (the C++ client
    back to back and again waiting before each Step as long as Python takes
    to build its pass; the Python package; gRPC Python's call alone),
    medians of --reps interleaved runs, each on a fresh daemon: Python /
    C++ should be <= 2 (p50); and where Python's time goes;
 5. runs the chart's in-process sweep (--sweep pool sizes, no daemon);
 6. checkpoint placement per workload shape (SHAPES: agentic, fan-out,
    long-replies, mix, each cut down to seconds per run, at three pools
    poor, middling and saturated for it; --shapes picks): at concurrency 16
    every loadgen policy (SHAPE_POLICIES, then any other statecache-loadgen
    lists; --shape-policies names them instead), each on a daemon of its
    own and in-process, and statecache again with a host tier 4x the pool
    (--in_process=false), two runs at a time; prints the prefill tokens
    each saves, the best baseline (none, prompt-end, junction, every-block)
    and each other policy's ratio to it, and a check line: daemon and
    in-process core decided identically in every run (exit status 3 if not);
 7. writes, to --out: table.txt (everything printed), table.json (every
    figure, the loadgen's and the replays' JSON), hit_ratio.png (the hit
    ratio against pool size, one line per policy, at concurrency 16 and 4:
    the table's pool sizes measured against the daemon, and in between
    through the core in-process) and shape_<name>.png per shape (tokens
    saved per policy at its pools, grouped bars).

Runs in about 3-3.5 minutes on the 2-core development VM (the shapes'
72 loadgen runs 87-98 s of it); --quick in ~20 s. Exit status: 0;
1 a run failed; 2 usage or missing binaries; 3 a hit ratio, a decision or
a replayed result differed.

Standard library, numpy-free; matplotlib for the charts (Agg); the Python
package from --build's python/ directory.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.normpath(os.path.join(_HERE, os.pardir, os.pardir))

POLICIES = ("statecache", "prompt-end", "none")
# The workload: gen_workload.py's defaults but for these (100 sessions of
# which 44 sub-agents, 643 requests, 5.2M prompt tokens; replies of median
# 16 tokens, tool calls, keep the decode-only passes, which dominate the
# pass count at concurrency 1, few enough for the time budget).
WORKLOAD = ["--seed=1", "--sessions=100", "--output-median=16"]
QUICK_WORKLOAD = ["--seed=1", "--sessions=12", "--agent-types=2",
                  "--max-prompt-tokens=8192", "--system-max-tokens=2048",
                  "--output-median=8", "--output-max=64"]
DAEMON_FLAGS = ["--metrics_address=127.0.0.1:0"]

# Checkpoint placement per workload shape (section 6). The baselines mirror
# the engines' own hybrid prefix caches (bench/loadgen/README.md); the
# policies run are these, in the table's order, then any other policy
# statecache-loadgen lists (loadgen_policies()), unless --shape-policies
# names them. A new policy needs no change here to be run; add it to
# SHAPE_POLICIES to fix its column's place, to BASELINES to make it one.
BASELINES = ("none", "prompt-end", "junction", "every-block")
SHAPE_POLICIES = BASELINES + ("ladder", "statecache")
# Daemon flags a policy's runs add: statecache's placement is the advice its
# session asks for and the daemon's second-chance eviction; the baselines
# keep the reference's LRU, as the engines' own prefix caches do.
POLICY_DAEMON_FLAGS = {"statecache": ["--eviction=second-chance"]}
TIER_POLICIES = ("statecache",)  # also run with the host tier on
SHAPE_TIER_FACTOR = 4  # that tier's room: this many slot images per slot
SHAPE_CONCURRENCY = 16
# Per shape: gen_workload.py's arguments and three pool sizes, poor,
# middling and saturated for statecache at SHAPE_CONCURRENCY on that
# workload. The workloads are cut down from the generator's defaults so
# that each run against a daemon takes seconds (every decoded token is a
# pass); bench/e2e/README.md says how, and why these pools.
SHAPES = (
    ("agentic", WORKLOAD, (20, 40, 256)),
    ("fan-out", ["--shape=fan-out", "--seed=1"], (20, 48, 256)),
    ("long-replies", ["--shape=long-replies", "--seed=1", "--sessions=32",
                      "--reply-min-tokens=250", "--reply-max-tokens=2000",
                      "--max-prompt-tokens=16384"], (20, 32, 256)),
    ("mix", ["--shape=mix", "--seed=1", "--sessions=150",
             "--output-median=16", "--reply-min-tokens=250",
             "--reply-max-tokens=2000", "--max-prompt-tokens=16384"],
     (16, 40, 256)),
)
QUICK_SHAPES = (
    ("agentic", QUICK_WORKLOAD, (8, 16, 64)),
    ("fan-out", ["--shape=fan-out", "--seed=1", "--sessions=24",
                 "--prefixes=3", "--output-median=8", "--output-max=64"],
     (8, 16, 64)),
    ("long-replies", ["--shape=long-replies", "--seed=1", "--sessions=8",
                      "--system-max-tokens=1024", "--reply-min-tokens=32",
                      "--reply-max-tokens=128", "--max-prompt-tokens=4096",
                      "--max-turns=6"], (8, 16, 64)),
    ("mix", ["--shape=mix", "--seed=1", "--sessions=12",
             "--system-max-tokens=1024", "--output-median=8",
             "--output-max=64", "--reply-min-tokens=32",
             "--reply-max-tokens=128", "--max-prompt-tokens=4096",
             "--max-turns=6", "--fanout-burst=4"], (8, 16, 64)),
)


class Failure(Exception):
    """A step of the benchmark failed (the message says which and why)."""


class Out:
    """Prints and keeps every line, for table.txt."""

    def __init__(self):
        self.lines = []

    def __call__(self, line=""):
        print(line, flush=True)
        self.lines.append(line)


def parse_list(text, kind=int):
    return [kind(x) for x in text.split(",") if x]


def loadgen(binary, args, what):
    """Runs statecache-loadgen with `args` (plus --json); returns (exit
    code, its JSON object). Exit 3 (daemon and core disagree) still prints
    the object; anything else not 0 raises Failure."""
    proc = subprocess.run([binary, "--json"] + args, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode not in (0, 3) or not proc.stdout.strip():
        raise Failure("%s: statecache-loadgen exited %d\n%s" % (
            what, proc.returncode, proc.stderr.strip()))
    return proc.returncode, json.loads(proc.stdout)


def workload_summary(path):
    """The header's totals plus sub-agents and the prompt length range."""
    prompts, subagents = [], set()
    with open(path) as f:
        header = json.loads(f.readline())
        for line in f:
            r = json.loads(line)
            prompts.append(r["prompt_tokens"])
            if r["parent"] is not None:
                subagents.add(r["session"])
    prompts.sort()
    return {"sessions": header["sessions"], "subagents": len(subagents),
            "requests": header["requests"],
            "prompt_tokens": header["prompt_tokens"],
            "output_tokens": header["output_tokens"],
            "prompt_min": prompts[0], "prompt_median":
            prompts[len(prompts) // 2], "prompt_max": prompts[-1],
            "params": header["params"]}


# ------------------------------------------------------------ the table

def table_rows(runs):
    """One dict per loadgen run, the table's figures."""
    rows = []
    for r in runs:
        d, p = r["report"]["daemon"], r["report"]["in_process"]
        rows.append({
            "pool": r["pool"], "concurrency": r["concurrency"],
            "policy": r["policy"],
            "hit_ratio": d["hit_ratio"],
            "in_process_hit_ratio": p["hit_ratio"],
            "daemon_stats_hit_ratio": d["daemon_hit_ratio"],
            "saved": d["tokens"]["resumed"],
            "saved_share": d["tokens"]["saved_share"],
            "prompt_tokens": d["tokens"]["prompt"],
            "fates": {fate: d["daemon_counters"]["checkpoints_" + fate]
                      for fate in ("kept", "evicted", "orphaned", "dropped")},
            "passes": d["passes"],
            "p50": d["step_latency_us"]["p50"],
            "p99": d["step_latency_us"]["p99"],
            "in_process_p50": p["step_latency_us"]["p50"],
            "latency_ratio_p50": r["report"]["latency_ratio"]["p50"],
            "identical_hit_ratio": r["report"]["identical"]["hit_ratio"],
            "identical_decisions": r["report"]["identical"]["decisions"],
            "wall_seconds": d["wall_seconds"],
        })
    return rows


def print_table(out, rows):
    head = ("%5s %4s  %-10s %9s %12s %6s  %6s %7s %8s %7s  %7s %8s %8s %7s"
            % ("slots", "conc", "policy", "hit ratio", "tokens saved",
               "saved", "kept", "evicted", "orphaned", "dropped",
               "p50 us", "p99 us", "core p50", "ratio"))
    out(head)
    out("-" * len(head))
    last = None
    for r in rows:
        if last is not None and (r["pool"], r["concurrency"]) != last:
            out("")
        last = (r["pool"], r["concurrency"])
        f = r["fates"]
        out("%5d %4d  %-10s %9.4f %12s %6.3f  %6d %7d %8d %7d  %7.0f %8.0f "
            "%8.2f %7.0f" % (
                r["pool"], r["concurrency"], r["policy"], r["hit_ratio"],
                "{:,}".format(r["saved"]), r["saved_share"], f["kept"],
                f["evicted"], f["orphaned"], f["dropped"], r["p50"],
                r["p99"], r["in_process_p50"], r["latency_ratio_p50"]))


# ------------------------------------------------------------ 256-op passes

class _OpRecorder:
    """Takes python_step_bench.Scheduler's builder calls and keeps them as
    record-format operations (copying the hash lists it mutates later)."""

    def __init__(self):
        self.ops = []

    def __len__(self):
        return len(self.ops)

    def begin_pass(self):
        self.ops.append({"begin_pass": {}})
        return self

    def release(self, request_id):
        self.ops.append({"release": {"request_id": request_id}})
        return self

    def consume_fork(self, request_id):
        self.ops.append({"consume_fork": {"request_id": request_id}})
        return self

    def checkpoint(self, request_id, boundary_blocks, hash, anchor_pos=0):
        self.ops.append({"checkpoint": {
            "request_id": request_id, "boundary_blocks": boundary_blocks,
            "hash": hash, "anchor_pos": anchor_pos}})
        return self

    def admit(self, request_id, width, num_tokens, anchor_pos=0,
              block_hashes=(), kv_hit_blocks=0):
        self.ops.append({"admit": {
            "request_id": request_id, "width": width,
            "num_tokens": num_tokens, "anchor_pos": anchor_pos,
            "block_hashes": list(block_hashes),
            "kv_hit_blocks": kv_hit_blocks}})
        return self

    def resumable_hit(self, num_tokens, block_hashes=(), kv_hit_blocks=0,
                      assume_checkpointed=False):
        self.ops.append({"resumable_hit": {
            "num_tokens": num_tokens, "block_hashes": list(block_hashes),
            "kv_hit_blocks": kv_hit_blocks,
            "assume_checkpointed": assume_checkpointed}})
        return self


def write_256_passes(path, passes, num_slots, transfer, block_size):
    """`passes` passes of 256 operations, rpc_bench's steady-state
    scheduler pass as bench/python_step_bench.py ports it (begin_pass,
    releases, a consume_fork and a checkpoint per running request,
    admissions resuming earlier turns, resumable_hit queries filling the
    rest), written as a record without results."""
    sys.path.insert(0, os.path.join(_ROOT, "bench"))
    import python_step_bench
    sched = python_step_bench.Scheduler(256, 7)
    header = {"format": "statecache-passes", "version": 1,
              "source": "bench/e2e/run.py (python_step_bench.Scheduler)",
              "identity": {"model_id": "bench", "hash_block_size": block_size,
                           "hash_namespace": "", "num_spec": 0},
              "pool": {"num_slots": num_slots, "transfer": transfer,
                       "max_operations_per_step": 4096},
              "run": {"ops": 256, "seed": 7}}
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n")
        for i in range(passes):
            ops = sched.build(_OpRecorder()).ops
            f.write(json.dumps({"pass": i, "ops": ops}) + "\n")


def python_breakdown(address, n=300):
    """python_step_bench's breakdown of its 256-op pass through the
    package, in-process: build, encode (send()'s bytes) and decode
    (PackedResults to dataclasses), p50s in us; None if it fails."""
    sys.path.insert(0, os.path.join(_ROOT, "bench"))
    import python_step_bench
    import statecache
    try:
        with statecache.Client.connect(address) as client:
            return python_step_bench.breakdown(client, n)
    except (statecache.Error, AttributeError, TypeError) as e:
        print("run.py: warning: no breakdown (%s)" % e, file=sys.stderr)
        return None


# ------------------------------------------------------------ the chart

def write_chart(path, sweep, daemon_rows, pools, concurrencies):
    """Hit ratio against pool size, one line per policy and concurrency
    (the in-process sweep), the daemon-measured points marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colours = {"statecache": "tab:blue", "prompt-end": "tab:orange",
               "none": "tab:grey"}
    styles = {concurrencies[-1]: "-", concurrencies[0]: ":"}
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for conc in sorted(styles, reverse=True):
        for policy in POLICIES:
            pts = sorted((p, h) for (pol, c, p), h in sweep.items()
                         if pol == policy and c == conc)
            if not pts:
                continue
            ax.plot([p for p, _ in pts], [h for _, h in pts],
                    styles[conc], color=colours[policy],
                    label="%s, concurrency %d" % (policy, conc))
            measured = [(r["pool"], r["hit_ratio"]) for r in daemon_rows
                        if r["policy"] == policy and r["concurrency"] == conc]
            ax.plot([p for p, _ in measured], [h for _, h in measured], "o",
                    color=colours[policy], markersize=6)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(p for (_, _, p) in sweep) | set(pools)))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("pool size (slots)")
    ax.set_ylabel("hit ratio (prefill tokens resumed / asked for)")
    ax.set_title("statecache on the e2e agentic workload: hit ratio vs pool"
                 " size\n(lines: in-process sweep; dots: against the daemon)",
                 fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ------------------------------------------------------------ main

# A small state layout for the host tier's runs (the tier needs state
# memory; the loadgen writes no bytes, so its size only sets the copies').
TIER_LAYOUT = {"format": "statecache-layout/v1", "name": "e2e-tier",
               "num_layers": 4,
               "tensors": [{"name": "conv", "dtype": "bf16",
                            "shape": [4, 256]},
                           {"name": "ssm", "dtype": "f32",
                            "shape": [8, 32, 32]}]}
TIER_FACTORS = ((0, "off"), (1, "1x"), (4, "4x"))


def write_tier_layout(tmp):
    """TIER_LAYOUT as a --layout file in `tmp`; returns its path."""
    layout = os.path.join(tmp, "tier-layout.json")
    with open(layout, "w") as f:
        json.dump(TIER_LAYOUT, f)
    return layout


def tier_run(Daemon, sd, lg, workload, layout, tmp, pool,  # noqa: N803
             factor, concurrency, loadgen_flags, name, policy="statecache"):
    """One loadgen run of `policy` (--in_process=false) on a daemon of its
    own with state memory (`layout`) and a host tier of `factor` times the
    pool's slot images (0: off); returns its row (the tier table's figures,
    the loadgen's JSON report under "report")."""
    import urllib.request

    import statecache
    flags = (["--num_slots=%d" % pool, "--layout=" + layout] + DAEMON_FLAGS
             + POLICY_DAEMON_FLAGS.get(policy, []))
    with Daemon(sd, flags, tmp, name=name) as d:
        with statecache.Client.connect(d.address) as client:
            image = client.admin.stats().bytes_per_slot
            if factor:
                client.admin.resize(host_tier_bytes=factor * pool * image)
            _, report = loadgen(
                lg, ["--workload=" + workload, "--address=" + d.address,
                     "--policy=" + policy, "--in_process=false",
                     "--concurrency=%d" % concurrency] + loadgen_flags,
                "%s (%s, host tier %dx, pool %d)" % (name, policy, factor,
                                                      pool))
            stats = client.admin.stats()
        port = re.search(r"metrics on http://\S+:(\d+)/", d.log())[1]
        text = urllib.request.urlopen(
            "http://127.0.0.1:%s/metrics" % port).read().decode()
    seconds = {}
    for reason in ("demotion", "promotion"):
        m = re.search(r'^statecache_copy_seconds_total\{reason="%s"\}'
                      r" (\S+)$" % reason, text, re.M)
        seconds[reason] = float(m[1]) if m else 0.0
    r = report["daemon"]
    return {
        "pool": pool, "tier_slots": factor * pool, "policy": policy,
        "hit_ratio": r["hit_ratio"],
        "saved": r["tokens"]["resumed"],
        "saved_share": r["tokens"]["saved_share"],
        "passes": r["passes"],
        "resumes_tier": stats.resumes_tier,
        "demotions": stats.host_tier_demotions,
        "demote_us_per_pass": 1e6 * seconds["demotion"] / max(1, r["passes"]),
        "promote_us_per_pass": 1e6 * seconds["promotion"]
        / max(1, r["passes"]),
        "p50": r["step_latency_us"]["p50"],
        "report": report,
    }


def tier_runs(Daemon, sd, lg, workload, tmp, pools, concurrency,  # noqa: N803
              loadgen_flags):
    """The statecache policy at `concurrency` per pool size with the host
    tier off, the size of the pool and four times it, each on a daemon of
    its own with state memory; returns one row per run."""
    layout = write_tier_layout(tmp)
    rows = []
    for pool in pools:
        for factor, name in TIER_FACTORS:
            row = tier_run(Daemon, sd, lg, workload, layout, tmp, pool,
                           factor, concurrency, loadgen_flags,
                           "tier%d-%s" % (pool, name))
            del row["report"]
            row["tier"] = name
            rows.append(row)
    return rows


def print_tier_table(out, rows):
    head = ("%5s %5s %9s %12s %6s %8s %9s %10s %11s %7s %6s" % (
        "slots", "tier", "hit ratio", "tokens saved", "saved", "from tier",
        "demoted", "demote us", "promote us", "p50 us", "p50 x"))
    out(head)
    out("-" * len(head))
    base = {}
    for r in rows:
        if r["tier"] == "off":
            base[r["pool"]] = r["p50"]
            if len(base) > 1:
                out("")
        out("%5d %5s %9.4f %12s %6.3f %8d %9d %10.2f %11.2f %7.0f %6.2f" % (
            r["pool"], r["tier"], r["hit_ratio"], "{:,}".format(r["saved"]),
            r["saved_share"], r["resumes_tier"], r["demotions"],
            r["demote_us_per_pass"], r["promote_us_per_pass"], r["p50"],
            r["p50"] / base[r["pool"]] if base.get(r["pool"]) else 0.0))


# ------------------------------------------------------------ shapes

def loadgen_policies(binary):
    """The policy names statecache-loadgen lists: its usage line's
    --policy=a|b|... and the names it gives when refusing an unknown one
    (each in the order given, once); [] if it lists none."""
    names = []
    usage = subprocess.run([binary, "--help"], capture_output=True,
                           text=True, timeout=60)
    m = re.search(r"--policy=([\w|-]+)", usage.stdout + usage.stderr)
    if m:
        names += m[1].split("|")
    refused = subprocess.run([binary, "--policy=?", "--daemon=false",
                              "--workload=" + os.devnull],
                             capture_output=True, text=True, timeout=60)
    m = re.search(r"unknown policy '\?' \(([^)]*)\)", refused.stderr)
    if m:
        names += re.split(r",\s*|\s+or\s+", m[1].strip())
    listed = []
    for name in names:
        if re.fullmatch(r"[a-z][a-z0-9_-]*", name) and name not in listed:
            listed.append(name)
    return listed


def shape_run(Daemon, sd, lg, workload, tmp, shape, pool,  # noqa: N803
              policy, loadgen_flags):
    """One loadgen run (daemon, then in-process) of `policy` on a daemon of
    its own; returns its report and exit code."""
    with Daemon(sd, ["--num_slots=%d" % pool] + DAEMON_FLAGS
                + POLICY_DAEMON_FLAGS.get(policy, []), tmp,
                name="shape-%s-%d-%s" % (shape, pool, policy)) as d:
        code, report = loadgen(
            lg, ["--workload=" + workload, "--address=" + d.address,
                 "--policy=" + policy,
                 "--concurrency=%d" % SHAPE_CONCURRENCY] + loadgen_flags,
            "%s, pool %d, %s" % (shape, pool, policy))
    return {"exit": code, "report": report}


def shape_runs(Daemon, sd, lg, tmp, shapes, policies,  # noqa: N803
               tier_policies, loadgen_flags):
    """Section 6: per shape a workload; per shape, pool and policy a loadgen
    run on a daemon of its own, and per tier policy a run with the host
    tier on (SHAPE_TIER_FACTOR times the pool), two runs at a time (each
    its own daemon, and the figures compared are deterministic). Returns
    one dict per shape: its workload and one row per pool."""
    layout = write_tier_layout(tmp)
    workloads = {}
    for shape, gen_args, _ in shapes:
        workloads[shape] = os.path.join(tmp, "shape-%s.jsonl" % shape)
        subprocess.run([sys.executable,
                        os.path.join(_ROOT, "bench", "workload",
                                     "gen_workload.py"),
                        "-o", workloads[shape]] + gen_args,
                       check=True, timeout=300)
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool_exec:
        for shape, _, pools in shapes:
            for pool in pools:
                for policy in policies:
                    jobs[(shape, pool, policy)] = pool_exec.submit(
                        shape_run, Daemon, sd, lg, workloads[shape], tmp,
                        shape, pool, policy, loadgen_flags)
                for policy in tier_policies:
                    jobs[(shape, pool, policy + "+tier")] = pool_exec.submit(
                        tier_run, Daemon, sd, lg, workloads[shape], layout,
                        tmp, pool, SHAPE_TIER_FACTOR, SHAPE_CONCURRENCY,
                        loadgen_flags, "shape-%s-%d-%s-tier" % (
                            shape, pool, policy), policy)
        try:
            done = {key: job.result() for key, job in jobs.items()}
        except BaseException:
            pool_exec.shutdown(cancel_futures=True)
            raise
    result = []
    for shape, gen_args, pools in shapes:
        rows = []
        for pool in pools:
            runs = {p: done[(shape, pool, p)] for p in policies}
            tier = {p: done[(shape, pool, p + "+tier")]
                    for p in tier_policies}
            rows.append(shape_row(pool, runs, tier))
        result.append({"shape": shape, "workload_args": gen_args,
                       "workload": workload_summary(workloads[shape]),
                       "pools": list(pools), "rows": rows})
    return result


def shape_row(pool, runs, tier):
    """One pool of one shape: each policy's tokens saved, the tier runs',
    the best baseline and every other policy's ratio to it."""
    saved = {p: r["report"]["daemon"]["tokens"]["resumed"]
             for p, r in runs.items()}
    saved.update({p + "+tier": t["saved"] for p, t in tier.items()})
    baselines = [p for p in runs if p in BASELINES]
    best = max(baselines, key=lambda p: saved[p]) if baselines else None
    ratio = {}
    for p in saved:
        if p not in BASELINES and best is not None and saved[best] > 0:
            ratio[p] = saved[p] / saved[best]
    return {
        "pool": pool,
        "saved": saved,
        "asked": {p: r["report"]["daemon"]["tokens"]["asked"]
                  for p, r in runs.items()},
        "hit_ratio": {p: r["report"]["daemon"]["hit_ratio"]
                      for p, r in runs.items()},
        "identical": {p: r["exit"] == 0
                      and r["report"]["identical"]["hit_ratio"]
                      and r["report"]["identical"]["decisions"]
                      for p, r in runs.items()},
        "tier": {p: {k: v for k, v in t.items() if k != "report"}
                 for p, t in tier.items()},
        "best_baseline": best,
        "ratio_to_best": ratio,
        "reports": dict({p: r["report"] for p, r in runs.items()},
                        **{p + "+tier": t["report"]
                           for p, t in tier.items()}),
    }


def print_shapes_table(out, shapes, policies, tier_policies):
    """One row per shape and pool: tokens saved per policy (and tier
    policy), the best baseline, and each other policy's ratio to it."""
    columns = list(policies) + [p + "+tier" for p in tier_policies]
    ratios = [c for c in columns if c not in BASELINES]
    widths = [max(11, len(c)) for c in columns]
    rwidths = [max(6, len(c) + 2) for c in ratios]
    head = "%-12s %5s %11s  %s  %-11s  %s" % (
        "shape", "slots", "asked",
        " ".join("%*s" % (w, c) for w, c in zip(widths, columns)),
        "best", " ".join("%*s" % (w, c + " x") for w, c in
                         zip(rwidths, ratios)))
    out(head)
    out("-" * len(head))
    for s in shapes:
        for r in s["rows"]:
            out("%-12s %5d %11s  %s  %-11s  %s" % (
                s["shape"], r["pool"],
                "{:,}".format(max(r["asked"].values())),
                " ".join("%*s" % (w, "{:,}".format(r["saved"][c]))
                         for w, c in zip(widths, columns)),
                r["best_baseline"] or "-",
                " ".join("%*s" % (w, "%.3f" % r["ratio_to_best"][c]
                                  if c in r["ratio_to_best"] else "-")
                         for w, c in zip(rwidths, ratios))))


SHAPE_COLOURS = {"none": "tab:grey", "prompt-end": "tab:orange",
                 "junction": "tab:green", "every-block": "tab:red",
                 "statecache": "tab:blue"}


def write_shape_chart(path, shape, policies, tier_policies):
    """Tokens saved per policy (and tier policy) at the shape's pools,
    grouped bars; under each group, the ratios to the best baseline."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    columns = list(policies) + [p + "+tier" for p in tier_policies]
    others = iter(("tab:purple", "tab:brown", "tab:pink", "tab:olive",
                   "tab:cyan"))
    colours = {}
    for c in columns:
        base = c[:-len("+tier")] if c.endswith("+tier") else c
        if base not in colours:
            colours[base] = SHAPE_COLOURS.get(base) or next(others, "black")
        colours[c] = colours[base]
    rows = shape["rows"]
    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    width = 0.8 / len(columns)
    for i, c in enumerate(columns):
        xs = [g + (i - (len(columns) - 1) / 2) * width
              for g in range(len(rows))]
        ax.bar(xs, [r["saved"][c] / 1e3 for r in rows], width,
               color=colours[c], hatch="//" if c.endswith("+tier") else None,
               edgecolor="white", label=c)
    ax.hlines([max(r["asked"].values()) / 1e3 for r in rows],
              [g - 0.45 for g in range(len(rows))],
              [g + 0.45 for g in range(len(rows))], colors="black",
              linestyles="dashed", linewidth=1,
              label="asked (the KV cache's prefix hits)")
    labels = []
    for r in rows:
        text = "%d slots" % r["pool"]
        for c, v in r["ratio_to_best"].items():
            text += "\n%s / %s: %.2f" % (c, r["best_baseline"], v)
        labels.append(text)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("prefill tokens saved (thousands)")
    w = shape["workload"]
    ax.set_title("%s: tokens saved per checkpoint policy, concurrency %d\n"
                 "(%d requests, %s prompt tokens; +tier: host tier %dx the "
                 "pool)" % (shape["shape"], SHAPE_CONCURRENCY, w["requests"],
                            "{:,}".format(w["prompt_tokens"]),
                            SHAPE_TIER_FACTOR), fontsize=10)
    top = max(max(r["asked"].values()) for r in rows) / 1e3
    ax.set_ylim(0, 1.3 * top if top else 1)  # room for the legend above
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=4, loc="upper center")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(_ROOT, "build"),
                        help="the build tree (bin/, python/)")
    parser.add_argument("--out", help="where table.txt, table.json and "
                        "hit_ratio.png go (default BUILD/e2e)")
    parser.add_argument("--statecached", help="default BUILD/bin/statecached")
    parser.add_argument("--loadgen",
                        help="default BUILD/bin/statecache-loadgen")
    parser.add_argument("--pythonpath", help="where the statecache package "
                        "is (default BUILD/python)")
    parser.add_argument("--loadgen-flag", action="append", default=[],
                        help="another flag for every simulated loadgen run, "
                        "e.g. --loadgen-flag=--kv_blocks=2048 (repeatable)")
    parser.add_argument("--pools", default="20,40,256")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--python-pool", type=int,
                        help="the pool whose concurrency-4 statecache run "
                        "the Python package replays (default: the middle "
                        "of --pools)")
    parser.add_argument("--python-concurrency", type=int, default=4)
    parser.add_argument("--sweep", default="16,20,24,32,48,64,128,512",
                        help="pool sizes of the chart's in-process lines")
    parser.add_argument("--passes-256", type=int, default=400,
                        help="256-operation passes per run (50 warm-up)")
    parser.add_argument("--reps", type=int, default=3,
                        help="runs of each client on the 256-op passes")
    parser.add_argument("--shapes", default=",".join(s[0] for s in SHAPES),
                        help="the workload shapes of the checkpoint "
                        "placement section (empty: none)")
    parser.add_argument("--shape-policies",
                        help="the policies that section runs, passed to "
                        "statecache-loadgen as given (default: %s and any "
                        "other it lists)" % ",".join(SHAPE_POLICIES))
    parser.add_argument("--quick", action="store_true",
                        help="tiny workloads, pools 8,16,64, few 256-op "
                        "passes: the smoke test (~25 s)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (workload, "
                        "records, daemon logs) and say where")
    args = parser.parse_args()
    started = time.monotonic()

    workload_args = WORKLOAD
    shapes = SHAPES
    if args.quick:
        workload_args = QUICK_WORKLOAD
        shapes = QUICK_SHAPES
        if args.pools == "20,40,256":
            args.pools = "8,16,64"
        args.sweep = "12,32"
        args.passes_256 = 100
        args.reps = 1
    pools = parse_list(args.pools)
    concurrencies = parse_list(args.concurrency)
    policies = parse_list(args.policies, str)
    python_pool = args.python_pool or pools[len(pools) // 2]
    out_dir = args.out or os.path.join(args.build, "e2e")
    known = [s[0] for s in shapes]
    wanted = parse_list(args.shapes, str)
    if any(name not in known for name in wanted):
        parser.error("--shapes: one of %s" % ",".join(known))
    shapes = [s for s in shapes if s[0] in wanted]
    bad = [p for p in policies if p not in POLICIES]
    if bad or "statecache" not in policies or python_pool not in pools or (
            args.python_concurrency not in concurrencies):
        parser.error("unknown policy %s, or statecache, --python-pool or "
                     "--python-concurrency not among those run" % bad)

    sys.path.insert(0, args.pythonpath or os.path.join(args.build, "python"))
    try:
        import replay
        from daemon import Daemon, stop_all
    except ImportError as e:
        print("run.py: %s (build the package: cmake --build %s --target "
              "statecache_python)" % (e, args.build), file=sys.stderr)
        return 2
    binaries = {
        "statecached": args.statecached or os.path.join(
            args.build, "bin", "statecached"),
        "statecache-loadgen": args.loadgen or os.path.join(
            args.build, "bin", "statecache-loadgen")}
    for name in binaries:
        if not os.access(binaries[name], os.X_OK):
            print("run.py: no %s (cmake --build %s --target "
                  "statecache-loadgen)" % (binaries[name], args.build),
                  file=sys.stderr)
            return 2

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    tmp = tempfile.mkdtemp(prefix="statecache-e2e.")
    try:
        # Private copies: a build relinking build/bin mid-run changes nothing.
        for name, path in binaries.items():
            binaries[name] = shutil.copy2(path, os.path.join(tmp, name))
        return run(args, tmp, out_dir, binaries, workload_args, pools,
                   concurrencies, policies, shapes, python_pool, replay,
                   Daemon, started)
    except Failure as e:
        print("run.py: %s" % e, file=sys.stderr)
        return 1
    finally:
        stop_all()
        if args.keep:
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def run(args, tmp, out_dir, binaries, workload_args, pools, concurrencies,
        policies, shapes, python_pool, replay, Daemon, started):
    out = Out()
    lg = binaries["statecache-loadgen"]
    sd = binaries["statecached"]
    timings = {}

    # 1. The workload.
    t = time.monotonic()
    workload = os.path.join(tmp, "workload.jsonl")
    subprocess.run([sys.executable,
                    os.path.join(_ROOT, "bench", "workload",
                                 "gen_workload.py"), "-o", workload]
                   + workload_args, check=True, timeout=120)
    w = workload_summary(workload)
    timings["workload"] = time.monotonic() - t

    out("bench/e2e: statecache end to end (%s)" % time.strftime(
        "%Y-%m-%d %H:%M:%S"))
    out("workload: gen_workload.py %s: %d sessions (%d sub-agents), %d "
        "requests, %s prompt tokens (%d..%d per prompt, median %d), %s "
        "output tokens" % (" ".join(workload_args), w["sessions"],
                           w["subagents"], w["requests"],
                           "{:,}".format(w["prompt_tokens"]),
                           w["prompt_min"], w["prompt_max"],
                           w["prompt_median"],
                           "{:,}".format(w["output_tokens"])))
    out("loadgen: its defaults (chunk 2048 tokens, batch 8192, ladder 16 "
        "blocks, KV cache 8192 blocks)%s; daemon per pool: %s, transfer fork"
        % ("".join(", then " + f for f in args.loadgen_flag),
           " ".join(DAEMON_FLAGS)))
    out("")

    # 2. The loadgen runs, a daemon per pool size.
    t = time.monotonic()
    runs = []
    record = os.path.join(tmp, "passes.jsonl")
    for pool in pools:
        with Daemon(sd, ["--num_slots=%d" % pool] + DAEMON_FLAGS, tmp,
                    name="pool%d" % pool) as daemon:
            for conc in concurrencies:
                for policy in policies:
                    extra = []
                    if (pool, conc, policy) == (
                            python_pool, args.python_concurrency,
                            "statecache"):
                        extra = ["--record=" + record]
                    code, report = loadgen(
                        lg, ["--workload=" + workload,
                             "--address=" + daemon.address,
                             "--policy=" + policy,
                             "--concurrency=%d" % conc]
                        + args.loadgen_flag + extra,
                        "pool %d, concurrency %d, %s" % (pool, conc, policy))
                    runs.append({"pool": pool, "concurrency": conc,
                                 "policy": policy, "exit": code,
                                 "report": report})
    timings["loadgen"] = time.monotonic() - t
    rows = table_rows(runs)
    out("Hit ratio = prefill tokens resumed / asked for (the KV cache's "
        "prefix hits); saved = tokens resumed, and their share of all prompt "
        "tokens (%s); fates = GetStats' checkpoint counters over the run; "
        "p50/p99 = the daemon's Step round trip through the C++ client; core "
        "p50 = the same passes through StateCache::Step in-process; ratio = "
        "p50 daemon / core." % "{:,}".format(w["prompt_tokens"]))
    out("")
    print_table(out, rows)
    identical = [r for r in rows if r["identical_hit_ratio"]
                 and r["hit_ratio"] == r["in_process_hit_ratio"]
                 and abs(r["daemon_stats_hit_ratio"] - r["hit_ratio"]) < 1e-12]
    same_decisions = [r for r in rows if r["identical_decisions"]]
    check_ok = len(identical) == len(rows) and len(same_decisions) == len(rows)
    out("")
    out("check: daemon hit ratio == in-process core's (and == GetStats' "
        "resume counters) in %d/%d rows; identical decisions (digest of every "
        "answer) in %d/%d: %s" % (len(identical), len(rows),
                                  len(same_decisions), len(rows),
                                  "OK" if check_ok else "FAILED"))
    for r in rows:
        if r not in identical or r not in same_decisions:
            out("  differs: pool %d, concurrency %d, %s: daemon %.6f, "
                "in-process %.6f, GetStats %.6f" % (
                    r["pool"], r["concurrency"], r["policy"], r["hit_ratio"],
                    r["in_process_hit_ratio"], r["daemon_stats_hit_ratio"]))
    out("")

    # 2b. The host tier: the statecache policy at the highest concurrency,
    # per pool, with the tier off, 1x and 4x the pool.
    t = time.monotonic()
    tier_conc = max(concurrencies)
    tier = tier_runs(Daemon, sd, lg, workload, tmp, pools, tier_conc,
                     args.loadgen_flag)
    timings["tier"] = time.monotonic() - t
    out("Host tier (--host_tier_bytes): policy statecache, concurrency %d, "
        "a daemon with state memory (%s) per row; tier = its room in slot "
        "images against the pool; from tier = admissions resumed from it; "
        "demote / promote us = the daemon's copy time into and out of it "
        "per pass; p50 x = against the tier-off row of the same pool."
        % (tier_conc, TIER_LAYOUT["name"]))
    out("")
    print_tier_table(out, tier)
    out("")

    # 3. The recorded run through the C++ client and the Python package,
    # each on a fresh daemon of the same pool.
    t = time.monotonic()
    source = next(r for r in rows if (r["pool"], r["concurrency"],
                                      r["policy"]) == (
        python_pool, args.python_concurrency, "statecache"))
    rec = replay.load(record)
    with Daemon(sd, ["--num_slots=%d" % python_pool] + DAEMON_FLAGS, tmp,
                name="replay-cpp") as daemon:
        # Pass 0 is the run's clear_index, which the loadgen does not time.
        code, cpp = loadgen(lg, ["--replay=" + record,
                                 "--replay_warmup=1",
                                 "--address=" + daemon.address],
                            "C++ replay")
        cpp = cpp["replay"]
    with Daemon(sd, ["--num_slots=%d" % python_pool] + DAEMON_FLAGS, tmp,
                name="replay-py") as daemon:
        py = replay.replay(daemon.address, rec, warmup=1)
    timings["replay"] = time.monotonic() - t
    replay_ok = cpp["mismatches"] == 0 and py["mismatches"] == 0
    # The largest passes of the sequence, the same ones both ways.
    sizes = [rec.operations(i) for i in range(1, len(rec.passes))]
    cut = sorted(sizes)[int(len(sizes) * 0.99)]
    big = [i for i in range(1, len(rec.passes)) if rec.operations(i) >= cut]
    big_cpp = replay.summary([cpp["step_us"][i] for i in big])
    big_py = replay.summary([py["step_us"][i] for i in big])

    # 4. 256-operation passes, the same sequence through both clients, each
    # run on a fresh daemon (rpc_bench's and python_step_bench's flags).
    t = time.monotonic()
    passes256 = os.path.join(tmp, "passes256.jsonl")
    recorded256 = os.path.join(tmp, "passes256.recorded.jsonl")
    write_256_passes(passes256, args.passes_256, 4096,
                     rec.pool["transfer"], rec.identity["hash_block_size"])
    flags256 = ["--num_slots=4096", "--model_id=bench"] + DAEMON_FLAGS
    reps = []
    rec256 = None
    parts = None
    for rep in range(args.reps):
        with Daemon(sd, flags256, tmp, name="p256-cpp-%d" % rep) as daemon:
            # The first run records the results the later runs must repeat.
            flags = ["--replay=" + (recorded256 if rep else passes256),
                     "--replay_warmup=50", "--address=" + daemon.address]
            if rep == 0:
                flags.append("--record=" + recorded256)
            c = loadgen(lg, flags, "C++ replay of the 256-op passes")[1]
        if rec256 is None:
            rec256 = replay.load(recorded256)
        with Daemon(sd, flags256, tmp, name="p256-py-%d" % rep) as daemon:
            p = replay.replay(daemon.address, rec256, warmup=50)
            if rep == args.reps - 1:
                parts = python_breakdown(daemon.address)
        with Daemon(sd, flags256, tmp, name="p256-raw-%d" % rep) as daemon:
            raw = replay.replay(daemon.address, rec256, warmup=50, raw=True)
        # The C++ client again, waiting before each Step as long as Python
        # took to build its pass: the same idle gap before every call.
        gap = int(round(p["build_latency_us"]["p50"]))
        with Daemon(sd, flags256, tmp, name="p256-gap-%d" % rep) as daemon:
            g = loadgen(lg, ["--replay=" + recorded256, "--replay_warmup=50",
                             "--replay_gap_us=%d" % gap,
                             "--address=" + daemon.address],
                        "C++ replay of the 256-op passes, gapped")[1]
        reps.append({"cpp": c["replay"], "python": p,
                     "cpp_gapped": g["replay"], "python_raw": raw})
    timings["passes256"] = time.monotonic() - t
    replay_ok = replay_ok and all(
        r[side]["mismatches"] == 0 for r in reps for side in r)

    def median_of(side, key):
        return statistics.median(r[side]["step_latency_us"][key]
                                 for r in reps)

    def ratio_of(side, key):
        return statistics.median(r["python"]["step_latency_us"][key]
                                 / r[side]["step_latency_us"][key]
                                 for r in reps)
    p256 = {side: {"p50": median_of(side, "p50"),
                   "p99": median_of(side, "p99")}
            for side in ("cpp", "python", "cpp_gapped", "python_raw")}
    p256["ratio"] = {"p50": ratio_of("cpp", "p50"),
                     "p99": ratio_of("cpp", "p99")}
    p256["ratio_gapped"] = {"p50": ratio_of("cpp_gapped", "p50"),
                            "p99": ratio_of("cpp_gapped", "p99")}
    build50 = statistics.median(r["python"]["build_latency_us"]["p50"]
                                for r in reps)

    out("Python package vs C++ client on the same passes: the loadgen's "
        "run at pool %d, concurrency %d, statecache (%s Steps, %s "
        "operations) recorded, then replayed on a fresh daemon each, every "
        "result checked against the record" % (
            python_pool, args.python_concurrency,
            "{:,}".format(cpp["timed"]), "{:,}".format(cpp["operations"])))
    out("")
    head = "%-40s %9s %9s" % ("client", "p50 us", "p99 us")
    out(head)
    out("-" * len(head))
    out("%-40s %9.1f %9.1f" % ("C++ loadgen (simulating between Steps)",
                               source["p50"], source["p99"]))
    cs, ps = cpp["step_latency_us"], py["step_latency_us"]
    out("%-40s %9.1f %9.1f" % ("C++ client, replayed", cs["p50"], cs["p99"]))
    out("%-40s %9.1f %9.1f" % ("Python package, replayed", ps["p50"],
                               ps["p99"]))
    out("%-40s %9.2f %9.2f" % ("Python / C++ replayed", ps["p50"] / cs["p50"],
                               ps["p99"] / cs["p99"]))
    out("%-40s %9.2f %9.2f" % ("Python / C++ loadgen",
                               ps["p50"] / source["p50"],
                               ps["p99"] / source["p99"]))
    out("largest 1%% of those passes (%d passes of %d..%d operations): C++ "
        "p50 %.1f us, Python p50 %.1f us, ratio %.2f" % (
            len(big), cut, max(sizes), big_cpp["p50"], big_py["p50"],
            big_py["p50"] / big_cpp["p50"]))
    out("results: C++ replay %d/%d passes as recorded, Python %d/%d; hit "
        "ratio (GetStats) loadgen %.4f, Python replay %.4f" % (
            cpp["passes_checked"] - cpp["mismatches"], cpp["passes_checked"],
            py["passes_checked"] - py["mismatches"], py["passes_checked"],
            source["daemon_stats_hit_ratio"], py["daemon_hit_ratio"]))
    for first in (cpp["first_mismatch"], py["first_mismatch"]):
        if first:
            out("  first difference: %s" % first)
    out("")
    out("256-operation pass (rpc_bench's steady-state pass shape, "
        "bench/python_step_bench.py's Scheduler: %d passes, the %d after 50 "
        "warm-up timed; each client on a fresh 4096-slot daemon, median of "
        "%d interleaved runs; building the pass is off the clock):" % (
            args.passes_256, reps[0]["cpp"]["timed"], args.reps))
    head = "  %-52s %9s %9s" % ("client", "p50 us", "p99 us")
    out(head)
    out("  " + "-" * (len(head) - 2))
    out("  %-52s %9.1f %9.1f" % ("C++ client (Client::Step), back to back",
                                 p256["cpp"]["p50"], p256["cpp"]["p99"]))
    out("  %-52s %9.1f %9.1f" % (
        "C++ client, %.0f us wait before each (Python's build)" % build50,
        p256["cpp_gapped"]["p50"], p256["cpp_gapped"]["p99"]))
    out("  %-52s %9.1f %9.1f" % ("Python package (Session.step().send())",
                                 p256["python"]["p50"],
                                 p256["python"]["p99"]))
    out("  %-52s %9.1f %9.1f" % (
        "Python, gRPC call alone (pre-encoded, not decoded)",
        p256["python_raw"]["p50"], p256["python_raw"]["p99"]))
    out("  %-52s %9.2f %9.2f" % ("Python / C++ back to back",
                                 p256["ratio"]["p50"], p256["ratio"]["p99"]))
    out("  %-52s %9.2f %9.2f" % ("Python / C++ with the same gap",
                                 p256["ratio_gapped"]["p50"],
                                 p256["ratio_gapped"]["p99"]))
    out("  target: Python <= 2x the C++ client's p50 for the same "
        "pass: %s back to back, %s with the same gap" % (
            "met" if p256["ratio"]["p50"] <= 2 else "NOT met",
            "met" if p256["ratio_gapped"]["p50"] <= 2 else "NOT met"))
    if parts:
        out("  where Python's time goes (in-process, off the wire, p50): "
            "build %.1f us (off the clock above), encode %.1f us, decode "
            "%.1f us of its %.1f; gRPC Python's call alone %.1f (%.2fx the "
            "C++ client's whole call)" % (
                parts["build_p50_us"], parts["encode_p50_us"],
                parts["decode_p50_us"], p256["python"]["p50"],
                p256["python_raw"]["p50"],
                p256["python_raw"]["p50"] / p256["cpp"]["p50"]))
    out("")

    # 5. The chart's in-process sweep (no daemon running: two at a time).
    t = time.monotonic()
    sweep_pools = sorted(set(parse_list(args.sweep)) | set(pools))
    chart_conc = [c for c in (args.python_concurrency, max(concurrencies))]
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool_exec:
        for policy in policies:
            for conc in sorted(set(chart_conc)):
                for n in sweep_pools:
                    if n < 1:
                        continue
                    jobs[(policy, conc, n)] = pool_exec.submit(
                        loadgen, lg, ["--workload=" + workload,
                                      "--daemon=false",
                                      "--num_slots=%d" % n,
                                      "--policy=" + policy,
                                      "--concurrency=%d" % conc]
                        + args.loadgen_flag,
                        "sweep %s %d %d" % (policy, conc, n))
    sweep = {k: f.result()[1]["in_process"]["hit_ratio"]
             for k, f in jobs.items()}
    timings["sweep"] = time.monotonic() - t
    sweep_agrees = all(sweep[(r["policy"], r["concurrency"], r["pool"])]
                       == r["hit_ratio"] for r in rows
                       if (r["policy"], r["concurrency"], r["pool"]) in sweep)

    # 6. Checkpoint placement per workload shape: every policy at three
    # pools per shape, a daemon per run, two at a time.
    t = time.monotonic()
    if args.shape_policies is not None:
        shape_policies = parse_list(args.shape_policies, str)
        listed = []
    else:
        listed = [p for p in loadgen_policies(lg) if p not in SHAPE_POLICIES]
        shape_policies = list(SHAPE_POLICIES) + listed
    tier_policies = [p for p in TIER_POLICIES if p in shape_policies]
    shape_results = shape_runs(Daemon, sd, lg, tmp, shapes, shape_policies,
                               tier_policies, args.loadgen_flag)
    timings["shapes"] = time.monotonic() - t
    shape_checked = [(s["shape"], r["pool"], p, ok) for s in shape_results
                     for r in s["rows"] for p, ok in r["identical"].items()]
    shapes_ok = all(ok for _, _, _, ok in shape_checked)
    if shapes:
        out("Checkpoint placement per workload shape: prefill tokens saved "
            "(resumed from a checkpoint) by each loadgen policy at "
            "concurrency %d, a daemon of its own per run (each also run "
            "in-process); %s+tier = the same policy on a daemon with state "
            "memory (%s) and a host tier %dx the pool, --in_process=false; "
            "best = the baseline (%s) that saves the most; x = tokens saved "
            "/ best's." % (SHAPE_CONCURRENCY, "/".join(tier_policies),
                           TIER_LAYOUT["name"], SHAPE_TIER_FACTOR,
                           ", ".join(p for p in shape_policies
                                     if p in BASELINES)))
        out("policies: %s%s" % (", ".join(shape_policies), "".join(
            "; %s as statecache-loadgen lists it" % p for p in listed)))
        for shape in shape_results:
            w = shape["workload"]
            out("  %-12s gen_workload.py %s: %d sessions, %d requests, %s "
                "prompt / %s output tokens; pools %s" % (
                    shape["shape"], " ".join(shape["workload_args"]),
                    w["sessions"], w["requests"],
                    "{:,}".format(w["prompt_tokens"]),
                    "{:,}".format(w["output_tokens"]),
                    "/".join(map(str, shape["pools"]))))
        out("")
        print_shapes_table(out, shape_results, shape_policies, tier_policies)
        out("")
        out("check: daemon == in-process core (hit ratio and the digest of "
            "every answer) in %d/%d shape runs: %s" % (
                sum(ok for _, _, _, ok in shape_checked), len(shape_checked),
                "OK" if shapes_ok else "FAILED"))
        for shape, pool, policy, ok in shape_checked:
            if not ok:
                out("  differs: %s, pool %d, %s" % (shape, pool, policy))
        out("")

    os.makedirs(out_dir, exist_ok=True)
    chart = os.path.join(out_dir, "hit_ratio.png")
    shape_charts = [os.path.join(out_dir, "shape_%s.png" % s["shape"])
                    for s in shape_results]
    try:
        write_chart(chart, sweep, rows, pools, sorted(set(chart_conc)))
        for path, shape in zip(shape_charts, shape_results):
            write_shape_chart(path, shape, shape_policies, tier_policies)
    except ImportError as e:
        chart = "none (%s: apt-get install python3-matplotlib)" % e
        shape_charts = []
    total = time.monotonic() - started
    out("chart: %s (hit ratio vs pool size at concurrency %s; lines: the "
        "in-process sweep over %s slots, which agrees with the daemon at "
        "the table's pools: %s)" % (
            chart, " and ".join(map(str, sorted(set(chart_conc)))),
            ",".join(map(str, sweep_pools)), "yes" if sweep_agrees else "NO"))
    if shape_charts:
        out("charts: %s (tokens saved per policy at each shape's pools)"
            % ", ".join(shape_charts))
    out("time: %.0f s in all (workload %.1f s, loadgen runs %.0f s, "
        "host tier %.0f s, replays %.0f s, 256-op passes %.0f s, sweep "
        "%.0f s, shapes %.0f s)" % (
            total, timings["workload"], timings["loadgen"], timings["tier"],
            timings["replay"], timings["passes256"], timings["sweep"],
            timings["shapes"]))

    result = {
        "workload": w,
        "workload_args": workload_args,
        "loadgen_flags": args.loadgen_flag,
        "daemon_flags": DAEMON_FLAGS,
        "rows": rows,
        "host_tier": tier,
        "check": {"hit_ratio_identical": len(identical),
                  "decisions_identical": len(same_decisions),
                  "rows": len(rows), "ok": check_ok},
        "python_vs_cpp": {
            "source": {"pool": python_pool,
                       "concurrency": args.python_concurrency,
                       "policy": "statecache",
                       "p50": source["p50"], "p99": source["p99"]},
            "cpp_replay": {k: v for k, v in cpp.items() if k != "step_us"},
            "python_replay": {k: v for k, v in py.items() if k != "step_us"},
            "largest_passes": {"min_operations": cut, "passes": len(big),
                               "cpp": big_cpp, "python": big_py},
        },
        "passes_256": dict(p256, passes=args.passes_256, warmup=50,
                           reps=args.reps, python_build_p50=build50,
                           python_breakdown=parts,
                           runs=[{side: {k: v for k, v in r[side].items()
                                         if k != "step_us"} for side in r}
                                 for r in reps]),
        "sweep": [{"policy": k[0], "concurrency": k[1], "pool": k[2],
                   "hit_ratio": v} for k, v in sorted(sweep.items())],
        "shapes": {"concurrency": SHAPE_CONCURRENCY,
                   "policies": shape_policies, "listed_by_loadgen": listed,
                   "baselines": [p for p in shape_policies
                                 if p in BASELINES],
                   "tier_policies": tier_policies,
                   "tier_factor": SHAPE_TIER_FACTOR,
                   "tier_layout": TIER_LAYOUT["name"],
                   "shapes": shape_results,
                   "check": {"runs": len(shape_checked),
                             "identical": sum(ok for _, _, _, ok
                                              in shape_checked),
                             "ok": shapes_ok}},
        "loadgen_reports": runs,
        "timings_s": dict(timings, total=total),
        "ok": check_ok and replay_ok and sweep_agrees and shapes_ok,
    }
    with open(os.path.join(out_dir, "table.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out_dir, "table.txt"), "w") as f:
        f.write("\n".join(out.lines) + "\n")
    print("wrote %s/table.txt, table.json, hit_ratio.png%s" % (
        out_dir, "".join(", " + os.path.basename(c) for c in shape_charts)))
    return 0 if result["ok"] else 3


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Seconds, not only tokens: the reference model runner's prefill time,
time to first token and wall time by checkpoint policy, on a scaled-down
agentic workload, through the real daemon.

    /usr/bin/python3 bench/model_runner_prefill.py [--runs 3]
    /usr/bin/python3 bench/model_runner_prefill.py --quick    (the smoke run)

The model is the reference runner's TinyMamba
(client/python/examples/model_runner/: numpy, float32, one token at a
time), its state in a real statecached's slots (host backend, POSIX shared
memory, a Unix socket), every pass in client/README.md's call order through
the `statecache` package: nothing is mocked. Its scheduler runs as it is;
the policies differ only in what it is told (bench/e2e's definitions,
bench/loadgen/README.md "Checkpoints"):

  none        no state cache: admit with kv_hit_blocks 0 and anchor_pos 0,
              no checkpoint, no reservation: every turn prefills from token
              0 (the runner computes everything; the daemon only hands out
              the slot), in chunks that stop at nothing but the chunk size
  prompt-end  one checkpoint at each prompt's last full block (the anchor,
              a fork `checkpoint`), resumes from it: the runner's Scheduler
              with midstep_every=0 (what vLLM's align mode and SGLang's
              radix cache keep)
  statecache  the runner's Scheduler as it is: the prompt-end anchor plus a
              midstep checkpoint every MIDSTEP_EVERY (2) blocks of a
              prefill (reserve before the forward, publish after it),
              resuming from any checkpoint the daemon holds

The workload (bench/workload/gen_workload.py's model, scaled down; every
draw from --seed): --agent-types system prompts shared by the sessions of
that type; --sessions agent sessions, --concurrency of them active at once
(when one ends, the next starts), each --mean-turns turns on average
(geometric, at most --max-turns; a session ends early when its next prompt
would pass --max-prompt). Turn 0's prompt is the system prompt and a task;
turn t+1's is turn t's prompt, the model's reply (its generated tokens) and
a tool output. A turn arrives when the session's previous turn finished
(no think time: a closed loop, so the wall time is the work's).

What it measures, per policy (a fresh daemon each, --slots slots):

  prefill tok   prompt tokens the runner computed (the rest was resumed)
  prefill s     wall time inside TinyMamba.forward for prompt tokens (the
                midstep copies out of a forward included: they run in it)
  decode s      the same for decoded tokens
  TTFT p50/p90  per turn, from its arrival (appended to the scheduler's
                queue) to the end of the forward that produced its first
                token; over every turn of the run
  wall s        the whole workload, first arrival to last token (the passes'
                Steps, the scheduler's work, the forwards)
  / none        each of these over the same run's `none` (ratios taken per
                run, then their median)

and every turn under every policy is compared BIT FOR BIT with a
from-scratch run of its prompt (the runner's own check,
scheduler.differences: the state the first forward read, the state and
logits after the prompt, the generated tokens). The references are
computed off the clock. --runs repeats everything, the policies'
order rotated each run; the summary is the medians. --control adds a run
of a deliberately broken runner (it reads slot 0 where it should read the
fork source) that the check must catch.

Exit status: 0; 1 a run failed; 2 usage or no statecached; 3 a turn
differed from its from-scratch run (or the control went unseen).
"""

import argparse
import atexit
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
EXAMPLE = os.path.join(REPO, "client", "python", "examples", "model_runner")
# The package: PYTHONPATH's when set (ctest points it at its build), else the
# checkout's build/python.
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, os.path.join(REPO, "build", "python"))
sys.path.insert(0, EXAMPLE)

import numpy as np  # noqa: E402

import statecache  # noqa: E402
from statecache.testing import Daemon  # noqa: E402

import tiny_mamba  # noqa: E402

POLICIES = ("none", "prompt-end", "statecache")

# Filled by load_model(): the runner's modules, imported once TinyMamba's
# sizes are set (runner.py copies NUM_LAYERS and STATE_TENSORS at import).
runner_mod = None
sched_mod = None


def load_model(layers, d_model, d_inner):
    """Sets TinyMamba's sizes (the module's constants, read at call time)
    and imports the runner and the scheduler with them. Returns the layout
    the daemon needs: None for the stock sizes (the example's layout file),
    else a layout dict for the scaled model."""
    global runner_mod, sched_mod
    stock = (tiny_mamba.NUM_LAYERS, tiny_mamba.D_MODEL, tiny_mamba.D_INNER)
    tiny_mamba.NUM_LAYERS = layers
    tiny_mamba.D_MODEL = d_model
    tiny_mamba.D_INNER = d_inner
    tiny_mamba.STATE_TENSORS = (
        ("conv", (d_inner, tiny_mamba.KERNEL - 1)),
        ("ssm", (d_inner, tiny_mamba.D_STATE)))
    import runner as runner_mod  # noqa: F811
    import scheduler as sched_mod  # noqa: F811
    assert runner_mod.NUM_LAYERS == layers
    if (layers, d_model, d_inner) == stock:
        return None
    return {"format": "statecache-layout/v1",
            "name": "tiny-mamba-%dx%d" % (layers, d_model),
            "num_layers": layers,
            "tensors": [{"name": name, "dtype": "f32", "shape": list(shape)}
                        for name, shape in tiny_mamba.STATE_TENSORS]}


# ------------------------------------------------------------ the workload


class Session:
    def __init__(self, sid, agent, first, tools, max_new):
        self.id = sid
        self.agent = agent
        self.first = first      # turn 0's new tokens: the task
        self.tools = tools      # turn t's (t >= 1) new tokens after the reply
        self.max_new = max_new  # per turn

    @property
    def turns(self):
        return len(self.max_new)


def make_workload(a):
    """(system prompts, sessions), every draw from a.seed."""
    rng = np.random.default_rng(a.seed)
    vocab = tiny_mamba.VOCAB

    def tokens(n):
        return [int(x) for x in rng.integers(0, vocab, n)]

    def log_uniform(lo, hi):
        return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))

    def log_normal(median, cap):
        return max(1, min(cap, int(round(median * math.exp(
            rng.normal(0, 0.6))))))

    systems = [tokens(log_uniform(a.system_min, a.system_max))
               for _ in range(a.agent_types)]
    sessions = []
    for s in range(a.sessions):
        agent = int(rng.integers(0, a.agent_types))
        turns = min(a.max_turns, int(rng.geometric(1.0 / a.mean_turns)))
        task = tokens(log_uniform(a.task_min, a.task_max))
        max_new = [log_normal(a.reply_median, a.reply_max)]
        tools = []
        length = len(systems[agent]) + len(task)
        for _ in range(1, turns):
            tool = tokens(log_normal(a.tool_median, a.tool_max))
            reply = log_normal(a.reply_median, a.reply_max)
            length += max_new[-1] + len(tool)
            if length > a.max_prompt:
                break
            tools.append(tool)
            max_new.append(reply)
        sessions.append(Session("s%d" % s, agent, task, tools, max_new))
    return systems, sessions


def describe_workload(systems, sessions):
    lengths = []
    for s in sessions:
        n = len(systems[s.agent]) + len(s.first)
        lengths.append(n)
        for t in range(1, s.turns):
            n += s.max_new[t - 1] + len(s.tools[t - 1])
            lengths.append(n)
    return {"sessions": len(sessions), "turns": len(lengths),
            "system_tokens": [len(x) for x in systems],
            "prompt_tokens": sum(lengths),
            "prompt_min": min(lengths), "prompt_median":
            int(statistics.median(lengths)), "prompt_max": max(lengths),
            "output_tokens": sum(sum(s.max_new) for s in sessions)}


# ------------------------------------------------------------ instruments


class TimedModel:
    """TinyMamba with its forward timed: seconds[phase] accumulates the
    wall time of every forward while `phase` is "prefill" or "decode"."""

    def __init__(self, model):
        self.model = model
        self.phase = "prefill"
        self.seconds = {"prefill": 0.0, "decode": 0.0}

    def forward(self, tokens, state, on_token=None):
        t = time.perf_counter()
        try:
            return self.model.forward(tokens, state, on_token)
        finally:
            self.seconds[self.phase] += time.perf_counter() - t

    def __getattr__(self, name):
        return getattr(self.model, name)


def bench_scheduler_class():
    class BenchScheduler(sched_mod.Scheduler):
        """The runner's Scheduler, its forward unchanged: tells the model
        which phase runs, and notes when a request's first token came."""

        def forward(self, r):
            self.runner.model.phase = ("prefill" if r.pos < len(r.prompt)
                                       else "decode")
            had = len(r.output)
            super().forward(r)
            if not had and r.output:
                r.first_token_at = time.perf_counter()
    return BenchScheduler


def no_cache_request_class():
    class NoCacheRequest(sched_mod.Request):
        """policy none: no anchor (admit's anchor_pos 0, no checkpoint, the
        prefill not cut at the last full block)."""

        @property
        def boundary(self):
            return 0
    return NoCacheRequest


class NoKvCache:
    """policy none: no prefix cache, so no KV hit is ever reported."""

    evicted = ()

    def hit_blocks(self, hashes):
        return 0

    def add(self, hashes):
        pass

    def take_evicted(self):
        return []


# ------------------------------------------------------------ one run


def run_policy(policy, systems, sessions, a, binary, layout, model,
               control=False):
    """The workload through a fresh daemon under `policy`. Returns a dict of
    figures and the TurnResults."""
    flags = ["--model_id=" + sched_mod.MODEL_ID,
             "--hash_block_size=%d" % sched_mod.BLOCK,
             "--num_slots=%d" % a.slots, "--num_spec=0"]
    if layout is None:
        flags.append("--layout=" + sched_mod.LAYOUT_FILE)
    Sched = bench_scheduler_class()
    Req = no_cache_request_class() if policy == "none" else sched_mod.Request
    with Daemon(flags, binary=binary, layout=layout) as daemon, \
            statecache.Client.connect(daemon.address) as client, \
            sched_mod.attach(client) as session:
        timed = TimedModel(model)
        runner = runner_mod.ModelRunner(
            timed, session.memory, sched_mod.memory_refresher(client))
        # NaN in every slot: a slot nobody wrote must never be read.
        for slot in range(runner.memory.capacity_slots):
            runner.poison(slot)
        kv = NoKvCache() if policy == "none" else sched_mod.KvCache()
        s = Sched(session, runner, kv,
                  midstep_every=(sched_mod.MIDSTEP_EVERY
                                 if policy == "statecache" else 0),
                  ignore_fork_src=control)
        turns, requests = [], []
        history = {}
        todo = list(sessions)
        inflight = []

        def arrive(sess, t):
            new = systems[sess.agent] + sess.first if t == 0 \
                else sess.tools[t - 1]
            prompt = history.get(sess.id, []) + list(new)
            r = Req("%s/t%d" % (sess.id, t), prompt, sess.max_new[t],
                    s.block)
            r.session, r.turn, r.first_token_at = sess, t, None
            r.arrival = time.perf_counter()
            s.waiting.append(r)
            s.counts["prompt_tokens"] += len(prompt)
            inflight.append(r)

        start = time.perf_counter()
        for _ in range(min(a.concurrency, len(todo))):
            arrive(todo.pop(0), 0)
        idle = 0
        while s.waiting or s.running:
            s.run_pass()
            idle = idle + 1 if not s.running else 0
            if idle > 4:
                raise RuntimeError("no request fits in the pool")
            done = [r for r in inflight if r.finished]
            if not done:
                continue
            now = time.perf_counter()
            for r in done:
                inflight.remove(r)
                r.finish = now
                requests.append(r)
                history[r.session.id] = r.prompt + r.output
                if r.turn + 1 < r.session.turns:
                    arrive(r.session, r.turn + 1)
                elif todo:
                    arrive(todo.pop(0), 0)
        wall = time.perf_counter() - start
        stats = client.admin.stats()

    for r in requests:
        turns.append(sched_mod.TurnResult(
            conversation=r.session.id, turn=r.turn, request=r.id,
            prompt=r.prompt, max_new=r.max_new, how=r.how,
            kv_hit_blocks=r.kv_hit_blocks, blocks_resumed=r.blocks_resumed,
            resumed_pos=r.blocks_resumed * s.block,
            resumed_state=r.resumed_state, prefill_state=r.prefill_state,
            logits=r.logits.tobytes(), tokens=list(r.output),
            accepted=list(r.accepted)))
    ttft = [r.first_token_at - r.arrival for r in requests]
    hows = {}
    for r in requests:
        hows[r.how] = hows.get(r.how, 0) + 1
    return {
        "policy": policy,
        "turns": len(requests),
        "prompt_tokens": s.counts["prompt_tokens"],
        "prefill_tokens": s.counts["prefilled"],
        "prefill_s": timed.seconds["prefill"],
        "decode_s": timed.seconds["decode"],
        "ttft_p50": float(np.percentile(ttft, 50)),
        "ttft_p90": float(np.percentile(ttft, 90)),
        "wall_s": wall,
        "passes": s.passes,
        "steps": s.counts["steps"],
        "reserved": s.counts["reserved"],
        "checkpoints": s.counts["checkpoints_kept"],
        "resumed_turns": sum(r.blocks_resumed > 0 for r in requests),
        "hows": hows,
        "evicted": stats.checkpoints_evicted,
        "dropped": stats.checkpoints_dropped,
    }, turns


def check(model, turns):
    """[(request, fields differing from the from-scratch run)]."""
    out = []
    for t in turns:
        diffs = sched_mod.differences(model, t)
        if diffs:
            out.append((t.request, t.how, t.resumed_pos, diffs))
    return out


# ------------------------------------------------------------ printing


COLUMNS = (("prefill tok", "prefill_tokens", "%d"),
           ("prefill s", "prefill_s", "%.3f"),
           ("decode s", "decode_s", "%.3f"),
           ("TTFT p50 ms", "ttft_p50", "ms"),
           ("TTFT p90 ms", "ttft_p90", "ms"),
           ("wall s", "wall_s", "%.3f"))
RATIOS = (("tok", "prefill_tokens"), ("pre s", "prefill_s"),
          ("p50", "ttft_p50"), ("p90", "ttft_p90"), ("wall", "wall_s"))


def fmt(value, spec):
    if spec == "ms":
        return "%.1f" % (1e3 * value)
    return spec % value


def header():
    cols = "".join("%12s" % name for name, _, _ in COLUMNS)
    ratios = "".join("%7s" % name for name, _ in RATIOS)
    line = "%-11s%s   / none:%s" % ("policy", cols, ratios)
    return line + "\n" + "-" * len(line)


def row(name, figures, ratios):
    cols = "".join("%12s" % fmt(figures[key], spec)
                   for _, key, spec in COLUMNS)
    rs = "".join("%7.3f" % ratios[key] for _, key in RATIOS)
    return "%-11s%s          %s" % (name, cols, rs)


def ratios_to(figures, base):
    return {key: (figures[key] / base[key] if base[key] else float("nan"))
            for _, key in RATIOS}


# ------------------------------------------------------------ main


def find_binary(path, wait_s=120):
    """statecached, copied to a temporary directory (a build relinking
    build/bin mid-run changes nothing); waits a while if a rebuild has
    removed it."""
    deadline = time.monotonic() + wait_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return None
        time.sleep(1)
    tmp = tempfile.mkdtemp(prefix="model-runner-prefill-")
    atexit.register(shutil.rmtree, tmp, True)
    return shutil.copy2(path, os.path.join(tmp, "statecached"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--quick", action="store_true",
                   help="a tiny configuration (the ctest smoke run): 4 "
                   "sessions, 1 run, and --control")
    p.add_argument("--control", action="store_true",
                   help="also run a runner that ignores fork_src and "
                   "require the check to catch it")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--statecached",
                   default=os.path.join(REPO, "build", "bin", "statecached"))
    p.add_argument("--slots", type=int, default=256)
    p.add_argument("--layers", type=int, default=tiny_mamba.NUM_LAYERS)
    p.add_argument("--d-model", type=int, default=tiny_mamba.D_MODEL)
    p.add_argument("--d-inner", type=int, default=tiny_mamba.D_INNER)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--agent-types", type=int, default=2)
    p.add_argument("--system-min", type=int, default=256)
    p.add_argument("--system-max", type=int, default=768)
    p.add_argument("--task-min", type=int, default=32)
    p.add_argument("--task-max", type=int, default=128)
    p.add_argument("--mean-turns", type=float, default=4)
    p.add_argument("--max-turns", type=int, default=8)
    p.add_argument("--tool-median", type=int, default=64)
    p.add_argument("--tool-max", type=int, default=256)
    p.add_argument("--reply-median", type=int, default=8)
    p.add_argument("--reply-max", type=int, default=32)
    p.add_argument("--max-prompt", type=int, default=1536)
    p.add_argument("--json", help="write every figure here")
    a = p.parse_args()
    if a.quick:
        a.runs = 1
        a.control = True
        a.sessions, a.concurrency, a.agent_types = 4, 2, 1
        a.system_min, a.system_max = 64, 96
        a.task_min, a.task_max = 16, 32
        a.mean_turns, a.max_turns = 2, 3
        a.tool_median, a.tool_max = 24, 48
        a.reply_median, a.reply_max = 4, 8
        a.slots = 64
    policies = a.policies.split(",")
    if "none" not in policies or not set(policies) <= set(POLICIES):
        p.error("--policies: some of %s, none included (the baseline)"
                % ",".join(POLICIES))
    binary = find_binary(a.statecached)
    if binary is None:
        print("no statecached at %s" % a.statecached, file=sys.stderr)
        return 2

    layout = load_model(a.layers, a.d_model, a.d_inner)
    model = tiny_mamba.TinyMamba()
    systems, sessions = make_workload(a)
    w = describe_workload(systems, sessions)
    calib_state = model.zero_state()
    t = time.perf_counter()
    model.forward(list(range(64)) * 4, calib_state)
    per_token_us = (time.perf_counter() - t) / 256 * 1e6
    bytes_per_slot = 4 * tiny_mamba.NUM_LAYERS * tiny_mamba.D_INNER * (
        tiny_mamba.KERNEL - 1 + tiny_mamba.D_STATE)
    print("model: TinyMamba %d layers, d_model %d, d_inner %d, d_state %d, "
          "vocab %d; %d B of state a slot; forward ~%.0f us/token "
          "(this process, before the runs)" % (
              tiny_mamba.NUM_LAYERS, tiny_mamba.D_MODEL, tiny_mamba.D_INNER,
              tiny_mamba.D_STATE, tiny_mamba.VOCAB, bytes_per_slot,
              per_token_us))
    print("scheduler: block %d tokens, prefill chunk %d, %d admissions a "
          "pass, statecache's midstep every %d blocks; daemon: %d slots, "
          "host backend, Unix socket" % (
              sched_mod.BLOCK, sched_mod.CHUNK, sched_mod.MAX_ADMIT,
              sched_mod.MIDSTEP_EVERY, a.slots))
    print("workload (seed %d): %d sessions, %d at once, %d turns; system "
          "prompts %s tokens (%d agent types); prompts %d..%d tokens "
          "(median %d), %d prompt tokens in all, %d generated" % (
              a.seed, w["sessions"], a.concurrency, w["turns"],
              "/".join(str(n) for n in w["system_tokens"]), a.agent_types,
              w["prompt_min"], w["prompt_max"], w["prompt_median"],
              w["prompt_tokens"], w["output_tokens"]))
    sys.stdout.flush()

    runs, wrong, started = [], [], time.perf_counter()
    for i in range(a.runs):
        k = i % len(policies)
        order = policies[k:] + policies[:k]
        figures = {}
        for policy in order:
            f, turns = run_policy(policy, systems, sessions, a, binary,
                                  layout, model)
            t = time.perf_counter()
            bad = check(model, turns)
            f["check_s"] = time.perf_counter() - t
            f["wrong"] = bad
            wrong += [(i + 1, policy) + b for b in bad]
            figures[policy] = f
        runs.append(figures)
        print("\nrun %d of %d (order: %s)" % (i + 1, a.runs, ", ".join(order)))
        print(header())
        for policy in policies:
            f = figures[policy]
            print(row(policy, f, ratios_to(f, figures["none"])))
        for policy in policies:
            f = figures[policy]
            print("  %-11s %d turns, %d resumed (%s); %d passes, %d Steps, "
                  "%d midstep reserved, %d checkpoints kept, %d evicted; "
                  "other (Steps, scheduler) %.3f s; %s" % (
                      policy, f["turns"], f["resumed_turns"],
                      ", ".join("%s %d" % kv for kv in sorted(
                          f["hows"].items())),
                      f["passes"], f["steps"], f["reserved"],
                      f["checkpoints"], f["evicted"],
                      f["wall_s"] - f["prefill_s"] - f["decode_s"],
                      "bit-exact" if not f["wrong"] else
                      "%d turns WRONG" % len(f["wrong"])))
        sys.stdout.flush()

    print("\nmedians of %d run%s (ratios: the median of each run's ratio to "
          "its own none)" % (a.runs, "s" if a.runs > 1 else ""))
    print(header())
    summary = {}
    for policy in policies:
        med = {key: statistics.median(r[policy][key] for r in runs)
               for _, key, _ in COLUMNS}
        rat = {key: statistics.median(
            ratios_to(r[policy], r["none"])[key] for r in runs)
            for _, key in RATIOS}
        summary[policy] = {"medians": med, "ratios": rat}
        print(row(policy, med, rat))
    per_tok = [r[p]["prefill_s"] / r[p]["prefill_tokens"] * 1e6
               for r in runs for p in policies if r[p]["prefill_tokens"]]
    print("prefill us/token over every policy and run: median %.1f "
          "(%.1f..%.1f)" % (statistics.median(per_tok), min(per_tok),
                            max(per_tok)))

    control_caught = None
    if a.control:
        f, turns = run_policy("statecache", systems, sessions, a, binary,
                              layout, model, control=True)
        caught = {b[0] for b in check(model, turns)}
        forked = {t.request for t in turns if t.how == "fork"}
        control_caught = bool(forked) and forked <= caught
        print("control (a runner reading slot 0 where it should read "
              "fork_src): %d of %d forked turns caught: %s" % (
                  len(forked & caught), len(forked),
                  "OK" if control_caught else "NOT CAUGHT"))

    n_turns = sum(r[p]["turns"] for r in runs for p in policies)
    print("check: %d turns (%d runs x %d policies) against their "
          "from-scratch runs, bit for bit: %s" % (
              n_turns, a.runs, len(policies),
              "OK" if not wrong else "%d WRONG" % len(wrong)))
    for w_ in wrong[:20]:
        print("  run %d %s: %s (%s at %d): %s" % w_)
    print("total %.1f s" % (time.perf_counter() - started))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "workload": w, "runs": runs,
                       "summary": summary}, f, indent=1)
    if wrong or control_caught is False:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""gen_workload.py: a seeded, deterministic inference workload (JSON Lines).

    bench/workload/gen_workload.py [--shape=agentic] [--seed=1]
                                   [--sessions=200] [-o FILE]

Writes sessions of one of four shapes (bench/workload/README.md documents
the format and the model):

  * agentic (the default): multi-turn agent sessions of the kind the
    reference pool was tuned on. Every session starts from one of a few
    shared system prompts (its agent type) and a task; every later prompt is
    the previous prompt extended by the previous reply (the turn's output
    tokens) and a tool output. Some turns of a top-level session spawn
    sub-agents: each starts from the parent's prompt of that turn and its
    reply (the plan) plus a sub-task of its own, so siblings and parent
    share leading blocks;
  * fan-out: single-turn requests, each one of a few long shared prefixes (a
    system prompt or a retrieved document) and a suffix of its own long
    enough that no prompt's last full block lies inside the shared part;
  * long-replies: multi-turn chat sessions whose replies are long (the next
    prompt is the previous prompt, the reply and a short user message);
  * mix: the three interleaved, unit by unit.

Prompt contents are token-block identities, hashed in chains of
`--block-size` tokens: block i's hash depends on block i-1's and on the
content of block i, so two prompts sharing a prefix share their leading
block hashes. Hashes are non-negative int64 (< 2**63); a line carries its
prompt's full blocks and the full blocks its reply completes, which the
session's next prompt carries at the same positions.

Same arguments, same seed: byte-identical output (only random.Random.random()
is drawn, every value written is an integer or a string, and keys are
written in a fixed order). Standard library only.
"""

import argparse
import bisect
import hashlib
import json
import math
import random
import sys

FORMAT = "statecache-workload"
VERSION = 1
SHAPES = ("agentic", "fan-out", "long-replies", "mix")


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Generate a deterministic workload (JSON Lines).")
    p.add_argument("--shape", choices=SHAPES, default="agentic",
                   help="agentic (multi-turn agents with sub-agents), "
                   "fan-out (single turns on a few shared long prefixes), "
                   "long-replies (multi-turn chat, long replies) or mix "
                   "(the three interleaved)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sessions", type=int, default=200,
                   help="sessions in all, sub-agents included")
    p.add_argument("--block-size", type=int, default=64,
                   help="tokens per hash block (the daemon's hash_block_size)")
    p.add_argument("--max-prompt-tokens", type=int, default=32768,
                   help="a session ends before a prompt would exceed this")
    p.add_argument("--agent-types", type=int, default=4,
                   help="distinct shared system prompts")
    p.add_argument("--system-min-tokens", type=int, default=256)
    p.add_argument("--system-max-tokens", type=int, default=8192)
    p.add_argument("--task-min-tokens", type=int, default=32,
                   help="first user message (log-uniform between min and max)")
    p.add_argument("--task-max-tokens", type=int, default=2048)
    p.add_argument("--mean-turns", type=float, default=8.0,
                   help="turns of a top-level session (geometric mean)")
    p.add_argument("--max-turns", type=int, default=48)
    p.add_argument("--subagent-prob", type=float, default=0.04,
                   help="chance a top-level turn spawns sub-agents")
    p.add_argument("--subagents-min", type=int, default=2)
    p.add_argument("--subagents-max", type=int, default=4)
    p.add_argument("--subagent-mean-turns", type=float, default=4.0)
    p.add_argument("--subtask-min-tokens", type=int, default=48)
    p.add_argument("--subtask-max-tokens", type=int, default=768)
    p.add_argument("--output-median", type=int, default=90,
                   help="decode tokens per turn (lognormal median)")
    p.add_argument("--output-max", type=int, default=1200)
    p.add_argument("--tool-median", type=int, default=400,
                   help="tool output tokens per turn (lognormal median)")
    p.add_argument("--tool-max", type=int, default=8192)
    p.add_argument("--think-median-ms", type=int, default=1500,
                   help="simulated tool time between turns (lognormal median)")
    p.add_argument("--think-max-ms", type=int, default=30000)
    p.add_argument("--prefixes", type=int, default=8,
                   help="fan-out: distinct shared prefixes")
    p.add_argument("--prefix-min-tokens", type=int, default=1000,
                   help="fan-out: a shared prefix (log-uniform)")
    p.add_argument("--prefix-max-tokens", type=int, default=2000)
    p.add_argument("--suffix-min-tokens", type=int, default=128,
                   help="fan-out: a request's own suffix (log-uniform); at "
                   "least --block-size")
    p.add_argument("--suffix-max-tokens", type=int, default=1024)
    p.add_argument("--fanout-burst", type=int, default=8,
                   help="mix: fan-out requests per fan-out unit")
    p.add_argument("--reply-min-tokens", type=int, default=500,
                   help="long-replies: a reply (log-uniform)")
    p.add_argument("--reply-max-tokens", type=int, default=4000)
    p.add_argument("--user-median", type=int, default=150,
                   help="long-replies: the user message after a reply "
                   "(lognormal median)")
    p.add_argument("--user-max", type=int, default=2048)
    p.add_argument("-o", "--output", default="-",
                   help="output file ('-': stdout)")
    args = p.parse_args(argv)
    problems = []
    if args.sessions < 1:
        problems.append("--sessions must be >= 1")
    if args.block_size < 1:
        problems.append("--block-size must be >= 1")
    if args.agent_types < 1:
        problems.append("--agent-types must be >= 1")
    if not 1 <= args.system_min_tokens <= args.system_max_tokens:
        problems.append("need 1 <= --system-min-tokens <= --system-max-tokens")
    if not 1 <= args.task_min_tokens <= args.task_max_tokens:
        problems.append("need 1 <= --task-min-tokens <= --task-max-tokens")
    if not 1 <= args.subtask_min_tokens <= args.subtask_max_tokens:
        problems.append(
            "need 1 <= --subtask-min-tokens <= --subtask-max-tokens")
    if args.max_prompt_tokens < args.system_max_tokens + args.task_max_tokens:
        problems.append("--max-prompt-tokens must leave room for the longest "
                        "system prompt and task")
    if args.mean_turns < 1 or args.subagent_mean_turns < 1:
        problems.append("mean turns must be >= 1")
    if args.max_turns < 1:
        problems.append("--max-turns must be >= 1")
    if not 0 <= args.subagent_prob <= 1:
        problems.append("--subagent-prob must be in [0, 1]")
    if not 1 <= args.subagents_min <= args.subagents_max:
        problems.append("need 1 <= --subagents-min <= --subagents-max")
    for name in ("output_median", "output_max", "tool_median", "tool_max",
                 "think_median_ms", "think_max_ms", "prefixes", "fanout_burst",
                 "user_median", "user_max"):
        if getattr(args, name) < 1:
            problems.append("--%s must be >= 1" % name.replace("_", "-"))
    if not 1 <= args.prefix_min_tokens <= args.prefix_max_tokens:
        problems.append("need 1 <= --prefix-min-tokens <= --prefix-max-tokens")
    if not args.block_size <= args.suffix_min_tokens <= args.suffix_max_tokens:
        problems.append("need --block-size <= --suffix-min-tokens <= "
                        "--suffix-max-tokens (a shorter suffix could leave a "
                        "prompt's last full block inside its shared prefix)")
    if (args.shape in ("fan-out", "mix") and args.max_prompt_tokens
            < args.prefix_max_tokens + args.suffix_max_tokens):
        problems.append("--max-prompt-tokens must leave room for the longest "
                        "prefix and suffix")
    if not 1 <= args.reply_min_tokens <= args.reply_max_tokens:
        problems.append("need 1 <= --reply-min-tokens <= --reply-max-tokens")
    if problems:
        p.error("; ".join(problems))
    return args


class Draws:
    """The distributions, from random.Random.random() alone (stable across
    Python versions, unlike some of the module's other methods)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def uniform(self):
        return self.rng.random()

    def log_uniform_int(self, lo, hi):
        if lo == hi:
            return lo
        v = math.exp(math.log(lo) + self.rng.random() * math.log(hi / lo))
        return max(lo, min(hi, int(v)))

    def lognormal_int(self, median, sigma, lo, hi):
        # Box-Muller; 1 - random() is in (0, 1], so the log is finite.
        u1 = 1.0 - self.rng.random()
        u2 = self.rng.random()
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        return max(lo, min(hi, int(median * math.exp(sigma * z))))

    def geometric(self, mean, hi):
        # Number of trials to the first success, success probability 1/mean.
        if mean <= 1:
            return 1
        u = 1.0 - self.rng.random()
        n = 1 + int(math.log(u) / math.log(1.0 - 1.0 / mean))
        return max(1, min(hi, n))

    def int_between(self, lo, hi):
        return lo + min(hi - lo, int(self.rng.random() * (hi - lo + 1)))


class Stream:
    """One session's token stream as segments of token-block identity.

    A segment is (content id, length): its tokens are positions 0..length-1
    of that content. A block's content is the spans of segments it covers;
    its hash chains the previous block's hash with that content. Segments
    shared between streams (a system prompt, a parent's history) at the same
    offsets give the same block hashes.
    """

    def __init__(self, root, block_size, segments=()):
        self.root = root
        self.block_size = block_size
        self.ids = []
        self.starts = []  # stream offset of each segment
        self.length = 0
        self.hashes = []  # full blocks hashed so far
        for seg_id, n in segments:
            self.append(seg_id, n)

    def append(self, seg_id, n):
        if n <= 0:
            return
        self.ids.append(seg_id)
        self.starts.append(self.length)
        self.length += n

    def segments_until(self, end):
        """The segments covering [0, end), the last one cut at `end`."""
        out = []
        for i, seg_id in enumerate(self.ids):
            start = self.starts[i]
            if start >= end:
                break
            stop = self.starts[i + 1] if i + 1 < len(self.ids) else self.length
            out.append((seg_id, min(stop, end) - start))
        return out

    def block_hashes(self, tokens):
        """The hashes of the full blocks of the first `tokens` tokens."""
        bs = self.block_size
        want = tokens // bs
        while len(self.hashes) < want:
            b = len(self.hashes)
            lo, hi = b * bs, (b + 1) * bs
            i = bisect.bisect_right(self.starts, lo) - 1
            parts = []
            while lo < hi:
                start = self.starts[i]
                stop = (self.starts[i + 1] if i + 1 < len(self.ids)
                        else self.length)
                end = min(stop, hi)
                parts.append("%s:%d:%d" % (self.ids[i], lo - start,
                                           end - start))
                lo = end
                i += 1
            prev = self.hashes[-1] if self.hashes else self.root
            digest = hashlib.blake2b(
                prev.to_bytes(8, "little") + ";".join(parts).encode(),
                digest_size=8).digest()
            self.hashes.append(int.from_bytes(digest, "little") >> 1)
        return self.hashes[:want]


def chain_root(seed, block_size):
    digest = hashlib.blake2b(
        ("%s:%d:%d" % (FORMAT, seed, block_size)).encode(),
        digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def session_turns(d, args, stream, first_id, mean_turns, think_first,
                  long_replies=False):
    """Grows `stream` turn by turn; returns one dict per turn.

    `stream` already holds the first prompt. Each turn records its prompt,
    then appends its reply (output tokens) and what comes back before the
    next turn (a tool output; with `long_replies`, a long reply and a user
    message instead), which the next prompt extends by.
    """
    turns = []
    n_turns = d.geometric(mean_turns, args.max_turns)
    think = think_first
    for t in range(n_turns):
        prompt = stream.length
        if long_replies:
            output = d.log_uniform_int(args.reply_min_tokens,
                                       args.reply_max_tokens)
        else:
            output = d.lognormal_int(args.output_median, 0.9, 1,
                                     args.output_max)
        turns.append({"turn": t, "think_ms": think, "prompt": prompt,
                      "output": output, "stream_len": prompt})
        stream.append("%s.r%d" % (first_id, t), output)
        if long_replies:
            more = d.lognormal_int(args.user_median, 1.0, 1, args.user_max)
        else:
            more = d.lognormal_int(args.tool_median, 1.1, 1, args.tool_max)
        think = d.lognormal_int(args.think_median_ms, 1.0, 1,
                                args.think_max_ms)
        if stream.length + more > args.max_prompt_tokens:
            break
        stream.append("%s.%s%d" % (first_id, "u" if long_replies else "o", t),
                      more)
    return turns


class Generator:
    """Sessions of one shape, appended unit by unit (a unit: an agentic
    session and its sub-agents, a long-replies session, or fan-out
    requests), all drawn from one Draws in a fixed order."""

    def __init__(self, args):
        self.args = args
        self.d = Draws(args.seed)
        self.root = chain_root(args.seed, args.block_size)
        self.sessions = []  # (header dict, stream, turns)
        self.system = []
        self.prefix = []
        if args.shape != "fan-out":
            self.system = [
                self.d.log_uniform_int(args.system_min_tokens,
                                       args.system_max_tokens)
                for _ in range(args.agent_types)]
        if args.shape in ("fan-out", "mix"):
            self.prefix = [
                self.d.log_uniform_int(args.prefix_min_tokens,
                                       args.prefix_max_tokens)
                for _ in range(args.prefixes)]

    def full(self):
        return len(self.sessions) >= self.args.sessions

    def first_prompt(self, sid):
        """A top-level session's agent type and its stream holding the
        system prompt and the task."""
        args, d = self.args, self.d
        agent = min(args.agent_types - 1,
                    int(d.uniform() * args.agent_types))
        stream = Stream(self.root, args.block_size)
        stream.append("sys%d" % agent, self.system[agent])
        stream.append("s%d.task" % sid,
                      d.log_uniform_int(args.task_min_tokens,
                                        args.task_max_tokens))
        return agent, stream

    def agentic(self):
        args, d = self.args, self.d
        sid = len(self.sessions)
        agent, stream = self.first_prompt(sid)
        turns = session_turns(d, args, stream, "s%d" % sid, args.mean_turns,
                              think_first=0)
        self.sessions.append(({"session": sid, "parent": None,
                               "parent_turn": None, "agent": agent},
                              stream, turns))
        # Sub-agents, after the whole parent (ids follow the parent's).
        for turn in turns[:-1]:
            if self.full():
                break
            if d.uniform() >= args.subagent_prob:
                continue
            branch = turn["prompt"] + turn["output"]  # the prompt and plan
            if branch + args.subtask_max_tokens > args.max_prompt_tokens:
                continue
            for _ in range(d.int_between(args.subagents_min,
                                         args.subagents_max)):
                if self.full():
                    break
                cid = len(self.sessions)
                child = Stream(self.root, args.block_size,
                               stream.segments_until(branch))
                child.append("s%d.task" % cid,
                             d.log_uniform_int(args.subtask_min_tokens,
                                               args.subtask_max_tokens))
                child_turns = session_turns(
                    d, args, child, "s%d" % cid, args.subagent_mean_turns,
                    think_first=d.lognormal_int(100, 0.5, 1, 1000))
                self.sessions.append(({"session": cid, "parent": sid,
                                       "parent_turn": turn["turn"],
                                       "agent": agent}, child, child_turns))

    def long_replies(self):
        args = self.args
        sid = len(self.sessions)
        agent, stream = self.first_prompt(sid)
        turns = session_turns(self.d, args, stream, "s%d" % sid,
                              args.mean_turns, think_first=0,
                              long_replies=True)
        self.sessions.append(({"session": sid, "parent": None,
                               "parent_turn": None, "agent": agent},
                              stream, turns))

    def fan_out(self, n):
        """`n` single-turn requests (fewer if the file is full)."""
        args, d = self.args, self.d
        for _ in range(n):
            if self.full():
                break
            sid = len(self.sessions)
            k = min(args.prefixes - 1, int(d.uniform() * args.prefixes))
            stream = Stream(self.root, args.block_size)
            stream.append("doc%d" % k, self.prefix[k])
            stream.append("s%d.q" % sid,
                          d.log_uniform_int(args.suffix_min_tokens,
                                            args.suffix_max_tokens))
            prompt = stream.length
            output = d.lognormal_int(args.output_median, 0.9, 1,
                                     args.output_max)
            stream.append("s%d.r0" % sid, output)
            turns = [{"turn": 0, "think_ms": 0, "prompt": prompt,
                      "output": output, "stream_len": prompt}]
            self.sessions.append(({"session": sid, "parent": None,
                                   "parent_turn": None,
                                   "agent": args.agent_types + k},
                                  stream, turns))


def generate(args):
    g = Generator(args)
    while not g.full():
        shape = args.shape
        if shape == "mix":
            shape = SHAPES[min(2, int(g.d.uniform() * 3))]
        if shape == "agentic":
            g.agentic()
        elif shape == "long-replies":
            g.long_replies()
        else:
            g.fan_out(args.fanout_burst if args.shape == "mix" else 1)
    return g.sessions


def write(args, sessions, out):
    requests = sum(len(t) for _, _, t in sessions)
    prompt_tokens = sum(x["prompt"] for _, _, t in sessions for x in t)
    output_tokens = sum(x["output"] for _, _, t in sessions for x in t)
    params = {k: v for k, v in sorted(vars(args).items()) if k != "output"}
    header = {
        "format": FORMAT,
        "version": VERSION,
        "generator": "bench/workload/gen_workload.py",
        "hash_block_size": args.block_size,
        "params": params,
        "sessions": len(sessions),
        "requests": requests,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
    }
    dump = lambda obj: json.dumps(obj, separators=(",", ":"))
    out.write(dump(header) + "\n")
    bs = args.block_size
    for info, stream, turns in sessions:
        for turn in turns:
            # The full blocks of the prompt and of the reply after it (the
            # next prompt extends the same stream, so it carries the same
            # hashes for the reply's blocks).
            hashes = stream.block_hashes(turn["prompt"] + turn["output"])
            line = {
                "type": "request",
                "session": info["session"],
                "turn": turn["turn"],
                "parent": info["parent"],
                "parent_turn": info["parent_turn"],
                "agent": info["agent"],
                "think_ms": turn["think_ms"],
                "prompt_tokens": turn["prompt"],
                "output_tokens": turn["output"],
                "blocks": hashes[:turn["prompt"] // bs],
                "output_blocks": hashes[turn["prompt"] // bs:],
            }
            out.write(dump(line) + "\n")


def main(argv):
    args = parse_args(argv)
    sessions = generate(args)
    if args.output == "-":
        write(args, sessions, sys.stdout)
    else:
        with open(args.output, "w", encoding="ascii", newline="\n") as out:
            write(args, sessions, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

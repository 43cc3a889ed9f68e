#!/usr/bin/python3
"""What the host tier buys on multi-turn traffic, and what it costs.

A fixed multi-turn workload runs through the real daemon (host backend,
the Python package, one request at a time): --conversations conversations
take --turns turns each, in a seeded random interleaving; each turn's
prompt is the previous turn's prefix plus --new_blocks blocks, admitted
with its whole previous prefix as the KV hit, written (the "forward": a
pattern unique to the conversation and turn, through the mapped region),
checkpointed at its end and released. Between two turns of one
conversation the others run, so the checkpoints' working set is the
number of conversations.

For each device pool size (--pools) the workload runs with the tier off,
the tier the size of the pool, and four times it, each against a fresh
daemon, and the table gives:

  hit      blocks resumed / blocks asked for (the prefix hit ratio)
  saved    prefill tokens resumed instead of recomputed, and their share
  tier     resumes served from the tier
  demoted  checkpoints the tier took
  demote / promote us per pass
           the daemon's demotion and promotion copy time per pass
           (statecache_copy_seconds_total by reason, over the passes),
           and per demotion
  pass p50 the round trip of a pass (client side, median)

and, from the same run, the baselines: the same pass p50 with the tier
off, and memcpy of one slot in this process (numpy). Every resume's bytes
are checked against the pattern written at that prefix: a wrong byte ends
the run with exit status 3. --runs repeats it and reports medians. Run from
the repository root after building (statecached and the package):

    /usr/bin/python3 bench/host_tier.py --runs 3
"""

import argparse
import os
import random
import re
import statistics
import sys
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
sys.path.insert(0, os.path.join(REPO, "build", "python"))

import numpy as np  # noqa: E402

import statecache  # noqa: E402
from statecache.testing import Daemon  # noqa: E402

BLOCK = 64
MODEL = "host-tier-bench"
# A small recurrent state: 4 layers of a bf16 conv window and an f32 SSM
# state (about 136 KiB a slot).
LAYOUT = {
    "name": "bench-tier", "num_layers": 4,
    "tensors": [{"name": "conv", "dtype": "bf16", "shape": [4, 256]},
                {"name": "ssm", "dtype": "f32", "shape": [8, 32, 32]}],
}


class WrongState(Exception):
    """A resume handed out bytes other than the ones written."""


def mark(memory, slot, conversation, turn):
    """The forward's write: slot-major, the first 16 bytes name who."""
    view = memory.slot_bytes(slot)
    view[:16] = np.frombuffer(
        np.array([conversation, turn], dtype=np.int64).tobytes(), np.uint8)
    view[16:] = (conversation * 31 + turn) % 251


def check(memory, slot, conversation, turn):
    view = memory.slot_bytes(slot)
    who = np.frombuffer(view[:16].tobytes(), np.int64)
    if (list(who) != [conversation, turn]
            or view[-1] != (conversation * 31 + turn) % 251):
        raise WrongState("slot %d holds %s, not conversation %d turn %d"
                         % (slot, list(who), conversation, turn))


def hashes_of(conversation, blocks):
    return [(conversation + 1) * 100000 + b for b in range(blocks)]


def metric(text, name, labels):
    m = re.search(r"^%s\{%s\} (\S+)$" % (re.escape(name), labels), text,
                  re.M)
    return float(m[1]) if m else 0.0


def workload(args):
    order = [c for c in range(args.conversations) for _ in range(args.turns)]
    random.Random(args.seed).shuffle(order)
    return order


def run(args, pool, tier_slots):
    flags = ["--model_id=" + MODEL, "--hash_block_size=%d" % BLOCK,
             "--num_slots=%d" % pool, "--metrics_address=127.0.0.1:0"]
    order = workload(args)
    with Daemon(flags, binary=args.binary, layout=LAYOUT) as daemon, \
            statecache.Client.connect(daemon.address) as client, \
            client.attach(MODEL, BLOCK, client_name="bench") as session:
        memory = session.memory
        if tier_slots:
            client.admin.resize(host_tier_bytes=tier_slots
                                * memory.bytes_per_slot)
        turn_of = [0] * args.conversations
        wanted = resumed = tier = passes = 0
        times = []
        for n, c in enumerate(order):
            turn = turn_of[c]
            prev = turn * args.new_blocks
            blocks = prev + args.new_blocks
            h = hashes_of(c, blocks)
            rid = "c%d-%d" % (c, turn)
            t0 = time.perf_counter()
            _, admit = session.step().begin_pass().admit(
                rid, width=1, num_tokens=blocks * BLOCK + 1,
                anchor_pos=blocks * BLOCK, block_hashes=h,
                kv_hit_blocks=prev).send()
            times.append(time.perf_counter() - t0)
            admit.check()
            passes += 1
            wanted += prev
            if admit.blocks_resumed:
                # Only a whole-prefix resume is possible here: every
                # checkpoint sits at a turn's end.
                resumed += admit.blocks_resumed
                src = admit.slots[0] if admit.adopted else admit.fork_src
                check(memory, src, c, turn - 1)
                tier += admit.adopted
            mark(memory, admit.slots[0], c, turn)
            step = session.step().checkpoint(rid, boundary_blocks=blocks,
                                             hash=h[-1])
            if admit.fork_src >= 0:
                step.consume_fork(rid)
            t0 = time.perf_counter()
            for r in step.release(rid).send():
                r.check()
            times.append(time.perf_counter() - t0)
            passes += 1
            turn_of[c] += 1
        port = re.search(r"metrics on http://\S+:(\d+)/", daemon.log())[1]
        text = urllib.request.urlopen(
            "http://127.0.0.1:%s/metrics" % port).read().decode()
        stats = client.admin.stats()
    times.sort()
    return {
        "hit": resumed / wanted if wanted else 0.0,
        "saved": resumed * BLOCK,
        "asked": wanted * BLOCK,
        "tier": tier,
        "tier_stat": stats.resumes_tier,
        "demote_us": 1e6 * metric(text, "statecache_copy_seconds_total",
                                  'reason="demotion"') / passes,
        "promote_us": 1e6 * metric(text, "statecache_copy_seconds_total",
                                   'reason="promotion"') / passes,
        "demotions": stats.host_tier_demotions,
        "per_demotion_us": (1e6 * metric(text, "statecache_copy_seconds_total",
                                         'reason="demotion"')
                            / max(1, stats.host_tier_demotions)),
        "p50_us": 1e6 * times[len(times) // 2],
        "slot_bytes": memory.bytes_per_slot,
    }


def memcpy_us(slot_bytes, reps=2000):
    src = np.ones(slot_bytes, np.uint8)
    dst = np.empty_like(src)
    t0 = time.perf_counter()
    for _ in range(reps):
        np.copyto(dst, src)
    return 1e6 * (time.perf_counter() - t0) / reps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pools", default="16,32,64")
    parser.add_argument("--conversations", type=int, default=64)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--new_blocks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--binary",
                        default=os.path.join(REPO, "build/bin/statecached"))
    args = parser.parse_args()
    pools = [int(p) for p in args.pools.split(",")]
    tiers = [("off", 0), ("1x", 1), ("4x", 4)]
    results = {}
    copies = []
    try:
        for _ in range(args.runs):
            for pool in pools:
                for name, factor in tiers:
                    r = run(args, pool, factor * pool)
                    results.setdefault((pool, name), []).append(r)
            copies.append(memcpy_us(r["slot_bytes"]))
    except WrongState as e:
        print("WRONG STATE:", e)
        return 3
    first = results[(pools[0], "off")][0]
    print("%d conversations x %d turns (+%d blocks of %d tokens a turn), "
          "slot %d bytes; medians of %d runs"
          % (args.conversations, args.turns, args.new_blocks, BLOCK,
             first["slot_bytes"], args.runs))
    print("memcpy of one slot here: %.1f us" % statistics.median(copies))
    print("%5s %5s %6s %8s %6s %6s %7s %10s %11s %11s %9s %8s" % (
        "pool", "tier", "hit", "saved", "share", "tier#", "demoted",
        "demote us", "promote us", "us/demotion", "pass p50", "p50 x"))
    for pool in pools:
        base = statistics.median(r["p50_us"] for r in results[(pool, "off")])
        for name, _ in tiers:
            rs = results[(pool, name)]

            def med(key):
                return statistics.median(r[key] for r in rs)
            assert all(r["tier"] == r["tier_stat"] for r in rs)
            print("%5d %5s %6.3f %8d %5.1f%% %6d %7d %10.2f %11.2f %11.2f "
                  "%8.0fus %7.2f" % (
                      pool, name, med("hit"), med("saved"),
                      100 * med("saved") / first["asked"], med("tier"),
                      med("demotions"), med("demote_us"), med("promote_us"),
                      med("per_demotion_us"), med("p50_us"),
                      med("p50_us") / base))
    return 0


if __name__ == "__main__":
    sys.exit(main())

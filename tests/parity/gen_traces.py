#!/usr/bin/env python3
"""Generate pool traces (TRACE_FORMAT.md) by driving the reference pool the way
an inference scheduler (ATOM's BlockManager/Scheduler) drives it.

Every line written is executed on the reference pool as it is generated
(through run_trace.py's TraceRunner), and the scheduler model makes its
decisions from what the reference answered: the slots `pop_many` handed out,
whether a checkpoint source is pinned, what `retire_top` relocated. Every call
is one a well-behaved scheduler makes, so the reference refuses none of them
(the generator fails loudly if it ever does) and checks each mutating call's
preconditions against the reference's state before emitting it:

  * never claim a slot that is not free, never release a free or pinned slot,
    never pin a free slot, never unpin an unpinned one;
  * publish/cancel reservations exactly as reserve_midstep returned them, once;
  * checkpoint only a live committed slot;
  * drop_reader only for the request's own fork source, and forget that source
    once a release_pins has returned it (so a late drop can never hit a slot
    somebody else holds now);
  * retire_top only with at least two slots, extend only with count >= 1.

The scheduler model (see Generator): multi-turn conversations whose prompts
extend each other (chained 64-token block hashes, blake2b truncated to 63
bits), a simulated KV cache whose LRU evictions unindex checkpoints, passes
that start with release_pins, admission gated on has_free(1 + num_spec),
resume (resumable_hit -> lookup -> promote -> claim unless pinned -> fork or
adopt), chunked prefill with ladder/demand/anchor checkpoints (fork
`checkpoint` or midstep reserve/publish), decode with speculative tokens,
"forking chunk too short" takeovers, preemption/abort, resizing with
relocations, and queries/dumps sprinkled in.

Usage:
    gen_traces.py --out-dir DIR [--seed N] [--only NAME[,NAME]] [--calls N]
                  [--reference-dir D] [--no-expected]
    gen_traces.py --out-dir DIR --random K [--seed N] [--calls N]   # random configs
    gen_traces.py --long PATH [--calls 200000] [--long-config NAME] [--long-slots N]
                                       # NAME: any configuration (default
                                       # long_fork1_midstep_spec2, 96 slots;
                                       # long_h200_fork1_midstep_spec2 is a
                                       # deployment's 256-request batch)
    gen_traces.py --list

Standard library only.
"""

import argparse
import collections
import hashlib
import importlib.util
import json
import math
import os
import random
import struct
import subprocess
import sys
import zlib

sys.dont_write_bytecode = True

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_REFERENCE_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "reference"))

HBS = 64  # hash_block_size of every generated trace
HASH_MASK = (1 << 63) - 1


class GenError(AssertionError):
    """The generator (or the reference) broke a rule: never silently go on."""


def load_run_trace(reference_dir):
    path = os.path.join(reference_dir, "run_trace.py")
    if not os.path.exists(path):
        raise SystemExit(f"gen_traces: no run_trace.py in {reference_dir}")
    spec = importlib.util.spec_from_file_location("statecache_run_trace", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------- #
# Configurations
# --------------------------------------------------------------------------- #

BASE = dict(
    num_slots=32,
    enabled=True,
    kind="fork",
    fork_tokens=1,
    readable=False,
    num_spec=0,
    resize=False,
    interval=256,          # ladder interval in tokens; -1 ladder off, 0 off
    demand=True,           # the demand rung
    kv_blocks=600,         # simulated KV cache capacity (hashed blocks)
    max_running=10,
    max_admit=4,           # admissions per pass
    prefill_budget=1536,   # prefill tokens per pass
    short_chunk_prob=0.0,  # chance a pass's budget is tiny (fork too short)
    p_arrival=0.25,        # new conversation per pass
    max_convs=14,
    turns=(1, 6),
    think=(0, 12),         # passes between turns
    first_msg=(20, 700),
    next_msg=(10, 400),
    output=(2, 60),
    max_ctx=4096,
    sys_prompts=(192, 448, 1000),
    p_sys=0.7,
    p_sibling=0.08,        # n=2 sampling: a second request, same prompt
    p_preempt=0.02,        # per pass
    p_abort=0.005,         # per pass
    starve_passes=6,
    lpm=False,             # admit the longest KV prefix match first
    p_dense=0.3,           # midstep: reserve every rung a chunk passes, not
                           # only the last (a denser ladder)
    p_clear=0.0,           # clear_index per pass
    p_resize=0.01,         # start a shrink campaign per pass
    p_query=0.10,          # a random query after a call
    dump_every=50,
    calls=4500,
)

CONFIGS = collections.OrderedDict()


def _cfg(name, **kw):
    c = dict(BASE)
    c.update(kw)
    c["name"] = name
    CONFIGS[name] = c


_cfg("fork1_midstep_spec0_resize", num_slots=32, readable=True, resize=True,
     interval=128, output=(4, 220), kv_blocks=200, p_preempt=0.04,
     p_clear=0.003)
_cfg("fork1_nomidstep_spec2", num_slots=24, num_spec=2, interval=512,
     max_running=5, kv_blocks=150, output=(4, 160))
_cfg("fork64_nomidstep_spec0_resize", num_slots=16, fork_tokens=64, resize=True,
     interval=256, short_chunk_prob=0.3, max_running=8, kv_blocks=150)
_cfg("fork64_midstep_spec2", num_slots=48, fork_tokens=64, readable=True,
     num_spec=2, interval=-1, short_chunk_prob=0.25, max_running=12,
     kv_blocks=200, p_preempt=0.05, p_clear=0.003, dump_every=80)
_cfg("none_spec0", num_slots=16, kind="none", fork_tokens=0, max_running=10,
     kv_blocks=500)
_cfg("none_spec2_resize", num_slots=24, kind="none", fork_tokens=0, num_spec=2,
     resize=True, max_running=7, p_clear=0.003)
_cfg("replay_midstep_spec0_resize", num_slots=24, kind="replay", fork_tokens=0,
     readable=True, resize=True, interval=256, kv_blocks=200, p_preempt=0.04)
_cfg("replay_nomidstep_spec2", num_slots=32, kind="replay", fork_tokens=0,
     num_spec=2, interval=512, max_running=9)
_cfg("pressure_fork1_spec0", num_slots=8, resize=True, interval=256,
     max_running=6, lpm=True, max_convs=16, p_arrival=0.4, think=(0, 1),
     output=(1, 6), kv_blocks=200, p_preempt=0.03, p_clear=0.002, dump_every=40)
_cfg("pressure_fork1_midstep_spec2", num_slots=12, readable=True, num_spec=2,
     resize=True, interval=128, max_running=5, lpm=True, max_convs=10,
     p_arrival=0.4, think=(0, 1), output=(1, 12), kv_blocks=200,
     p_preempt=0.04, dump_every=40)
_cfg("roomy_fork1_midstep_spec2", num_slots=128, readable=True, num_spec=2,
     resize=True, interval=256, max_running=16, max_admit=6, max_convs=30,
     p_arrival=0.5, kv_blocks=400, prefill_budget=4096, output=(4, 300),
     dump_every=250)
_cfg("disabled_fork1_midstep_spec2", num_slots=16, enabled=False, readable=True,
     num_spec=2, resize=True, max_running=5, calls=3000)

LONG_CONFIG = dict(BASE, name="long_fork1_midstep_spec2", num_slots=96,
                   readable=True, num_spec=2, resize=True, interval=256,
                   max_running=14, max_admit=6, max_convs=28, p_arrival=0.5,
                   kv_blocks=400, prefill_budget=4096, p_clear=0.0005,
                   dump_every=0, calls=200000)


# The long trace scaled to one H200 serving a hybrid model: vLLM's default
# batch of 256 running requests, each 1 + 2 speculative slots wide (768
# live), in a pool of 2048 slots whose other slots hold checkpoints, a 1M-token
# KV cache (16k blocks of 64) and a 16k-token prefill budget per pass, with
# conversations arriving fast enough to keep the batch full; an operator
# resizes now and then (a shrink campaign every ~500 passes, not every ~100).
DEPLOY_CONFIG = dict(LONG_CONFIG, name="long_h200_fork1_midstep_spec2",
                     num_slots=2048, max_running=256, max_admit=64,
                     max_convs=1600, p_arrival=6.0, kv_blocks=16000,
                     prefill_budget=16384, output=(16, 400), p_resize=0.002)
LONG_CONFIGS = {c["name"]: c for c in (LONG_CONFIG, DEPLOY_CONFIG)}


def random_config(rng, index, calls):
    kind = rng.choice(["fork", "fork", "fork", "none", "replay", "replay"])
    if kind == "fork":
        fork_tokens = rng.choice([1, 1, 8, 64, 100])
    else:
        fork_tokens = 0
    readable = kind != "none" and rng.random() < 0.5
    num_spec = rng.choice([0, 0, 1, 2, 3])
    num_slots = rng.choice([8, 10, 12, 16, 24, 32, 48, 64, 96])
    width = 1 + num_spec
    num_slots = max(num_slots, 2 * width + 2)
    c = dict(BASE)
    c.update(
        name=f"fresh{index}_{kind}{fork_tokens if kind == 'fork' else ''}"
        f"_{'mid' if readable else 'nomid'}_s{num_spec}_n{num_slots}",
        num_slots=num_slots,
        enabled=rng.random() < 0.9,
        kind=kind,
        fork_tokens=fork_tokens,
        readable=readable,
        num_spec=num_spec,
        resize=rng.random() < 0.6,
        interval=rng.choice([-1, 0, 64, 128, 256, 256, 512]),
        demand=rng.random() < 0.8,
        kv_blocks=rng.choice([150, 300, 600, 1200]),
        max_running=max(2, min(24, num_slots // width - rng.randint(0, 2))),
        max_admit=rng.randint(1, 6),
        prefill_budget=rng.choice([512, 1024, 2048, 4096]),
        short_chunk_prob=rng.choice([0.0, 0.1, 0.3]),
        p_arrival=rng.choice([0.15, 0.3, 0.5]),
        max_convs=rng.randint(6, 30),
        p_sibling=rng.choice([0.0, 0.08, 0.2]),
        p_preempt=rng.choice([0.0, 0.02, 0.06]),
        p_abort=rng.choice([0.0, 0.005, 0.02]),
        p_clear=rng.choice([0.0, 0.0, 0.002]),
        p_resize=rng.choice([0.005, 0.01, 0.03]),
        p_query=rng.choice([0.05, 0.1, 0.2]),
        dump_every=rng.choice([30, 50, 100]),
        calls=calls,
    )
    return c


# --------------------------------------------------------------------------- #
# Token sequences with chained block hashes
# --------------------------------------------------------------------------- #


class TokenSeq:
    """A growing token list and the chained hashes of its full blocks."""

    __slots__ = ("tokens", "hashes")

    def __init__(self, tokens=None, hashes=None):
        self.tokens = list(tokens or [])
        self.hashes = list(hashes or [])

    def copy(self):
        return TokenSeq(self.tokens, self.hashes)

    def __len__(self):
        return len(self.tokens)

    def full_hashes(self, ntokens):
        """Hashes of the blocks wholly inside tokens[:ntokens]."""
        nblocks = ntokens // HBS
        while len(self.hashes) < nblocks:
            i = len(self.hashes)
            prev = self.hashes[-1] if self.hashes else HASH_MASK
            block = self.tokens[i * HBS:(i + 1) * HBS]
            digest = hashlib.blake2b(
                struct.pack("<Q", prev) + struct.pack(f"<{HBS}I", *block),
                digest_size=8,
            ).digest()
            self.hashes.append(int.from_bytes(digest, "little") & HASH_MASK)
        return self.hashes[:nblocks]


# --------------------------------------------------------------------------- #
# The simulated KV cache: a hash index with refcounts and an LRU of unused
# blocks; its evictions are what `unindex` reports to the state pool.
# --------------------------------------------------------------------------- #


class KVCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.refs = {}  # hash -> refcount
        self.lru = collections.OrderedDict()  # unreferenced hashes, LRU first
        self.epoch = 0

    def __contains__(self, h):
        return h in self.refs

    def ref(self, h):
        n = self.refs.get(h)
        if n is None:
            self.refs[h] = 1
        else:
            if n == 0:
                del self.lru[h]
            self.refs[h] = n + 1

    def unref(self, h):
        n = self.refs.get(h)
        if n is None:
            return
        n -= 1
        self.refs[h] = n
        if n == 0:
            self.lru[h] = None

    def evict(self):
        """Hashes evicted to get back under capacity, LRU first."""
        out = []
        while len(self.refs) > self.capacity and self.lru:
            h, _ = self.lru.popitem(last=False)
            del self.refs[h]
            out.append(h)
        return out

    def clear(self):
        self.refs.clear()
        self.lru.clear()
        self.epoch += 1


# --------------------------------------------------------------------------- #
# Requests and conversations
# --------------------------------------------------------------------------- #


class Conversation:
    __slots__ = ("cid", "tseq", "turns_left", "next_pass", "active")

    def __init__(self, cid, tseq, turns):
        self.cid = cid
        self.tseq = tseq
        self.turns_left = turns
        self.next_pass = 0
        self.active = None


class Request:
    _next_id = 0

    def __init__(self, conv, tseq, out_target, main):
        Request._next_id += 1
        self.rid = Request._next_id
        self.conv = conv
        self.tseq = tseq
        self.main = main  # continues the conversation (siblings do not)
        self.out_target = out_target
        self.reset()

    def reset(self):
        self.phase = "waiting"
        self.P = 0
        self.hashes = []
        self.slots = []
        self.fork_src = -1
        self.reservations = []
        self.computed = 0
        self.out_done = 0
        self.anchor = 0          # checkpoint_end_pos
        self.midstep_anchor = 0  # midstep_anchor_pos
        self.demand = 0
        self.last_ckpt = 0
        self.kv_held = []
        self.kv_epoch = -1
        self.starve = 0
        self.admitted_pass = 0

    def seq(self, state_slot=None):
        return {
            "state_slot": (self.slots[0] if self.slots else -1)
            if state_slot is None else state_slot,
            "num_tokens": len(self.tseq) if self.phase != "waiting" else self.P,
            "has_per_req_cache": True,
            "midstep_anchor_pos": self.midstep_anchor,
            "checkpoint_end_pos": self.anchor,
        }


# --------------------------------------------------------------------------- #
# The generator
# --------------------------------------------------------------------------- #


class Generator:
    def __init__(self, cfg, seed, run_trace, out, no_dumps=False):
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.rt = run_trace
        self.runner = run_trace.TraceRunner()
        self.out = out  # file for trace lines
        self.results = []
        self.keep_results = True
        self.no_dumps = no_dumps or not cfg["dump_every"]
        self.ncalls = 0
        self.since_dump = 0
        self.op_counts = collections.Counter()
        self.stats = collections.Counter()
        self.width = 1 + cfg["num_spec"]
        kind = cfg["kind"]
        self.forks = kind == "fork"
        self.readable = cfg["readable"]
        self.min_fork = cfg["fork_tokens"]
        self.room = math.inf if kind == "none" else float(cfg["fork_tokens"])
        self.enabled = cfg["enabled"] and cfg["num_slots"] > 0
        self.interval = cfg["interval"]
        self.orig_slots = cfg["num_slots"]
        self.pass_no = 0
        self.kv = KVCache(cfg["kv_blocks"])
        self.convs = []
        self.waiting = collections.deque()
        self.running = []
        self.owner = {}  # live slot -> request (committed, rollback, reserved)
        self.next_cid = 0
        self.recent_hashes = collections.deque(maxlen=256)
        self.sys_prompts = [
            [self.rng.randrange(1, 50000) for _ in range(n)] for n in cfg["sys_prompts"]
        ]
        self.resize_target = None
        self.resize_deadline = 0
        self.grow_at = None
        self.in_call = False

    # ------------------------------ emitting ------------------------------ #

    @property
    def pool(self):
        return self.runner.pool

    def _emit(self, obj):
        line = json.dumps(obj, separators=(",", ":"))
        res = self.runner.run_line(line)
        if "error" in res or ("ret" not in res and "ok" not in res):
            raise GenError(
                f"reference refused line {self.ncalls + 1} of {self.cfg['name']}: "
                f"{line}\n  -> {res}"
            )
        self.out.write(line + "\n")
        if self.keep_results:
            self.results.append(self.rt.normalise(res))
        self.ncalls += 1
        self.since_dump += 1
        self.op_counts[obj["op"]] += 1
        return res.get("ret")

    def call(self, op, **args):
        obj = {"op": op}
        obj.update(args)
        ret = self._emit(obj)
        if not self.in_call:
            self.in_call = True
            try:
                if self.rng.random() < self.cfg["p_query"]:
                    self.random_query()
                if not self.no_dumps and self.since_dump >= self.cfg["dump_every"]:
                    self.dump()
            finally:
                self.in_call = False
        return ret

    def dump(self):
        self.since_dump = 0
        return self._emit({"op": "dump"})

    def config_line(self):
        cfg = self.cfg
        res = self._emit({
            "op": "config",
            "num_slots": cfg["num_slots"],
            "hash_block_size": HBS,
            "enabled": cfg["enabled"],
            "transfer": {
                "kind": cfg["kind"],
                "fork_tokens": cfg["fork_tokens"],
                "readable_midstep": cfg["readable"],
            },
        })
        return res

    # ------------------------- precondition checks ------------------------ #

    def _need(self, cond, what):
        if not cond:
            raise GenError(f"{self.cfg['name']} pass {self.pass_no}: {what}")

    def _in_range(self, s):
        return 0 <= s < self.pool.num_slots

    def chk_release(self, slots):
        seen = set()
        p = self.pool
        for s in slots:
            if s < 0:
                continue
            self._need(self._in_range(s), f"release of out-of-range slot {s}")
            self._need(s not in p._free, f"release of free slot {s}")
            self._need(s not in p._pinned, f"release of pinned slot {s}")
            self._need(s not in seen, f"slot {s} released twice in one set")
            seen.add(s)

    def take(self, req, slots):
        for s in slots:
            self._need(s not in self.owner, f"slot {s} handed out while owned")
            self.owner[s] = req

    def give(self, slots):
        for s in slots:
            if s >= 0:
                self._need(s in self.owner, f"slot {s} not owned")
                del self.owner[s]

    def check_invariants(self):
        """Every in-range slot is exactly one of free, pinned, owned."""
        p = self.pool
        for s in range(p.num_slots):
            states = (s in p._free) + (s in p._pinned) + (s in self.owner)
            if states != 1:
                raise GenError(
                    f"{self.cfg['name']} pass {self.pass_no}: slot {s} free="
                    f"{s in p._free} pinned={s in p._pinned} owned="
                    f"{s in self.owner}"
                )
        for req in self.running:
            if req.fork_src >= 0:
                self._need(req.fork_src in p._pinned,
                           f"fork source {req.fork_src} of r{req.rid} not pinned")

    # ------------------------------ queries ------------------------------- #

    def any_slot(self):
        return self.rng.randrange(self.pool.num_slots) if self.pool.num_slots else 0

    def any_hash(self):
        if self.recent_hashes and self.rng.random() < 0.8:
            return self.rng.choice(self.recent_hashes)
        return self.rng.getrandbits(63)

    def random_query(self):
        if self.pool.num_slots == 0:
            return
        r = self.rng.random()
        if r < 0.12:
            self._emit({"op": "num_free"})
        elif r < 0.26:
            self._emit({"op": "is_free", "slot": self.any_slot()})
        elif r < 0.40:
            self._emit({"op": "holds_checkpoint", "slot": self.any_slot()})
        elif r < 0.50:
            self._emit({"op": "pin_count", "slot": self.any_slot()})
        elif r < 0.60:
            self._emit({"op": "is_pinned", "slot": self.any_slot()})
        elif r < 0.67:
            self._emit({"op": "checkpoint_fates"})
        elif r < 0.74:
            self._emit({"op": "occupancy"})
        elif r < 0.88:
            self._emit({"op": "lookup", "hash": self.any_hash()})
        elif r < 0.94:
            if self.running and self.rng.random() < 0.7:
                seq = self.rng.choice(self.running).seq()
            else:
                seq = {"state_slot": -1, "num_tokens": self.rng.randrange(1, 5000),
                       "has_per_req_cache": self.rng.random() < 0.5,
                       "midstep_anchor_pos": 0, "checkpoint_end_pos": 0}
            self._emit({"op": "applies", "seq": seq})
        else:
            self._emit({"op": "has_free",
                        "count": self.rng.randrange(0, self.pool.num_slots + 2)})

    # ---------------------------- KV side --------------------------------- #

    def kv_hold(self, req, h):
        if req.kv_epoch != self.kv.epoch:
            req.kv_held = []
            req.kv_epoch = self.kv.epoch
        self.kv.ref(h)
        req.kv_held.append(h)

    def kv_release(self, req):
        if req.kv_epoch == self.kv.epoch:
            for h in req.kv_held:
                self.kv.unref(h)
        req.kv_held = []

    def kv_evict(self):
        for h in self.kv.evict():
            self.stats["kv_evicted"] += 1
            # Every eviction is an `unindex` in ATOM; one that names no
            # checkpoint is a no-op, so only a sample of those is written.
            if h in self.pool.hash_to_slot or self.rng.random() < 0.05:
                self.call("unindex", hash=h)
                self.recent_hashes.append(h)

    def kv_publish(self, req, first_block, end_block):
        hashes = req.tseq.full_hashes(end_block * HBS)
        for i in range(first_block, end_block):
            self.kv_hold(req, hashes[i])
        self.kv_evict()

    # ----------------------------- placement ------------------------------ #

    def checkpoint_limit(self, P):
        if not self.enabled or self.interval <= 0 or math.isinf(self.room):
            return 0
        return max(int((P - self.room) // self.interval) * self.interval, 0)

    def record_anchor(self, req):
        P = req.P
        nb = (P + HBS - 1) // HBS
        req.anchor = 0
        req.midstep_anchor = 0
        if not self.enabled or self.interval == 0 or math.isinf(self.room):
            return
        end = (int(P - self.room) // HBS) * HBS
        end = min(end, (nb - 1) * HBS)
        if end > 0:
            req.anchor = end
        if self.readable and self.rng.random() < 0.8:
            m = min(P // HBS, nb - 1) * HBS
            req.midstep_anchor = m if m > 0 else 0

    def cut(self, req, start, end):
        """ATOM's checkpoint_cut: earliest rung/demand/anchor in (start, end]."""
        if not self.enabled or self.readable:
            return 0
        rung = 0
        limit = self.checkpoint_limit(req.P)
        if limit:
            rung = min(end, limit)
            rung -= rung % self.interval
        cands = [p for p in (rung, req.demand, req.anchor) if p and start < p <= end]
        return min(cands) if cands else 0

    def midstep_positions(self, req, start, end):
        if not self.enabled or not self.readable:
            return []
        rung = 0
        limit = self.checkpoint_limit(req.P)
        if limit:
            rung = min(end, limit)
            rung -= rung % self.interval
        anchor = req.midstep_anchor or req.anchor
        out = []
        hashes = req.hashes
        cands = {p for p in (rung, req.demand, anchor) if p}
        if rung and self.rng.random() < self.cfg["p_dense"]:
            cands.update(range(rung - self.interval, start, -self.interval))
        for pos in sorted(cands):
            if not start < pos <= end:
                continue
            nblocks = pos // HBS
            if pos % HBS or nblocks > len(hashes):
                continue
            out.append([pos, hashes[nblocks - 1]])
        return out

    def keeps_at(self, req, pos, next_forward):
        """ATOM's checkpointers_at for an aimed (prefill) forward ending at pos,
        restricted to the one state class: whether `checkpoint` is called."""
        if not self.enabled or self.interval == 0 or pos <= 0:
            return False
        on_grid = self.interval > 0 and pos % self.interval == 0
        if not on_grid and pos != req.demand and pos != req.anchor:
            return False
        if self.readable:
            return False
        return next_forward >= self.room

    # ----------------------------- lifecycle ------------------------------ #

    def new_conversation(self):
        cfg = self.cfg
        rng = self.rng
        tokens = []
        if self.sys_prompts and rng.random() < cfg["p_sys"]:
            tokens.extend(rng.choice(self.sys_prompts))
        n = rng.randint(*cfg["first_msg"])
        tokens.extend(rng.randrange(1, 50000) for _ in range(n))
        conv = Conversation(self.next_cid, TokenSeq(tokens), rng.randint(*cfg["turns"]))
        self.next_cid += 1
        self.convs.append(conv)
        self.start_turn(conv)

    def start_turn(self, conv):
        rng = self.rng
        cfg = self.cfg
        conv.turns_left -= 1
        out = rng.randint(*cfg["output"])
        req = Request(conv, conv.tseq, out, main=True)
        conv.active = req
        self.waiting.append(req)
        self.stats["requests"] += 1
        if rng.random() < cfg["p_sibling"]:
            sib = Request(conv, conv.tseq.copy(), rng.randint(*cfg["output"]), main=False)
            self.waiting.append(sib)
            self.stats["siblings"] += 1

    def end_request(self, req, aborted=False):
        """The request is gone for good: hand the conversation on."""
        if not req.main:
            return
        conv = req.conv
        conv.active = None
        if aborted or conv.turns_left <= 0 or len(conv.tseq) > self.cfg["max_ctx"]:
            self.convs.remove(conv)
            return
        n = self.rng.randint(*self.cfg["next_msg"])
        conv.tseq.tokens.extend(self.rng.randrange(1, 50000) for _ in range(n))
        conv.next_pass = self.pass_no + self.rng.randint(*self.cfg["think"])

    def arrivals(self):
        cfg = self.cfg
        p = cfg["p_arrival"]
        if p <= 1:
            if len(self.convs) < cfg["max_convs"] and self.rng.random() < p:
                self.new_conversation()
        else:
            # Above one per pass: int(p) arrivals, one more with the
            # fraction's chance (a busy server's arrival rate).
            n = int(p) + (self.rng.random() < p - int(p))
            for _ in range(min(n, cfg["max_convs"] - len(self.convs))):
                self.new_conversation()
        for conv in list(self.convs):
            if conv.active is None and conv.next_pass <= self.pass_no:
                self.start_turn(conv)

    # ------------------------------ admission ----------------------------- #

    def admit(self, req):
        cfg = self.cfg
        rng = self.rng
        width = self.width
        if not self.call("has_free", count=width):
            return False
        req.P = len(req.tseq)
        P = req.P
        nb = (P + HBS - 1) // HBS
        hashes = req.tseq.full_hashes(P)
        req.hashes = hashes
        # The compressed (KV) hit: leading blocks the KV cache still holds,
        # never the last block of the prompt.
        kv_hit = 0
        for i in range(min(nb - 1, len(hashes))):
            if hashes[i] not in self.kv:
                break
            kv_hit += 1
        self.record_anchor(req)
        req.demand = 0
        L = 0
        if kv_hit > 0:
            probe = {"state_slot": -1, "num_tokens": P, "has_per_req_cache": True,
                     "midstep_anchor_pos": req.midstep_anchor,
                     "checkpoint_end_pos": req.anchor}
            L = self.call("resumable_hit", seq=probe, hit=kv_hit,
                          block_hashes=hashes[:kv_hit], assume_checkpointed=False)
            self._need(0 <= L <= kv_hit, "resumable_hit out of range")
            if L < kv_hit:
                wanted = self.call("resumable_hit", seq=probe, hit=kv_hit,
                                   block_hashes=hashes[:kv_hit],
                                   assume_checkpointed=True)
                if self.interval != 0 and cfg["demand"] and wanted > L and self.enabled:
                    req.demand = wanted * HBS
                self.stats["hits_cut"] += 1
        self.stats["kv_hits"] += kv_hit > 0
        src = -1
        if L > 0:
            src = self.call("lookup", hash=hashes[L - 1])
            self.stats["lookups"] += 1
        req.phase = "prefill"
        req.fork_src = -1
        if src >= 0:
            self.stats["resume_hits"] += 1
            self.stats["promoted_guess"] += src in self.pool._speculative
            self.call("promote", slot=src)
            shared = self.call("is_pinned", slot=src)
            if not shared:
                self._need(src in self.pool._free, f"resume source {src} not free")
                self.call("claim", slot=src)
            if self.call("has_free", count=width):
                slots = self.pop_set(width)
                self._need(src not in self.pool._free, "pin of a free slot")
                self.call("pin", slot=src, reader_is_next_batch=False)
                req.fork_src = src
                self.stats["resume_fork_shared" if shared else "resume_fork"] += 1
            else:
                self._need(not shared, "no slot to resume into and the source is read")
                self.call("invalidate", slot=src)
                rest = self.pop_set(width - 1)
                slots = [src] + rest
                self.stats["resume_adopt"] += 1
        else:
            slots = self.pop_set(width)
            self.stats["cold_start"] += 1
        req.slots = slots
        self.take(req, slots)
        req.computed = L * HBS
        req.last_ckpt = req.computed
        req.kv_epoch = self.kv.epoch
        req.kv_held = []
        for i in range(L):
            self.kv_hold(req, hashes[i])
        return True

    def pop_set(self, count):
        self._need(len(self.pool._free) >= count, f"pop of {count} with too few free")
        if count == 1 and self.rng.random() < 0.5:
            return [self.call("pop")]
        return list(self.call("pop_many", count=count))

    # --------------------------- leaving the pool ------------------------- #

    def drop_request(self, req, why):
        """ATOM's deallocate: cancel reservations, release the set, drop the
        fork-source read."""
        if req.reservations:
            self.call("cancel_midstep", reservations=req.reservations)
            self.give([r[0] for r in req.reservations])
            req.reservations = []
            self.stats["midstep_cancelled"] += 1
        slots = list(req.slots)
        self.chk_release(slots)
        if len(slots) > 1 and self.rng.random() < 0.05:
            slots.insert(self.rng.randrange(len(slots) + 1), -1)
        self.call("release_many", slots=slots)
        self.give(req.slots)
        req.slots = []
        if req.fork_src >= 0:
            self._need(req.fork_src in self.pool._pinned, "drop of an unpinned source")
            self.call("drop_reader", slot=req.fork_src)
            self.stats[f"drop_reader_{why}"] += 1
            req.fork_src = -1
        elif self.rng.random() < 0.2:
            self.call("drop_reader", slot=-1)
        self.kv_release(req)
        if req in self.running:
            self.running.remove(req)

    def preempt(self, req):
        self.stats["preempted"] += 1
        self.drop_request(req, "preempt")
        out_target = req.out_target - req.out_done
        req.reset()
        req.out_target = max(out_target, 1)
        self.waiting.appendleft(req)

    def abort(self, req):
        self.stats["aborted"] += 1
        self.drop_request(req, "abort")
        self.end_request(req, aborted=True)

    def finish(self, req):
        self.stats["finished"] += 1
        self.drop_request(req, "finish")
        self.end_request(req)

    # ------------------------------ resizing ------------------------------ #

    def resize_phase(self):
        cfg = self.cfg
        rng = self.rng
        p = self.pool
        min_slots = max(2, 2 * self.width + 1, self.orig_slots // 2)
        if self.resize_target is None and self.grow_at is None:
            if rng.random() < cfg["p_resize"] and p.num_slots > min_slots:
                k = rng.randint(1, max(1, (p.num_slots - min_slots)))
                self.resize_target = p.num_slots - k
                self.resize_deadline = self.pass_no + rng.randint(5, 40)
                self.stats["shrink_campaigns"] += 1
        relocs = []
        if self.resize_target is not None:
            while p.num_slots > self.resize_target and p.num_slots >= 2:
                r = self.call("retire_top")
                if r is None:
                    self.stats["retire_null"] += 1
                    break
                self._need(r["retired"] == p.num_slots, "retire_top retired a non-top slot")
                dst = r["relocated_to"]
                top = r["retired"]
                if dst < 0:
                    self.stats["retire_plain" if not r["held_checkpoint"]
                               else "retire_spent"] += 1
                    self._need(top not in self.owner, "retired a live slot in place")
                else:
                    if r["held_checkpoint"]:
                        self.stats["retire_rehomed"] += 1
                        self._need(top not in self.owner, "rehomed a live slot")
                    else:
                        owner = self.owner.pop(top, None)
                        self._need(owner is not None, f"relocated unowned slot {top}")
                        self._need(dst not in self.owner, "relocated onto a live slot")
                        self.owner[dst] = owner
                        if top in owner.slots:
                            owner.slots[owner.slots.index(top)] = dst
                        else:
                            raise GenError(f"relocated slot {top} not in r{owner.rid}'s set")
                        self.stats["retire_live_relocated"] += 1
                    self.call("record_relocation", src=top, dst=dst)
                    relocs.append([top, dst])
            if p.num_slots <= self.resize_target or self.pass_no > self.resize_deadline:
                self.resize_target = None
                self.grow_at = self.pass_no + rng.randint(5, 60)
        if relocs or rng.random() < 0.1:
            got = self.call("take_relocations")
            self._need(got == relocs, f"take_relocations {got} != recorded {relocs}")
        if self.grow_at is not None and self.pass_no >= self.grow_at:
            goal = self.orig_slots + (rng.randint(0, 4) if rng.random() < 0.3 else 0)
            missing = goal - p.num_slots
            while missing > 0:
                k = rng.randint(1, missing) if rng.random() < 0.4 else missing
                self.call("extend", count=k)
                missing -= k
                self.stats["extends"] += 1
            self.grow_at = None

    # ------------------------------- a pass ------------------------------- #

    def after_release_pins(self):
        for req in self.running:
            if req.fork_src >= 0 and req.fork_src not in self.pool._pinned:
                req.fork_src = -1  # the clock returned it; never drop it now
                self.stats["fork_src_expired"] += 1

    def schedule_prefill(self, req, budget):
        """Plan req's next chunk; returns (start, end) or None."""
        start = req.computed
        end = min(req.P, start + budget)
        if end <= start:
            return None
        target = self.cut(req, start, end)
        if target:
            end = target
        if req.fork_src >= 0 and end - start < self.min_fork:
            n = self.call("pin_count", slot=req.fork_src)
            self._need(n >= 1, "pending fork source not pinned")
            if n == 1:
                self.cancel_fork(req)
            else:
                # Somebody else reads it: keep the fork, do not shorten.
                end = min(req.P, start + self.min_fork)
                self.stats["fork_cancel_refused"] += 1
        if self.readable:
            positions = self.midstep_positions(req, start, end)
            if positions or self.rng.random() < 0.2:
                res = self.call("reserve_midstep", seq=req.seq(), positions=positions)
                res = [list(r) for r in res]
                self.take(req, [r[0] for r in res])
                req.reservations = res
                self.stats["midstep_reserved"] += len(res)
                if len(res) < len(positions):
                    self.stats["midstep_short"] += 1
        return (start, end)

    def order_waiting(self):
        """Longest-prefix-match admission order (stable; preempted first)."""
        def hit(req):
            hashes = req.tseq.full_hashes(len(req.tseq))
            n = 0
            for h in hashes[:-1]:
                if h not in self.kv:
                    break
                n += 1
            return n
        keyed = [(-hit(r) if r.starve <= self.cfg["starve_passes"] else -10**9, i, r)
                 for i, r in enumerate(self.waiting)]
        keyed.sort(key=lambda t: (t[0], t[1]))
        self.waiting = collections.deque(r for _, _, r in keyed)

    def cancel_fork(self, req):
        """ATOM's cancel_state_fork when nobody else reads the source."""
        src = req.fork_src
        fresh = req.slots[0]
        self.chk_release([fresh])
        self.call("release", slot=fresh)
        self.give([fresh])
        self.call("invalidate", slot=src)
        self._need(src in self.pool._pinned, "unpin of an unpinned slot")
        self.call("unpin", slot=src)
        req.slots[0] = src
        self.take(req, [src])
        req.fork_src = -1
        self.stats["fork_cancel_takeover"] += 1

    def do_checkpoint(self, req, pos):
        blocks = pos // HBS
        h = req.tseq.full_hashes(blocks * HBS)[blocks - 1]
        slot = req.slots[0]
        p = self.pool
        self._need(slot not in p._free and slot not in p._pinned and
                   self.owner.get(slot) is req, "checkpoint of a slot that is not live")
        self._need(req.fork_src < 0, "checkpoint with a fork still pending")
        if h in self.pool.hash_to_slot and self.enabled and self.forks:
            self.stats["refile"] += 1
        r = self.call("checkpoint", seq=req.seq(), boundary_blocks=blocks, hash=h)
        self.recent_hashes.append(h)
        req.last_ckpt = pos
        if r["state_fork_src"] >= 0:
            self._need(r["state_fork_src"] == slot, "checkpoint forked another slot")
            self.give([slot])
            req.slots[0] = r["state_slot"]
            self.take(req, [r["state_slot"]])
            req.fork_src = slot
            self.stats["checkpoint_forked"] += 1
            if self.rng.random() < 0.08:
                # Demote what was just handed over (a guess after all).
                self.call("mark_speculative", slot=slot)
        else:
            self._need(r["state_slot"] == slot, "unforked checkpoint moved the seq")
            self.stats["checkpoint_noop_or_dropped"] += 1

    def one_pass(self):
        cfg = self.cfg
        rng = self.rng
        self.pass_no += 1
        self.call("release_pins")
        self.after_release_pins()
        if cfg["resize"]:
            self.resize_phase()
        if cfg["p_clear"] and rng.random() < cfg["p_clear"]:
            self.call("clear_index")
            self.kv.clear()
            self.stats["clear_index"] += 1
        self.arrivals()

        # Starvation: the head of the queue has waited too long, so preempt
        # the newest running request (recompute preemption).
        if (self.waiting and self.waiting[0].starve > cfg["starve_passes"]
                and self.running
                and self.pass_no - self.running[-1].admitted_pass > cfg["starve_passes"]):
            self.preempt(self.running[-1])
            self.waiting[0].starve = 0

        batch = []  # (req, kind, start, end)
        budget = cfg["prefill_budget"]
        if cfg["short_chunk_prob"] and rng.random() < cfg["short_chunk_prob"]:
            budget = rng.randint(8, 120)
        for req in list(self.running):
            if req.phase != "prefill" or budget <= 0:
                continue
            plan = self.schedule_prefill(req, budget)
            if plan:
                batch.append((req, "prefill") + plan)
                budget -= plan[1] - plan[0]
        if cfg["lpm"] and len(self.waiting) > 1:
            self.order_waiting()
        admitted = 0
        while (self.waiting and len(self.running) < cfg["max_running"]
               and budget > 0 and admitted < cfg["max_admit"]):
            req = self.waiting[0]
            if not self.admit(req):
                req.starve += 1
                self.stats["admission_deferred"] += 1
                break
            self.waiting.popleft()
            self.running.append(req)
            req.admitted_pass = self.pass_no
            admitted += 1
            self.stats["admitted"] += 1
            plan = self.schedule_prefill(req, budget)
            if plan:
                batch.append((req, "prefill") + plan)
                budget -= plan[1] - plan[0]
        for req in self.running:
            if req.phase == "decode":
                if req.fork_src >= 0 and 1 + cfg["num_spec"] < self.min_fork:
                    n = self.call("pin_count", slot=req.fork_src)
                    if n == 1:
                        self.cancel_fork(req)
                batch.append((req, "decode", 0, 0))

        # Preemption / abort before the forward.
        if self.running and rng.random() < cfg["p_preempt"]:
            # Half the time the newest (recompute preemption), else any.
            victim = self.running[-1] if rng.random() < 0.5 else rng.choice(self.running)
            batch = [b for b in batch if b[0] is not victim]
            self.preempt(victim)
        if self.running and rng.random() < cfg["p_abort"]:
            victim = rng.choice(self.running)
            batch = [b for b in batch if b[0] is not victim]
            self.abort(victim)

        # The forward reads every pending fork source in the batch.
        for req, *_ in batch:
            if req.fork_src >= 0:
                req.fork_src = -1
                self.stats["fork_consumed"] += 1

        # Postprocess.
        for req, kind, start, end in batch:
            if req not in self.running:
                continue
            if kind == "prefill":
                self.post_prefill(req, start, end)
            else:
                self.post_decode(req)

    def post_prefill(self, req, start, end):
        rng = self.rng
        req.computed = end
        self.kv_publish(req, start // HBS, end // HBS)
        if req.reservations:
            seq = None if rng.random() < 0.1 else req.seq()
            self.stats["refile"] += sum(r[2] in self.pool.hash_to_slot
                                        for r in req.reservations)
            self.call("publish_midstep", reservations=req.reservations, seq=seq)
            for r in req.reservations:
                self.recent_hashes.append(r[2])
            self.give([r[0] for r in req.reservations])
            req.last_ckpt = max(req.last_ckpt, max(r[1] for r in req.reservations))
            self.stats["midstep_published"] += len(req.reservations)
            req.reservations = []
        elif self.keeps_at(req, end, req.P - end):
            self.do_checkpoint(req, end)
        elif not self.enabled and rng.random() < 0.1 and end >= HBS:
            # The pool does not apply: a probe the pool must ignore.
            self.do_checkpoint(req, (end // HBS) * HBS)
        if end >= req.P:
            # The last prefill chunk samples the first output token.
            req.phase = "decode"
            req.tseq.tokens.append(rng.randrange(1, 50000))
            req.out_done = 1
            if req.out_done >= req.out_target:
                self.finish(req)

    def post_decode(self, req):
        cfg = self.cfg
        rng = self.rng
        k = 1 + rng.randint(0, cfg["num_spec"])
        k = min(k, req.out_target - req.out_done)
        req.tseq.tokens.extend(rng.randrange(1, 50000) for _ in range(k))
        req.out_done += k
        committed = len(req.tseq) - 1
        old_blocks = (committed - k) // HBS
        new_blocks = committed // HBS
        if new_blocks > old_blocks:
            self.kv_publish(req, old_blocks, new_blocks)
        stopping = req.out_done >= req.out_target
        next_forward = 0 if stopping else 1
        if (self.enabled and self.interval > 0 and committed % HBS == 0
                and committed - req.last_ckpt >= self.interval
                and next_forward >= self.room):
            self.do_checkpoint(req, committed)
        if stopping:
            self.finish(req)

    # -------------------------------- run --------------------------------- #

    def run(self, target_calls):
        self.config_line()
        idle = 0
        while self.ncalls < target_calls:
            before = self.ncalls
            self.one_pass()
            self.check_invariants()
            idle = idle + 1 if self.ncalls == before + 1 else 0
            if idle > 5000:
                raise GenError("no progress")
        self.call("checkpoint_fates")
        self.call("occupancy")
        if not self.no_dumps:
            self.dump()
        return self.results


# --------------------------------------------------------------------------- #
# Driver
# --------------------------------------------------------------------------- #

COVERED_OPS = [
    "has_free", "num_free", "is_free", "holds_checkpoint", "pop", "pop_many",
    "claim", "mark_speculative", "promote", "release", "release_many", "extend",
    "retire_top", "applies", "lookup", "resumable_hit", "reserve_midstep",
    "publish_midstep", "cancel_midstep", "checkpoint", "checkpoint_fates",
    "occupancy", "record_relocation", "take_relocations", "unindex",
    "clear_index", "invalidate", "pin", "is_pinned", "pin_count", "unpin",
    "drop_reader", "release_pins", "dump",
]


def config_seed(seed, name):
    return (seed * 1000003 + zlib.crc32(name.encode())) & 0xFFFFFFFF


def generate(cfg, seed, run_trace, trace_path, calls=None, no_dumps=False,
             keep_results=True):
    Request._next_id = 0
    target = calls if calls is not None else cfg["calls"]
    with open(trace_path, "w", encoding="utf-8") as out:
        gen = Generator(cfg, config_seed(seed, cfg["name"]), run_trace, out, no_dumps)
        gen.keep_results = keep_results
        gen.run(target)
    return gen


def report(gen, path):
    fates = gen.pool.checkpoint_fates()
    print(f"== {os.path.basename(path)}: {gen.ncalls - 1} calls, "
          f"{gen.pass_no} passes, final num_slots {gen.pool.num_slots}")
    print("   ops: " + ", ".join(f"{op}={gen.op_counts[op]}" for op in COVERED_OPS))
    missing = [op for op in COVERED_OPS if not gen.op_counts[op]]
    if missing:
        print("   ops not emitted: " + ", ".join(missing))
    print("   fates: " + ", ".join(f"{k[12:]}={v}" for k, v in fates.items()))
    print("   model: " + ", ".join(f"{k}={v}" for k, v in sorted(gen.stats.items())))


def write_expected(run_trace_path, trace_path, expected_path, results):
    subprocess.run([sys.executable, run_trace_path, trace_path, "-o", expected_path],
                   check=True)
    with open(expected_path, encoding="utf-8") as f:
        got = f.read().splitlines()
    if results is not None and got != results:
        for i, (a, b) in enumerate(zip(got, results)):
            if a != b:
                raise GenError(f"{expected_path}: run_trace.py line {i + 1} differs "
                               f"from the in-process run:\n  {a}\n  {b}")
        raise GenError(f"{expected_path}: {len(got)} lines, in-process {len(results)}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", help="write NAME.jsonl (+ NAME.expected.jsonl) here")
    ap.add_argument("--seed", type=int, default=1, help="base seed (default 1)")
    ap.add_argument("--only", help="comma-separated config names")
    ap.add_argument("--calls", type=int, help="calls per trace (approximate)")
    ap.add_argument("--reference-dir", default=DEFAULT_REFERENCE_DIR)
    ap.add_argument("--no-expected", action="store_true",
                    help="do not run run_trace.py to write NAME.expected.jsonl")
    ap.add_argument("--random", type=int, metavar="K",
                    help="generate K traces with configurations drawn from --seed")
    ap.add_argument("--long", metavar="PATH", help="write one long trace, no dumps")
    ap.add_argument("--long-config", help="base the long trace on this config")
    ap.add_argument("--long-slots", type=int, metavar="N",
                    help="give the long trace's pool N slots")
    ap.add_argument("--list", action="store_true", help="list the configurations")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)

    if args.list:
        for name, c in {**CONFIGS, **LONG_CONFIGS}.items():
            long = " (--long-config)" if name in LONG_CONFIGS else ""
            print(f"{name}{long}: slots={c['num_slots']} kind={c['kind']} "
                  f"fork_tokens={c['fork_tokens']} midstep={c['readable']} "
                  f"spec={c['num_spec']} resize={c['resize']} enabled={c['enabled']} "
                  f"running={c['max_running']} calls={c['calls']}")
        return 0

    reference_dir = os.path.abspath(args.reference_dir)
    run_trace = load_run_trace(reference_dir)
    run_trace_path = os.path.join(reference_dir, "run_trace.py")

    if args.long:
        name = args.long_config or LONG_CONFIG["name"]
        known = {**LONG_CONFIGS, **CONFIGS}
        if name not in known:
            ap.error(f"--long-config {name}: not one of {', '.join(known)}")
        cfg = dict(known[name])
        cfg["dump_every"] = 0
        if args.long_slots:
            cfg["num_slots"] = args.long_slots
        calls = args.calls or 200000
        gen = generate(cfg, args.seed, run_trace, args.long, calls=calls,
                       no_dumps=True, keep_results=False)
        if not args.quiet:
            report(gen, args.long)
        return 0

    if not args.out_dir:
        ap.error("--out-dir (or --long, --list) is required")
    os.makedirs(args.out_dir, exist_ok=True)
    if args.random:
        rng = random.Random(args.seed)
        cfgs = [random_config(rng, i, args.calls or 2500) for i in range(args.random)]
    else:
        names = args.only.split(",") if args.only else list(CONFIGS)
        unknown = [n for n in names if n not in CONFIGS]
        if unknown:
            ap.error(f"unknown config(s) {unknown}; see --list")
        cfgs = [CONFIGS[n] for n in names]
    for cfg in cfgs:
        trace = os.path.join(args.out_dir, cfg["name"] + ".jsonl")
        gen = generate(cfg, args.seed, run_trace, trace, calls=args.calls)
        if not args.no_expected:
            expected = os.path.join(args.out_dir, cfg["name"] + ".expected.jsonl")
            write_expected(run_trace_path, trace, expected, gen.results)
        if not args.quiet:
            report(gen, trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())

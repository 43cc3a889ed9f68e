#!/usr/bin/python3
"""A scheduler and model runner loop over statecached: TinyMamba served with
its recurrent state in the daemon's slots, every pass in client/README.md's
call order. Documentation by example: the integration guide's code, run for
real.

    build/bin/statecached --model_id=example/tiny-mamba --hash_block_size=16 \\
        --layout=client/python/examples/model_runner/tiny_mamba.layout.json &
    PYTHONPATH=build/python /usr/bin/python3 \\
        client/python/examples/model_runner/scheduler.py [--address ADDR]

It runs multi-turn conversations (each turn's prompt is the previous prompt,
the model's reply and a new user message) and checks every turn against a
from-scratch run of the same prompt, bit for bit. See README.md here.

One pass (Scheduler.run_pass):

  before the forward, one Step:
    begin_pass                  apply its `moves` (a shrink moved a live
                                request's slot) before anything else
    admit                       new requests, with their block hashes and
                                the KV cache's hit
    adopt_fork_source           a request whose next chunk is too short to
                                fork (see Scheduler.plan_adopt)
    reserve                     midstep checkpoints the forward will pass
  and, only when a request just admitted will pass a midstep boundary, a
  second Step with its `reserve` (its start is admit's blocks_resumed,
  unknown when the first Step was built).

  the forward, per request:
    read   fork_src if set; else slot 0 if the request resumed in place
           (adopted, or from the host tier) or has computed tokens; else
           nothing: a cold start begins from the zero state (the slot's bytes
           are undefined and never read)
    write  slot 0 (a speculative verify: slots 0..k, the state after each
           token), and each reservation's slot as the forward passes its
           position

  after the forward, one Step:
    consume_fork                the forks this forward read
    publish                     the reservations it wrote
    checkpoint (or snapshot)    requests whose state sits exactly at their
                                prompt's last full block, under that
                                block's hash
    copy                        speculative decoding: the accepted rollback
                                slot onto slot 0
    release                     finished requests
    unindex                     KV blocks the KV cache evicted
"""

import argparse
import base64
import hashlib
import json
import os
import struct
import sys
from dataclasses import dataclass, field

import numpy as np

import statecache

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_mamba  # noqa: E402
from runner import ModelRunner  # noqa: E402

MODEL_ID = "example/tiny-mamba"
BLOCK = 16          # hash_block_size: tokens per block hash
CHUNK = 40          # prefill tokens per forward, at most
MAX_ADMIT = 4       # admissions per pass
MIDSTEP_EVERY = 2   # a midstep checkpoint every this many blocks (0: none)
LAYOUT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "tiny_mamba.layout.json")

RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9


def block_hashes(tokens, block=BLOCK, namespace=b""):
    """The prefix-cache hashes of `tokens`: one per full block, each chained
    on the one before (equal hashes mean equal prefixes), in [0, 2**63)."""
    out, h = [], namespace
    for i in range(len(tokens) // block):
        data = struct.pack("<%dq" % block, *tokens[i * block:(i + 1) * block])
        h = hashlib.blake2b(h + data, digest_size=8).digest()
        out.append(int.from_bytes(h, "little") >> 1)
    return out


class KvCache:
    """The engine's prefix cache, as far as the scheduler sees it: the block
    hashes whose tokens a forward has computed (TinyMamba has no attention,
    so this stands for a hybrid model's KV blocks). With a `capacity` it
    evicts the least recently used blocks, which the scheduler unindexes."""

    def __init__(self, capacity=None):
        self.capacity = capacity
        self.blocks = {}        # hash -> None, in LRU order
        self.evicted = []

    def hit_blocks(self, hashes):
        n = 0
        while n < len(hashes) and hashes[n] in self.blocks:
            self.blocks[hashes[n]] = self.blocks.pop(hashes[n])
            n += 1
        return n

    def add(self, hashes):
        for h in hashes:
            self.blocks.pop(h, None)
            self.blocks[h] = None
        while self.capacity is not None and len(self.blocks) > self.capacity:
            oldest = next(iter(self.blocks))
            del self.blocks[oldest]
            self.evicted.append(oldest)

    def take_evicted(self):
        out, self.evicted = self.evicted, []
        return out


@dataclass
class Request:
    id: str
    prompt: list            # token ids
    max_new: int            # tokens to generate
    block: int = BLOCK
    # The daemon's answers.
    slots: list = field(default_factory=list)   # [0] committed, [1:] rollback
    read_from: int = -1     # the slot the next forward reads (-1: slots[0])
    pos: int = 0            # tokens whose state the next forward reads
    checkpointed: bool = False
    reservations: list = field(default_factory=list)  # (position, slot)
    output: list = field(default_factory=list)
    # What happened, for the caller to check.
    how: str = ""           # cold, miss, fork, adopt, tier
    blocks_resumed: int = 0
    kv_hit_blocks: int = 0
    resumed_state: bytes = None   # the state the first forward read
    prefill_state: bytes = None   # the state after the whole prompt
    logits: np.ndarray = None     # after the whole prompt
    accepted: list = field(default_factory=list)  # speculative: per verify
    forwards: int = 0
    # Placement advice (an advised session): prefill positions to
    # checkpoint besides the anchor (the branch point, ladder rungs), and
    # the continuation's first block (0: none).
    wanted: list = field(default_factory=list)
    continuation: int = 0
    # This pass's.
    read_fork: bool = False
    accept_index: int = 0

    def __post_init__(self):
        self.hashes = block_hashes(self.prompt, self.block)

    @property
    def boundary(self):
        """The prompt's last full block, in tokens: where the next turn
        resumes from (the anchor)."""
        return len(self.prompt) // self.block * self.block

    @property
    def finished(self):
        return len(self.output) >= self.max_new


class Scheduler:
    """Runs requests to completion over one session, a pass at a time.

    Args:
        session: an attached statecache.Session (its identity's
            hash_block_size and num_spec are the daemon's).
        runner: a ModelRunner over session.memory.
        kv: the KvCache.
        max_admit, chunk: admissions per pass, prefill tokens per forward.
        midstep_every: a midstep checkpoint every this many blocks inside a
            prefill (reserve/publish; only when the transfer is
            readable_midstep), 0 for none.
        snapshot: checkpoint with `snapshot` (the daemon copies the slot)
            instead of the fork `checkpoint`.
        advised: follow the daemon's placement advice (the session attached
            with advise_placement): checkpoint where each admit result says
            (its branch point and ladder rungs, each a chunk's end; the
            prompt's end; every block boundary the decode reaches) and no
            placement of its own (no midstep_every).
        cache_decode: the KV cache also keeps the full blocks of each
            reply, as engines' prefix caches do, so a next turn's hit runs
            through the reply.
        ignore_fork_src: a deliberately broken runner that reads slot 0
            where it should read fork_src (the tests' negative control).
        on_pass: called with the Scheduler after each pass.
        columnar: build the pass's after-forward step with the columnar
            API (session.columns(): one call per kind for the whole batch,
            results read as arrays) instead of the step builder.
    """

    def __init__(self, session, runner, kv, max_admit=MAX_ADMIT, chunk=CHUNK,
                 midstep_every=MIDSTEP_EVERY, snapshot=False,
                 ignore_fork_src=False, on_pass=None, advised=False,
                 cache_decode=False, columnar=False):
        self.session = session
        self.runner = runner
        self.kv = kv
        self.block = session.identity.hash_block_size
        self.num_spec = session.identity.num_spec
        self.width = 1 + self.num_spec
        self.fork_tokens = session.transfer.fork_tokens
        self.forks = session.transfer.kind == "fork"
        midstep = session.transfer.readable_midstep
        self.midstep_every = midstep_every if midstep and not advised else 0
        if advised and not session.placement_advised:
            raise ValueError("advised: the session gets no placement advice "
                             "(attach with advise_placement=True)")
        self.advised = advised
        self.cache_decode = cache_decode
        self.max_admit = max_admit
        self.chunk = max(chunk, self.fork_tokens)
        self.snapshot = snapshot
        self.ignore_fork_src = ignore_fork_src
        self.on_pass = on_pass
        self.columnar = columnar
        self.waiting = []
        self.running = []
        self.passes = 0
        self.counts = {"steps": 0, "moves": 0, "adopt_fork_source": 0,
                       "adopt_refused": 0, "reserved": 0, "published": 0,
                       "checkpoints_kept": 0, "checkpoints_dropped": 0,
                       "copies": 0, "prefilled": 0, "prompt_tokens": 0}
        self.moves = []

    # ---- the loop

    def run(self, requests):
        """Admits `requests` (as slots allow) and runs passes until every
        one finished."""
        self.waiting.extend(requests)
        self.counts["prompt_tokens"] += sum(len(r.prompt) for r in requests)
        idle = 0
        while self.waiting or self.running:
            self.run_pass()
            # Nothing runs and nothing fits: passes tick the pin clocks
            # (pinned fork sources come back); a pool too small for one
            # request never drains.
            idle = idle + 1 if not self.running else 0
            if idle > 4:
                raise RuntimeError("no request fits in the pool (%d slots "
                                   "wide)" % self.width)

    def send(self, step):
        self.counts["steps"] += 1
        return step.send()

    def run_pass(self):
        self.passes += 1
        admitted = self.before_forward()
        forwarded = list(self.running)
        for r in forwarded:
            self.forward(r)
        self.after_forward(forwarded)
        if self.on_pass is not None:
            self.on_pass(self)
        return admitted

    # ---- before the forward

    def before_forward(self):
        step = self.session.step().begin_pass()
        batch = self.waiting[:self.max_admit]
        for r in batch:
            r.kv_hit_blocks = self.kv.hit_blocks(r.hashes)
            step.admit(r.id, width=self.width, num_tokens=len(r.prompt),
                       anchor_pos=r.boundary, block_hashes=r.hashes,
                       kv_hit_blocks=r.kv_hit_blocks)
        adopting = [r for r in self.running if self.plan_adopt(r)]
        for r in adopting:
            step.adopt_fork_source(r.id)
        reserving = [(r, self.midstep_positions(r)) for r in self.running]
        reserving = [(r, p) for r, p in reserving if p]
        for r, positions in reserving:
            step.reserve(r.id, positions)
        results = self.send(step)

        begin = results[0]
        self.apply_moves(begin.moves)
        at = 1
        admitted = []
        for r, a in zip(batch, results[at:at + len(batch)]):
            if a.code == RESOURCE_EXHAUSTED:     # no free slots: later
                continue
            a.check()
            self.waiting.remove(r)
            self.running.append(r)
            admitted.append(r)
            r.slots = list(a.slots)
            r.read_from = a.fork_src
            r.blocks_resumed = a.blocks_resumed
            r.pos = a.blocks_resumed * self.block
            # Resumed exactly at the anchor: that checkpoint exists.
            r.checkpointed = r.pos == r.boundary
            if self.advised:
                self.follow_advice(r, a)
            if a.blocks_resumed == 0:
                r.how = "miss" if r.kv_hit_blocks else "cold"
            elif a.from_tier:       # the host tier's image is in slot 0
                r.how = "tier"
            else:
                r.how = "fork" if a.fork_src >= 0 else "adopt"
        at += len(batch)
        for r, result in zip(adopting, results[at:at + len(adopting)]):
            self.adopted(r, result)
        at += len(adopting)
        for (r, _), result in zip(reserving, results[at:]):
            self.reserved(r, result)

        # A request just admitted starts where admit said (blocks_resumed):
        # only now are the midstep positions its forward passes known, so
        # their reservations take a Step of their own.
        fresh = [(r, self.midstep_positions(r)) for r in admitted]
        fresh = [(r, p) for r, p in fresh if p]
        if fresh:
            step = self.session.step()
            for r, positions in fresh:
                step.reserve(r.id, positions)
            for (r, _), result in zip(fresh, self.send(step)):
                self.reserved(r, result)
        return admitted

    def apply_moves(self, moves):
        """A shrink moved live slots (the daemon already moved the bytes):
        re-point them before the forward."""
        by_id = {r.id: r for r in self.running}
        for m in moves:
            self.counts["moves"] += 1
            self.moves.append(m)
            r = by_id.get(m.request_id)
            if r is None:
                continue
            if r.slots[m.index] != m.from_slot:
                raise RuntimeError("move %s: the request's slot %d is %d"
                                   % (m, m.index, r.slots[m.index]))
            r.slots[m.index] = m.to_slot

    def next_chunk(self, r):
        """The tokens the request's next forward commits: a prefill chunk
        that stops at the prompt's last full block (so the state sits
        exactly there for the checkpoint), then the rest of the prompt, then
        one decoded token a pass."""
        if r.pos < len(r.prompt):
            target = r.boundary if r.pos < r.boundary else len(r.prompt)
            # An advised position inside the chunk ends it there.
            target = min([p for p in r.wanted if p > r.pos] + [target])
            return min(self.chunk, target - r.pos)
        return 1

    def follow_advice(self, r, a):
        """Where an advised request's checkpoints go, from its admit result:
        the branch point and the ladder rungs past where it resumed and
        short of its anchor (the anchor is checkpointed as always), and the
        continuation (decode boundaries, after_forward)."""
        wanted = set()
        if a.branch_blocks:
            wanted.add(a.branch_blocks * self.block)
        if a.ladder_blocks:
            step = a.ladder_blocks * self.block
            wanted.update(range(step, r.boundary, step))
        r.wanted = sorted(p for p in wanted if r.pos < p < r.boundary)
        r.continuation = a.continuation_blocks

    def plan_adopt(self, r):
        """Whether the request's next forward reads a fork source with a
        chunk shorter than the transfer's fork_tokens (e.g. a prompt ending
        a few tokens past the checkpointed block): a kernel cannot write a
        self-contained destination from so few tokens, so the request takes
        the source over and continues in place.

        It is done before the forward, never after it: a forward that wrote
        the source in place before adopt_fork_source would leave the index
        serving bytes already overwritten (another reader resuming from it
        meanwhile, even in the same pass, reads the wrong state), and adopt
        is refused when another reader exists. Adopting first takes the
        checkpoint out of the index before its bytes change; if refused
        (FAILED_PRECONDITION), the forward forks after all."""
        return (self.forks and r.read_from >= 0 and
                self.next_chunk(r) < self.fork_tokens)

    def adopted(self, r, result):
        if result.code == FAILED_PRECONDITION:  # another reader: fork
            self.counts["adopt_refused"] += 1
            return
        result.check()
        self.counts["adopt_fork_source"] += 1
        r.slots[0] = result.state_slot
        r.read_from = -1

    def midstep_positions(self, r):
        """(position, hash) of the block boundaries the request's next
        prefill chunk reaches, every midstep_every blocks, short of the
        anchor (which `checkpoint` files)."""
        if not self.midstep_every or r.pos >= r.boundary:
            return []
        end = r.pos + self.next_chunk(r)
        step = self.midstep_every * self.block
        first = (r.pos // step + 1) * step
        return [(p, r.hashes[p // self.block - 1])
                for p in range(first, min(end, r.boundary - 1) + 1, step)]

    def reserved(self, r, result):
        result.check()
        r.reservations = [(x.position, x.slot) for x in result.reservations]
        self.counts["reserved"] += len(r.reservations)

    # ---- the forward

    def source_slot(self, r):
        """Where the request's next forward reads its state: None (the zero
        state) for a cold start, whose slot holds undefined bytes."""
        if r.pos == 0:
            return None
        if r.read_from >= 0 and not self.ignore_fork_src:
            return r.read_from
        return r.slots[0]

    def forward(self, r):
        source = self.source_slot(r)
        r.read_fork = r.read_from >= 0
        r.accept_index = 0
        if r.pos < len(r.prompt):
            n = self.next_chunk(r)
            read, state, logits = self.runner.run(
                r.prompt[r.pos:r.pos + n], source, r.slots[0],
                midstep=r.reservations, start=r.pos)
            if r.forwards == 0:
                r.resumed_state = read.tobytes()
            r.pos += n
            self.counts["prefilled"] += n
            self.kv.add(r.hashes[:r.pos // self.block])
            if r.pos == len(r.prompt):
                r.prefill_state = state.tobytes()
                r.logits = logits.copy()
                r.output.append(int(np.argmax(logits)))
        elif self.num_spec:
            self.verify(r, source)
        else:
            _, _, logits = self.runner.run([r.output[-1]], source, r.slots[0],
                                           start=r.pos)
            r.pos += 1
            r.output.append(int(np.argmax(logits)))
            if self.cache_decode and r.pos % self.block == 0:
                self.kv.add(self.computed_hashes(r))
        r.forwards += 1

    def computed_hashes(self, r):
        """The block hashes of the tokens the request's state has consumed
        (its prompt, then its reply but the last token sampled)."""
        return block_hashes((r.prompt + r.output)[:r.pos], self.block)

    def boundary_hash(self, r):
        """The hash a checkpoint of the request's state is filed under: that
        of the block ending where its state sits."""
        if r.pos <= len(r.prompt):
            return r.hashes[r.pos // self.block - 1]
        return self.computed_hashes(r)[-1]

    def checkpoint_here(self, r):
        """Whether the request's state sits where a checkpoint goes: its
        anchor (once); an advised prefill position; or, advised, a block
        boundary its decode reached past its continuation's first."""
        if r.pos == r.boundary and not r.checkpointed and r.boundary:
            return True
        if r.pos in r.wanted:
            return True
        return (r.continuation and r.pos > r.boundary
                and r.pos % self.block == 0
                and r.pos // self.block > r.continuation)

    def draft(self, r, k):
        """k draft tokens by prompt lookup: what followed the last token's
        latest earlier occurrence (a draft model stands here in a real
        engine)."""
        context = r.prompt + r.output
        last = context[-1]
        for i in range(len(context) - 2, -1, -1):
            if context[i] == last:
                follow = context[i + 1:i + 1 + k]
                return follow + [last] * (k - len(follow))
        return [last] * k

    def verify(self, r, source):
        """A speculative decode step: the pending token and k draft tokens
        in one forward, the state after each into slots 0..k; the accepted
        prefix's state is copied onto slot 0 by the daemon (after the
        forward, `copy`)."""
        k = self.num_spec
        draft = self.draft(r, k)
        logits = self.runner.run_states([r.output[-1]] + draft, source,
                                        r.slots[:k + 1])
        a = 0
        while a < k and int(np.argmax(logits[a])) == draft[a]:
            a += 1
        r.output += draft[:a] + [int(np.argmax(logits[a]))]
        del r.output[r.max_new:]
        r.pos += 1 + a
        r.accept_index = a
        r.accepted.append(a)

    # ---- after the forward

    def after_forward(self, forwarded):
        if self.columnar:
            return self.after_forward_columnar(forwarded)
        step = self.session.step()
        for r in forwarded:
            if r.read_fork:                 # the fork this forward read
                step.consume_fork(r.id)
                r.read_from = -1
        publishing = [r for r in forwarded if r.reservations]
        for r in publishing:
            step.publish(r.id)
        checkpointing = [r for r in forwarded if self.checkpoint_here(r)]
        for r in checkpointing:
            boundary_hash = self.boundary_hash(r)
            if self.snapshot:
                step.snapshot(r.id, position=r.pos, hash=boundary_hash)
            else:
                step.checkpoint(r.id, boundary_blocks=r.pos // self.block,
                                hash=boundary_hash)
        copying = [r for r in forwarded if r.accept_index]
        for r in copying:
            step.copy(r.id, from_index=r.accept_index, to_index=0)
        finished = [r for r in forwarded if r.finished]
        for r in finished:
            step.release(r.id)
            self.running.remove(r)
        evicted = self.kv.take_evicted()
        if evicted:
            step.unindex(evicted)
        if not len(step):
            return
        results = self.send(step)
        at = sum(r.read_fork for r in forwarded)
        for result in results[:at]:
            result.check()
        for r, result in zip(publishing, results[at:]):
            self.counts["published"] += result.check().published
            r.reservations = []
        at += len(publishing)
        for r, result in zip(checkpointing, results[at:]):
            result.check()
            if r.pos == r.boundary:
                r.checkpointed = True
            if r.pos in r.wanted:
                r.wanted.remove(r.pos)
            self.counts["checkpoints_kept" if result.kept
                        else "checkpoints_dropped"] += 1
            if result.kept and not self.snapshot:
                # The request moved: it writes state_slot from now on and
                # its next forward reads the checkpoint it left.
                r.slots[0] = result.state_slot
                r.read_from = result.fork_src
        at += len(checkpointing)
        for result in results[at:]:
            result.check()
        self.counts["copies"] += len(copying)


    def after_forward_columnar(self, forwarded):
        """after_forward through the columnar API: each kind's operations
        for the whole batch in one call, in the same order, and their
        results read by batch."""
        step = self.session.columns()
        forked = [r for r in forwarded if r.read_fork]
        consumed = step.consume_fork([r.id for r in forked])
        for r in forked:
            r.read_from = -1
        publishing = [r for r in forwarded if r.reservations]
        published = step.publish([r.id for r in publishing])
        checkpointing = [r for r in forwarded if self.checkpoint_here(r)]
        ids = [r.id for r in checkpointing]
        hashes = [self.boundary_hash(r) for r in checkpointing]
        if self.snapshot:
            checkpoints = step.snapshot(
                ids, position=[r.pos for r in checkpointing], hash=hashes)
        else:
            checkpoints = step.checkpoint(
                ids, boundary_blocks=[r.pos // self.block
                                      for r in checkpointing],
                hash=hashes)
        copying = [r for r in forwarded if r.accept_index]
        step.copy([r.id for r in copying],
                  from_index=[r.accept_index for r in copying], to_index=0)
        finished = [r for r in forwarded if r.finished]
        step.release([r.id for r in finished])
        for r in finished:
            self.running.remove(r)
        evicted = self.kv.take_evicted()
        if evicted:
            step.unindex(evicted)       # one operation: all these hashes
        if not len(step):
            return
        results = self.send(step)
        results[consumed].check()
        self.counts["published"] += int(
            results[published].check().published.sum())
        for r in publishing:
            r.reservations = []
        kept = results[checkpoints].check()
        for i, r in enumerate(checkpointing):
            if r.pos == r.boundary:
                r.checkpointed = True
            if r.pos in r.wanted:
                r.wanted.remove(r.pos)
            self.counts["checkpoints_kept" if kept.kept[i]
                        else "checkpoints_dropped"] += 1
            if kept.kept[i] and not self.snapshot:
                # The request moved: it writes state_slot from now on and
                # its next forward reads the checkpoint it left.
                r.slots[0] = int(kept.state_slot[i])
                r.read_from = int(kept.fork_src[i])
        results.check()  # the copies, releases and unindex
        self.counts["copies"] += len(copying)


# ------------------------------------------------------------ conversations


@dataclass
class Conversation:
    """Turn 0's prompt is turns[0]; turn t's is turn t-1's prompt, the
    model's reply to it and turns[t]."""

    id: str
    turns: list
    max_new: int = 8


@dataclass
class TurnResult:
    conversation: str
    turn: int
    request: str
    prompt: list
    max_new: int
    how: str                # cold, miss, fork, adopt, tier
    kv_hit_blocks: int
    blocks_resumed: int
    resumed_pos: int        # the position the first forward started at
    resumed_state: bytes    # the state it read there
    prefill_state: bytes    # the state after the prompt
    logits: bytes           # float32, after the prompt
    tokens: list            # generated
    accepted: list          # speculative: tokens accepted per verify

    def to_json(self):
        out = dict(self.__dict__)
        for name in ("resumed_state", "prefill_state", "logits"):
            out[name] = base64.b64encode(out[name]).decode()
        return out

    @classmethod
    def from_json(cls, d):
        d = dict(d)
        for name in ("resumed_state", "prefill_state", "logits"):
            d[name] = base64.b64decode(d[name])
        return cls(**d)


def run_conversations(scheduler, conversations, prefix="", turns=None,
                      history=None, after_turn=None):
    """Runs every conversation's turn 0 (as one batch of requests, admitted
    as slots allow), then every turn 1, ...; returns a TurnResult per turn,
    in order.

    `turns` (a range) runs only those turns, `history` ({conversation id:
    the tokens so far}, updated) carries the conversations from one call to
    the next (e.g. across a daemon restart); `after_turn(t)` runs after
    turn t."""
    if history is None:
        history = {}
    if turns is None:
        turns = range(max(len(c.turns) for c in conversations))
    results = []
    for t in turns:
        requests = []
        for c in conversations:
            if t < len(c.turns):
                prompt = history.get(c.id, []) + list(c.turns[t])
                requests.append((c, Request("%s%s/t%d" % (prefix, c.id, t),
                                            prompt, c.max_new,
                                            scheduler.block)))
        scheduler.run([r for _, r in requests])
        for c, r in requests:
            history[c.id] = r.prompt + r.output
            results.append(TurnResult(
                conversation=c.id, turn=t, request=r.id, prompt=r.prompt,
                max_new=r.max_new, how=r.how, kv_hit_blocks=r.kv_hit_blocks,
                blocks_resumed=r.blocks_resumed,
                resumed_pos=r.blocks_resumed * scheduler.block,
                resumed_state=r.resumed_state,
                prefill_state=r.prefill_state,
                logits=r.logits.tobytes(), tokens=list(r.output),
                accepted=list(r.accepted)))
        if after_turn is not None:
            after_turn(t)
    return results


def make_conversations(n=4, turns=3, seed=0, system_len=40, max_new=8,
                       vocab=tiny_mamba.VOCAB):
    """n conversations sharing one system prompt (seeded by nothing: every
    caller gets the same one), each with its own user messages (seeded by
    `seed`): the later turns resume at the previous prompt's last block,
    first turns at the shared system prompt's midstep checkpoints."""
    system = list(np.random.default_rng(12345).integers(0, vocab, system_len))
    rng = np.random.default_rng(seed)
    out = []
    for c in range(n):
        user = [list(rng.integers(0, vocab, int(rng.integers(9, 40))))
                for _ in range(turns)]
        out.append(Conversation("c%d" % c,
                                [[int(x) for x in system + user[0]]]
                                + [[int(x) for x in u] for u in user[1:]],
                                max_new))
    return out


# ------------------------------------------------------------ the reference


_REFERENCES = {}


def from_scratch(model, prompt, max_new, block=BLOCK):
    """The reference run of `prompt` from the zero state, with no cache:
    tiny_mamba.from_scratch with the state at every block boundary (the
    positions a resume can start at). Memoized."""
    key = (id(model), tuple(prompt), max_new, block)
    if key not in _REFERENCES:
        _REFERENCES[key] = tiny_mamba.from_scratch(
            model, prompt, max_new, range(0, len(prompt) + 1, block))
    return _REFERENCES[key]


def differences(model, turn):
    """The fields of `turn` (a TurnResult) that differ, bit for bit, from
    the from-scratch run of its prompt: [] when it matches."""
    ref = from_scratch(model, turn.prompt, turn.max_new)
    diffs = []
    resumed = ref["states"].get(turn.resumed_pos)
    if resumed is None or resumed.tobytes() != turn.resumed_state:
        diffs.append("resumed_state")
    if ref["state"].tobytes() != turn.prefill_state:
        diffs.append("prefill_state")
    if ref["logits"].tobytes() != turn.logits:
        diffs.append("logits")
    if ref["tokens"] != turn.tokens:
        diffs.append("tokens")
    return diffs


# ------------------------------------------------------------ main


def attach(client, num_spec=0, name="tiny-mamba-scheduler",
           advise_placement=False):
    return client.attach(model_id=MODEL_ID, hash_block_size=BLOCK,
                         num_spec=num_spec, client_name=name,
                         advise_placement=advise_placement)


def memory_refresher(client, num_spec=0):
    """What the runner calls when a slot lies past its mapping (the pool
    grew): attach again, read the region's description, detach."""
    def refresh():
        with attach(client, num_spec, "tiny-mamba-remap") as s:
            return s.memory
    return refresh


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None)
    parser.add_argument("--conversations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_spec", type=int, default=0)
    parser.add_argument("--prefix", default="",
                        help="request id prefix")
    parser.add_argument("--out", default=None,
                        help="write every TurnResult here (JSON)")
    args = parser.parse_args(argv)
    model = tiny_mamba.TinyMamba()
    with statecache.Client.connect(args.address) as client, \
            attach(client, args.num_spec) as session:
        runner = ModelRunner(model, session.memory,
                             memory_refresher(client, args.num_spec))
        scheduler = Scheduler(session, runner, KvCache())
        turns = run_conversations(
            scheduler, make_conversations(args.conversations, args.turns,
                                          args.seed), prefix=args.prefix)
    wrong = [(t.request, differences(model, t)) for t in turns
             if differences(model, t)]
    summary = {"turns": len(turns),
               "resumed": sum(t.blocks_resumed > 0 for t in turns),
               "prompt_tokens": scheduler.counts["prompt_tokens"],
               "prefilled_tokens": scheduler.counts["prefilled"],
               "wrong": wrong}
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "counts": scheduler.counts,
                       "turns": [t.to_json() for t in turns]}, f)
    print(json.dumps(summary))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

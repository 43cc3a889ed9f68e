"""The reference model runner (client/python/examples/model_runner/) against
real daemons: TinyMamba's recurrent state kept in the daemon's slots (real
gRPC on a Unix socket, real POSIX shared memory, nothing mocked), every
pass in client/README.md's call order, and every turn of every conversation
compared BIT FOR BIT with a from-scratch run of the same prompt: the state
the first forward read at the resumed position, the state after the prompt,
the logits after it and the generated tokens.

Scenarios: fork resumes (slot- and layer-major), misses, adopt resumes,
adopt_fork_source (and a second reader of the source), midstep
reserve/publish, snapshot with copy, speculative decoding with rollback
slots, the host tier, two scheduler processes on one daemon, warm restarts
(SIGTERM, SIGKILL), a shrink and a grow while passes run. Negative controls,
which the comparison must catch: a runner that ignores fork_src, a scheduler
that ignores begin_pass's moves, and adopt_fork_source after a forward that
continued in the source while another request reads it.

Every fresh region is first filled with NaN, so a runner that read a slot
whose bytes are undefined (a cold start's, a vacant one) would be caught.
"""

import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import statecache
from statecache.testing import Daemon

EXAMPLE = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir,
                                       "examples", "model_runner"))
sys.path.insert(0, EXAMPLE)
import runner as model_runner  # noqa: E402
import scheduler  # noqa: E402
import tiny_mamba  # noqa: E402

MODEL = tiny_mamba.TinyMamba()
BLOCK = scheduler.BLOCK
LAYOUT_FILE = scheduler.LAYOUT_FILE

# (scenario, prompt tokens, prefill tokens computed): printed at the end.
SUMMARY = []


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not SUMMARY:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line("prefill tokens computed, with the cache vs "
                            "without it (from scratch):")
        for name, total, computed in SUMMARY:
            reporter.write_line("  %-28s %5d vs %5d  (%2.0f%% saved)" % (
                name, computed, total, 100.0 * (total - computed) / total))


@pytest.fixture
def start():
    """start(num_slots, *flags, num_spec=0): a daemon serving TinyMamba's
    identity and layout file; stopped at the end, with any region a killed
    daemon left for its successor."""
    daemons = []

    def start_daemon(num_slots, *flags, num_spec=0):
        daemon = Daemon(["--model_id=" + scheduler.MODEL_ID,
                         "--hash_block_size=%d" % BLOCK,
                         "--num_slots=%d" % num_slots,
                         "--num_spec=%d" % num_spec,
                         "--layout=" + LAYOUT_FILE] + list(flags))
        daemons.append(daemon)
        return daemon

    yield start_daemon
    for daemon in daemons:
        log = daemon.log()
        daemon.close()
        for handle in set(re.findall(r"handle=/(\S+-kept)", log)):
            try:
                os.unlink("/dev/shm/" + handle)
            except FileNotFoundError:
                pass


def poison_region(runner):
    """NaN in every slot: what nobody wrote must never be read."""
    for slot in range(runner.memory.capacity_slots):
        runner.poison(slot)


def run(daemon, conversations, name=None, num_spec=0, kv=None, poison=True,
        turns=None, history=None, after_turn=None, before_run=None,
        scheduler_class=scheduler.Scheduler, **options):
    """The example's scheduler over a fresh session: returns (turn results,
    the Scheduler, GetStats after). `before_run(client)` runs once the
    session is attached."""
    with statecache.Client.connect(daemon.address) as client, \
            scheduler.attach(client, num_spec) as session:
        runner = model_runner.ModelRunner(
            MODEL, session.memory,
            scheduler.memory_refresher(client, num_spec))
        if poison:
            poison_region(runner)
        s = scheduler_class(session, runner, kv or scheduler.KvCache(),
                            **options)
        if before_run is not None:
            before_run(client)
        turns = scheduler.run_conversations(s, conversations, turns=turns,
                                            history=history,
                                            after_turn=after_turn)
        stats = client.admin.stats()
    assert not s.running and not s.waiting
    if name:
        SUMMARY.append((name, s.counts["prompt_tokens"],
                        s.counts["prefilled"]))
    return turns, s, stats


def wrong_turns(turns):
    """{request: [fields that differ from the from-scratch run]}."""
    out = {}
    for t in turns:
        diffs = scheduler.differences(MODEL, t)
        if diffs:
            out[t.request] = (t.how, t.resumed_pos, diffs)
    return out


def assert_bit_exact(turns):
    wrong = wrong_turns(turns)
    assert not wrong, "turns differing from the from-scratch run: %s" % wrong


def assert_resumed(turns, at_least=0.75):
    """Most follow-up turns resumed (else the comparison proves little)."""
    later = [t for t in turns if t.turn > 0]
    resumed = [t for t in later if t.blocks_resumed > 0]
    assert later and len(resumed) >= at_least * len(later), [
        (t.request, t.how, t.blocks_resumed) for t in later]
    for t in resumed:  # a resume reads a real, non-zero state
        assert t.resumed_state != tiny_mamba.TinyMamba.zero_state().tobytes()


def conversations(n=6, turns=3, seed=0, **kw):
    return scheduler.make_conversations(n, turns, seed, **kw)


# ------------------------------------------------------------ the model


def test_tiny_mamba_gives_the_same_bits_however_a_prefill_is_split():
    """The premise of every comparison below: the state after [0, P), then
    [P, N) from it, is the state after [0, N), bit for bit."""
    prompt = [int(x) for x in np.random.default_rng(1).integers(0, 64, 90)]
    whole, logits = MODEL.forward(prompt, MODEL.zero_state())
    for cut in (1, 16, 45, 89):
        state, _ = MODEL.forward(prompt[:cut], MODEL.zero_state())
        state = tiny_mamba.State.frombytes(state.copy().tobytes())
        state, split_logits = MODEL.forward(prompt[cut:], state)
        assert state.equals(whole)
        assert np.array_equal(split_logits, logits)
    assert all(a.dtype == np.float32 for a in whole.arrays().values())
    # ... and a different state gives different logits.
    other, other_logits = MODEL.forward(prompt[1:], MODEL.zero_state())
    assert not np.array_equal(other_logits, logits)
    ref = tiny_mamba.from_scratch(MODEL, prompt, 12, positions=(0, 45))
    assert ref["state"].equals(whole) and len(ref["tokens"]) == 12
    assert len(set(ref["tokens"])) > 1


# ------------------------------------------------------------ the layout


@pytest.mark.parametrize("arrangement", ["slot_major", "layer_major"])
def test_the_layout_file_maps_tiny_mambas_state(start, arrangement):
    flags = (["--layer_major", "--max_slots=8"]
             if arrangement == "layer_major" else [])
    daemon = start(8, *flags)
    with statecache.Client.connect(daemon.address) as client, \
            scheduler.attach(client) as session:
        memory = session.memory
        assert memory.arrangement == arrangement
        assert memory.layout_name == "tiny-mamba"
        assert memory.num_layers == tiny_mamba.NUM_LAYERS
        assert [(t.name, t.dtype, t.shape) for t in memory.tensors] == [
            ("conv", "f32", (tiny_mamba.D_INNER, tiny_mamba.KERNEL - 1)),
            ("ssm", "f32", (tiny_mamba.D_INNER, tiny_mamba.D_STATE))]
        assert len(memory.placements) == 2 * tiny_mamba.NUM_LAYERS
        runner = model_runner.ModelRunner(MODEL, memory)
        state = MODEL.zero_state()
        MODEL.forward([1, 2, 3, 4, 5], state)
        runner.write(5, state)
        assert runner.read(5).equals(state)
        # Where the placements say, in the region's raw bytes.
        raw = memory._host_map()
        for p in memory.placements:
            name = memory.tensors[p.tensor].name
            piece = state.arrays()[(name, p.layer)]
            at = p.offset + 5 * p.slot_stride
            assert p.strides == (piece.shape[1] * 4, 4)  # row-major, packed
            assert raw[at:at + p.bytes] == piece.tobytes()
        # The daemon's copy engine moves every piece: a copy of slot 0 onto
        # slot 1 of a 2-wide request.
        admit, = session.step().admit("x", width=2, num_tokens=1).send()
        runner.write(admit.slots[0], state)
        runner.poison(admit.slots[1])
        copied, = session.step().copy("x", from_index=0, to_index=1).send()
        assert copied.check().bytes == memory.bytes_per_slot
        assert runner.read(admit.slots[1]).equals(state)
    # A layout that is not TinyMamba's is refused by the runner.
    memory.tensors[1].shape = (tiny_mamba.D_INNER, 16)
    with pytest.raises(model_runner.LayoutMismatch, match="ssm"):
        model_runner.ModelRunner(MODEL, memory)


# ------------------------------------------------------------ resumes


@pytest.mark.parametrize("arrangement", ["slot_major", "layer_major"])
def test_fork_resumes_are_bit_exact(start, arrangement):
    flags = (["--layer_major", "--max_slots=96"]
             if arrangement == "layer_major" else [])
    daemon = start(96, *flags)
    turns, s, stats = run(daemon, conversations(),
                          name="fork, " + arrangement)
    assert_bit_exact(turns)
    later = [t for t in turns if t.turn > 0]
    # A big pool keeps every anchor: each later turn forks from the
    # checkpoint at its previous prompt's last full block.
    assert all(t.how == "fork" for t in later), [(t.request, t.how)
                                                 for t in later]
    assert_resumed(turns, at_least=1.0)
    assert stats.resumes_fork >= len(later)
    # The first turns admitted in the second pass resumed at the shared
    # system prompt's midstep checkpoint (another conversation's).
    first = [t for t in turns if t.turn == 0 and t.blocks_resumed]
    assert first and all(t.how == "fork" and t.resumed_pos == 32
                         for t in first)
    assert s.counts["published"] > 0
    assert s.counts["checkpoints_kept"] > 0


def test_misses_after_the_index_is_cleared(start):
    daemon = start(64)
    cleared = []

    def clear_after_turn_0(t):
        if t == 0:
            cleared.append(True)
            with statecache.Client.connect(daemon.address) as client, \
                    scheduler.attach(client) as other:
                other.step().clear_index().send()[0].check()

    turns, _, stats = run(daemon, conversations(4), name="misses",
                          after_turn=clear_after_turn_0)
    assert cleared
    assert_bit_exact(turns)
    turn1 = [t for t in turns if t.turn == 1]
    assert all(t.how == "miss" and t.kv_hit_blocks > 0 for t in turn1)
    assert stats.resumes_miss >= len(turn1)
    turn2 = [t for t in turns if t.turn == 2]
    assert all(t.blocks_resumed > 0 for t in turn2)


def test_adopt_resumes_in_a_pool_too_small_to_fork(start):
    # Two slots: a resuming admission claims its checkpoint's slot and finds
    # no other free one to fork to, so it continues in the checkpoint's slot
    # (adopted: the first forward reads slot 0).
    daemon = start(2)
    turns, s, stats = run(daemon, conversations(2, turns=4), name="adopt",
                          max_admit=1)
    assert_bit_exact(turns)
    adopted = [t for t in turns if t.how == "adopt"]
    assert len(adopted) >= 3, [(t.request, t.how) for t in turns]
    assert stats.resumes_adopt == len(adopted)
    assert stats.resumes_fork == 0
    assert_resumed(turns, at_least=0.5)


def test_adopt_fork_source_when_the_forking_chunk_is_too_short(start):
    # A destination needs 4 committed tokens (say the kernel writes the
    # conv window whole): a prompt ending 1..3 tokens past its last full
    # block, or on it, leaves the forward after the checkpoint too few.
    daemon = start(64, "--fork_tokens=4")
    rng = np.random.default_rng(3)
    convs = []
    for c in range(4):
        # Turn 0: 40 system tokens + 8 + c: the prompt ends 0..3 tokens past
        # block 3 (48..51). Later turns: the reply (8) + user tokens so the
        # prompt again ends 0..3 past a block.
        turns = [list(range(40)) + [int(x) for x in
                                    rng.integers(0, 64, 8 + c)]]
        for _ in range(2):
            turns.append([int(x) for x in rng.integers(0, 64, 8 + 16)])
        convs.append(scheduler.Conversation("c%d" % c, turns, max_new=8))
    turns, s, _ = run(daemon, convs, name="adopt_fork_source")
    assert_bit_exact(turns)
    assert s.counts["adopt_fork_source"] >= 4
    assert_resumed(turns, at_least=0.5)


class AdoptsAfterTheForward(scheduler.Scheduler):
    """adopt_fork_source after the forward (the call order client/README.md
    and the proto gave it at first): the too-short chunk continues in the
    fork source itself, and the adopt follows."""

    def plan_adopt(self, r):
        return False

    def forward(self, r):
        r.adopt_after = (r.read_from >= 0 and
                         self.next_chunk(r) < self.fork_tokens)
        if r.adopt_after:
            r.slots[0] = r.read_from     # in place: the source is written
        super().forward(r)
        if r.adopt_after:
            r.read_fork = False          # adopted below, not consumed

    def after_forward(self, forwarded):
        adopting = [r for r in forwarded if getattr(r, "adopt_after", False)]
        if adopting:
            step = self.session.step()
            for r in adopting:
                step.adopt_fork_source(r.id)
            for r, result in zip(adopting, self.send(step)):
                self.counts["adopt_fork_source" if result.ok
                            else "adopt_refused"] += 1
                r.read_from = -1
        super().after_forward(forwarded)


@pytest.mark.parametrize("order", ["before", "after"])
def test_adopt_fork_source_with_a_second_reader(start, order):
    """Prompt a ends 2 tokens past its checkpointed block (fork_tokens 4:
    too short to fork); b, admitted in the very pass a's next forward runs,
    resumes from the same checkpoint: a second reader. Adopting before the
    forward is refused (FAILED_PRECONDITION) and a forks after all;
    adopting after it means a's forward already wrote the checkpoint b
    reads in the same pass: b is wrong, and the comparison says so."""
    daemon = start(32, "--fork_tokens=4")
    rng = np.random.default_rng(9)
    a = [int(x) for x in rng.integers(0, 64, 50)]
    x = [int(x) for x in rng.integers(0, 64, 30)]
    b = a[:48] + [int(t) for t in rng.integers(0, 64, 20)]
    convs = [scheduler.Conversation(name, [prompt]) for name, prompt in
             (("a", a), ("x", x), ("b", b))]
    turns, s, _ = run(
        daemon, convs, max_admit=1,
        scheduler_class=(scheduler.Scheduler if order == "before"
                         else AdoptsAfterTheForward))
    assert [(t.request, t.how, t.resumed_pos) for t in turns] == [
        ("a/t0", "cold", 0), ("x/t0", "cold", 0), ("b/t0", "fork", 48)]
    assert s.counts["adopt_refused"] == 1
    if order == "before":
        assert_bit_exact(turns)
    else:
        assert set(wrong_turns(turns)) == {"b/t0"}


def test_midstep_checkpoints_resume_a_branch(start):
    daemon = start(64)
    kv = scheduler.KvCache()
    rng = np.random.default_rng(5)
    trunk = [int(x) for x in rng.integers(0, 64, 110)]
    convs = [scheduler.Conversation("trunk", [trunk], max_new=4)]
    # Branches leave the trunk inside its prompt (after 45 and 75 tokens):
    # its anchor (96) does not cover them, its midstep checkpoints (every 2
    # blocks: 32, 64) do.
    branches = [scheduler.Conversation(
        "b%d" % i, [trunk[:cut] + [int(x) for x in rng.integers(0, 64, 20)]],
        max_new=4) for i, cut in enumerate((45, 75))]
    with statecache.Client.connect(daemon.address) as client, \
            scheduler.attach(client) as session:
        runner = model_runner.ModelRunner(MODEL, session.memory)
        poison_region(runner)
        s = scheduler.Scheduler(session, runner, kv)
        turns = scheduler.run_conversations(s, convs)
        turns += scheduler.run_conversations(s, branches)
    SUMMARY.append(("midstep branches", s.counts["prompt_tokens"],
                    s.counts["prefilled"]))
    assert_bit_exact(turns)
    assert s.counts["reserved"] >= 2 and s.counts["published"] >= 2
    assert [(t.request, t.how, t.resumed_pos) for t in turns[1:]] == [
        ("b0/t0", "fork", 32), ("b1/t0", "fork", 64)]


def advised_run(daemon, groups, **options):
    """Each group of conversations in turn through one advised session
    (Scheduler(advised=True)), the KV cache keeping replies; returns (turn
    results, the Scheduler, GetStats after)."""
    kv = scheduler.KvCache()
    turns = []
    with statecache.Client.connect(daemon.address) as client, \
            scheduler.attach(client, advise_placement=True) as session:
        assert session.placement_advised
        runner = model_runner.ModelRunner(MODEL, session.memory)
        poison_region(runner)
        s = scheduler.Scheduler(session, runner, kv, advised=True,
                                cache_decode=True, **options)
        for group in groups:
            turns += scheduler.run_conversations(s, group)
        stats = client.admin.stats()
    return turns, s, stats


@pytest.mark.parametrize("eviction", ["lru", "second-chance"])
def test_advised_branch_points_resume_bit_exact(start, eviction):
    """Requests sharing a document, each with its own question: the prompt
    ends never fall on the document, so only the branch point the daemon
    advises resumes the later ones."""
    daemon = start(64, "--eviction=" + eviction)
    rng = np.random.default_rng(9)
    document = [int(x) for x in rng.integers(0, 64, 70)]  # 4 full blocks

    def asking(name, n):
        return [scheduler.Conversation(
            "%s%d" % (name, i),
            [document + [int(x) for x in rng.integers(0, 64, 20 + 7 * i)]],
            max_new=4) for i in range(n)]

    turns, s, stats = advised_run(daemon, [asking("a", 2), asking("b", 3)])
    SUMMARY.append(("advised branch points", s.counts["prompt_tokens"],
                    s.counts["prefilled"]))
    assert_bit_exact(turns)
    assert stats.branch_points_advised >= 1
    # a0 starts cold, a1 is told to checkpoint where it leaves a0 (block
    # 4), and every b resumes there.
    assert [(t.request, t.how, t.resumed_pos) for t in turns] == [
        ("a0/t0", "cold", 0), ("a1/t0", "cold", 0), ("b0/t0", "fork", 64),
        ("b1/t0", "fork", 64), ("b2/t0", "fork", 64)]


def test_advised_continuations_resume_through_the_reply_bit_exact(start):
    """Long replies: each turn's continuation rolls through its reply (one
    checkpoint, replaced at every block boundary the decode reaches), so
    the next turn resumes past the previous prompt's end."""
    daemon = start(64, "--eviction=second-chance")
    convs = conversations(4, turns=3, seed=3, max_new=40)
    turns, s, stats = advised_run(daemon, [convs])
    SUMMARY.append(("advised continuations", s.counts["prompt_tokens"],
                    s.counts["prefilled"]))
    assert_bit_exact(turns)
    assert stats.checkpoints_superseded > 0
    previous = {}
    for t in turns:
        if t.turn > 0:
            # Through the reply: past the previous prompt's last block.
            before = len(previous[t.conversation]) // BLOCK * BLOCK
            assert t.resumed_pos > before, (t.request, t.resumed_pos, before)
        previous[t.conversation] = t.prompt


def test_the_comparison_catches_a_stale_continuation(start):
    """Negative control: a scheduler that files a decode boundary's
    checkpoint under the hash of the block before it (its state a block
    past what the hash names) is served wrong bytes by the next turn's
    resume, and the comparison says so."""

    class OffByABlock(scheduler.Scheduler):
        def boundary_hash(self, r):
            if r.pos <= len(r.prompt):
                return super().boundary_hash(r)
            return self.computed_hashes(r)[-2]

    daemon = start(64)
    convs = conversations(3, turns=2, seed=4, max_new=40)
    kv = scheduler.KvCache()
    with statecache.Client.connect(daemon.address) as client, \
            scheduler.attach(client, advise_placement=True) as session:
        runner = model_runner.ModelRunner(MODEL, session.memory)
        poison_region(runner)
        s = OffByABlock(session, runner, kv, advised=True, cache_decode=True)
        turns = scheduler.run_conversations(s, convs)
    assert wrong_turns([t for t in turns if t.turn > 0])


def test_snapshot_checkpoints_and_copy(start):
    daemon = start(96, num_spec=2)
    turns, s, stats = run(daemon, conversations(4), name="snapshot + spec",
                          num_spec=2, snapshot=True)
    assert_bit_exact(turns)
    assert_resumed(turns, at_least=1.0)
    assert s.counts["checkpoints_kept"] > 0
    assert s.counts["copies"] > 0


@pytest.mark.parametrize("snapshot", [False, True],
                         ids=["checkpoint", "snapshot"])
def test_a_columnar_after_forward_step_runs_the_same_turns(start, snapshot):
    """The after-forward step through the columnar API (consume_fork,
    publish, checkpoint or snapshot, copy, release, unindex: one call
    each) gives the same turns, bit exact, as the step builder's."""
    got = []
    for columnar in (False, True):
        daemon = start(64, num_spec=2)
        turns, s, _ = run(daemon, conversations(5, max_new=10), num_spec=2,
                          snapshot=snapshot, columnar=columnar)
        assert_bit_exact(turns)
        got.append(([(t.request, t.how, t.blocks_resumed, t.resumed_pos,
                      t.tokens, t.accepted) for t in turns], s.counts))
    assert got[0] == got[1]
    counts = got[1][1]
    assert counts["published"] and counts["copies"]
    assert counts["checkpoints_kept"]


def test_speculative_decoding_with_rollback_slots(start):
    daemon = start(96, num_spec=2)
    convs = conversations(4, max_new=16)
    turns, s, _ = run(daemon, convs, name="num_spec=2", num_spec=2)
    assert_bit_exact(turns)
    assert_resumed(turns, at_least=1.0)
    accepted = [a for t in turns for a in t.accepted]
    # Some drafts were rejected, some accepted in part or whole: each
    # accepted one was copied from its rollback slot onto slot 0.
    assert 0 in accepted and max(accepted) >= 1, accepted
    assert s.counts["copies"] == sum(a > 0 for a in accepted)


def test_the_host_tier_resumes_what_the_pool_spent(start):
    bytes_per_slot = 3 * 4 * tiny_mamba.D_INNER * (tiny_mamba.KERNEL - 1
                                                   + tiny_mamba.D_STATE)
    daemon = start(6, "--host_tier_bytes=%d" % (64 * 2 * bytes_per_slot))
    turns, s, stats = run(daemon, conversations(8, turns=3), name="host tier",
                          max_admit=2)
    assert_bit_exact(turns)
    assert stats.host_tier_demotions > 0
    assert stats.resumes_tier > 0, stats
    # admit said from_tier (PackedResults.late_values) for each of them:
    # slot 0 held the image, and every one was compared.
    from_tier = [t for t in turns if t.how == "tier"]
    assert len(from_tier) == stats.resumes_tier
    assert_resumed(turns, at_least=0.75)


# ------------------------------------------------------------ processes


def test_two_scheduler_processes_on_one_daemon(start, tmp_path):
    daemon = start(96)
    out = tmp_path / "second.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    second = []

    def start_the_other(client):
        # This session is attached: start the other process, and run once
        # it has attached too, so the two run side by side.
        second.append(subprocess.Popen(
            [sys.executable, os.path.join(EXAMPLE, "scheduler.py"),
             "--address", daemon.address, "--conversations", "5",
             "--seed", "1", "--prefix", "p2/", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env))
        while client.admin.stats().sessions < 2:
            assert second[0].poll() is None, second[0].communicate()

    try:
        turns, _, _ = run(daemon, conversations(5, seed=2),
                          name="two processes (this one)", poison=False,
                          before_run=start_the_other)
    finally:
        if second:
            stdout, stderr = second[0].communicate(timeout=100)
    assert second[0].returncode == 0, stderr + stdout
    report = json.loads(out.read_text())
    theirs = [scheduler.TurnResult.from_json(t) for t in report["turns"]]
    SUMMARY.append(("two processes (the other)",
                    report["counts"]["prompt_tokens"],
                    report["counts"]["prefilled"]))
    assert report["summary"]["wrong"] == []
    assert_bit_exact(turns)
    assert_bit_exact(theirs)
    assert_resumed(turns)
    assert_resumed(theirs)


# ------------------------------------------------------------ restarts


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_warm_restart_resumes_bit_exact(start, tmp_path, how):
    state_dir = str(tmp_path / "state")
    daemon = start(64, "--state_dir=" + state_dir,
                   "--state_save_interval=5ms")
    convs = conversations(4)
    kv, history = scheduler.KvCache(), {}
    before, _, stats = run(daemon, convs, kv=kv, history=history,
                           turns=range(1))
    if how == "sigkill":
        # Until the saved index holds every checkpoint (polled, not slept).
        with statecache.Client.connect(daemon.address) as client:
            while True:
                w = client.admin.stats()
                if (w.warm_restart.saved_checkpoints == w.indexed_hashes
                        and w.warm_restart.last_save_unix_seconds):
                    break
        daemon.kill()
        daemon.start()
    else:
        assert daemon.restart() == 0
    with statecache.Client.connect(daemon.address) as client:
        w = client.admin.stats()
        assert w.epoch != stats.epoch
        assert w.warm_restart.outcome == "restored", w.warm_restart
        assert w.warm_restart.restored_checkpoints == stats.indexed_hashes
        assert w.warm_restart.dropped_bad_checksum == 0
    after, _, _ = run(daemon, convs, name="warm restart (%s)" % how, kv=kv,
                      history=history, turns=range(1, 3), poison=False)
    assert_bit_exact(before + after)
    turn1 = [t for t in after if t.turn == 1]
    assert all(t.how == "fork" and t.blocks_resumed > 0 for t in turn1), [
        (t.request, t.how) for t in turn1]


# ------------------------------------------------------------ resizes


class IgnoresMoves(scheduler.Scheduler):
    """A broken scheduler: counts begin_pass's moves, never re-points."""

    def apply_moves(self, moves):
        self.counts["moves"] += len(moves)


@pytest.mark.parametrize("broken", [False, True],
                         ids=["re-pointed", "control-ignoring-moves"])
def test_a_shrink_and_a_grow_while_passes_run(start, broken):
    daemon = start(14)
    threads, done = {}, {}

    # The operator's connection, ready before the passes start: the shrink
    # must reach the daemon while the request it moves still runs.
    operator = statecache.Client.connect(daemon.address, timeout=30)

    def resize(name, n):
        try:
            done[name] = operator.admin.resize(n, deadline=20)
        except statecache.Error as e:
            done[name] = e

    def on_pass(s):
        # Once a request decodes in a slot the shrink gives up (it stays
        # there for many passes): an operator shrinks the pool from another
        # thread, which moves that live slot in one of this scheduler's
        # begin_pass. Once it is done, a grow from another thread, between
        # two passes of running requests (growing is immediate: joined).
        if "shrink" not in threads and any(
                r.pos >= len(r.prompt) and r.slots[0] >= 7 and
                r.max_new - len(r.output) > 30 for r in s.running):
            threads["shrink"] = threading.Thread(target=resize,
                                                 args=("shrink", 7))
            threads["shrink"].start()
            done["shrink_pass"] = s.passes
        if "shrink" in done and "grow" not in threads:
            threads["grow"] = threading.Thread(target=resize,
                                               args=("grow", 40))
            threads["grow"].start()
            threads["grow"].join()
            done["grow_pass"] = s.passes

    try:
        turns, s, stats = run(
            daemon, conversations(7, turns=4, max_new=40), on_pass=on_pass,
            name=None if broken else "shrink + grow",
            scheduler_class=IgnoresMoves if broken else scheduler.Scheduler)
        for name in ("shrink", "grow"):
            assert name in threads, "the %s never started (passes: %d)" % (
                name, s.passes)
            threads[name].join()
    finally:
        operator.close()
    assert not isinstance(done["shrink"], Exception), done["shrink"]
    assert not isinstance(done["grow"], Exception), done["grow"]
    assert done["shrink"].num_slots == 7 and done["grow"].num_slots == 40
    assert stats.slots_total == 40
    assert done["shrink_pass"] < done["grow_pass"] < s.passes - 5
    # The shrink moved live slots (begin_pass said so) and the grown pool's
    # new slots were mapped (the runner attached again to see them).
    assert s.counts["moves"] > 0
    assert s.runner.remaps > 0
    if broken:
        assert wrong_turns(turns), "a scheduler ignoring moves went unseen"
        return
    assert_bit_exact(turns)
    assert_resumed(turns, at_least=0.5)


# ------------------------------------------------------------ the control


def test_the_comparison_catches_a_runner_that_ignores_fork_src(start):
    daemon = start(96)
    turns, s, _ = run(daemon, conversations(4), ignore_fork_src=True)
    forked = [t for t in turns if t.how == "fork"]
    assert forked
    wrong = wrong_turns(turns)
    # Every turn whose first forward should have read a fork source read
    # the wrong slot, and the comparison says so.
    assert {t.request for t in forked} <= set(wrong), wrong
    assert all("resumed_state" in wrong[t.request][2] for t in forked)

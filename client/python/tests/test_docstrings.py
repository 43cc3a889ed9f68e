"""The package's docstring examples, run against a real daemon so they
cannot rot: every example in the package's docstrings (the indented block
after a line ending in "::") runs here, with the engine's parts it leaves
to the reader supplied (a prompt, its block hashes, a forward over a toy
model whose state lives in the daemon's memory). The checks are what a
scheduler relies on: the first turn's checkpoint holds the state at its
anchor, under the hash a later turn's resume looks up, and is filed as
known (a guess is spent before it); that resume starts there.

docs/layout.md's example runs here too: its layout file starts a daemon,
which reports the fingerprint and slot size the page gives, and the page's
fingerprint function computes the same.
"""

import hashlib
import inspect
import json
import os
import re
import textwrap

import numpy as np
import pytest

import statecache
from statecache import _client
from statecache.testing import Daemon

# The identity the package docstring's example attaches with.
MODEL_ID = "Qwen/Qwen3-Next-80B-A3B-Instruct"
BLOCK = 64
# A toy model: one layer, its state [tokens seen, sum of the tokens].
TOY_LAYOUT = {"name": "toy", "num_layers": 1,
              "tensors": [{"name": "state", "dtype": "f32", "shape": [2]}]}
PROMPT = [(7 * i + 3) % 1000 for i in range(300)]   # 4 full blocks
ANCHOR = len(PROMPT) // BLOCK * BLOCK                # 256

# Every docstring that holds an example, and how many: an example added
# elsewhere fails test_every_example_is_run until it runs here too.
EXAMPLES = {"statecache": 2, "statecache._step.StepBuilder": 1,
            "statecache._columnar.ColumnarStep": 1}


def block_hashes(tokens):
    """Chained hashes of the full blocks, in [0, 2**63)."""
    out, h = [], b""
    for i in range(len(tokens) // BLOCK):
        block = tokens[i * BLOCK:(i + 1) * BLOCK]
        h = hashlib.blake2b(h + json.dumps(block).encode(),
                            digest_size=8).digest()
        out.append(int.from_bytes(h, "little") >> 1)
    return out


def toy_state(tokens):
    return np.array([len(tokens), sum(tokens)], dtype=np.float32)


def examples(doc):
    """The example blocks of a docstring, dedented."""
    lines = inspect.cleandoc(doc or "").splitlines()

    def indent(line):
        return len(line) - len(line.lstrip())

    blocks, i = [], 0
    while i < len(lines):
        if not lines[i].rstrip().endswith("::"):
            i += 1
            continue
        intro, i = indent(lines[i]), i + 1
        block = []
        while i < len(lines) and (not lines[i].strip() or
                                  indent(lines[i]) > intro):
            block.append(lines[i])
            i += 1
        blocks.append(textwrap.dedent("\n".join(block)).strip("\n") + "\n")
    return blocks


def package_docstrings():
    """{qualified name: docstring} of the package's modules, and of the
    classes, functions and methods each defines."""
    import statecache._channel
    import statecache._client
    import statecache._columnar
    import statecache._columns
    import statecache._errors
    import statecache._memory
    import statecache._step
    import statecache.testing
    modules = [statecache, statecache._client, statecache._columnar,
               statecache._columns, statecache._channel, statecache._errors,
               statecache._memory, statecache._step, statecache.testing]
    docs = {}
    for module in modules:
        docs[module.__name__] = module.__doc__
        for name, obj in vars(module).items():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(obj):
                docs["%s.%s" % (module.__name__, name)] = obj.__doc__
                for attr, member in vars(obj).items():
                    member = getattr(member, "__func__", member)
                    member = getattr(member, "fget", member)
                    if callable(member) and member.__doc__:
                        docs["%s.%s.%s" % (module.__name__, name,
                                           attr)] = member.__doc__
            elif inspect.isfunction(obj):
                docs["%s.%s" % (module.__name__, name)] = obj.__doc__
    return docs


def spend_one_checkpoint(client, session):
    """Admits cold requests until the pool has spent one checkpoint (the
    vacant slots go first, then the LRU head), then releases them."""
    evicted = client.admin.stats().checkpoints_evicted
    step = session.step().begin_pass()
    for i in range(client.admin.stats().slots_vacant + 1):
        step.admit("filler-%d" % i, width=1, num_tokens=1)
    ids = ["filler-%d" % i for i in range(len(step) - 1)]
    assert all(r.ok for r in step.send())
    assert client.admin.stats().checkpoints_evicted == evicted + 1
    release = session.step()
    for request_id in ids:
        release.release(request_id)
    release.send()


def run(code, **names):
    scope = {"__name__": "docstring_example"}
    scope.update(names)
    exec(compile(code, "<docstring example>", "exec"), scope)
    return scope


class Forward:
    """run_forward(read, write, tokens): the toy model's forward over the
    daemon's memory. `read` None starts from the zero state; a slot
    continues the state in it. Records every call."""

    def __init__(self, memory):
        self.view = memory.tensor("state", 0)
        self.calls = []

    def __call__(self, read, write, tokens):
        self.calls.append((read, write, list(tokens)))
        start = (np.zeros(2, np.float32) if read is None
                 else self.view[read].copy())
        self.view[write] = start + toy_state(tokens)


@pytest.fixture
def daemon():
    d = Daemon(["--model_id=" + MODEL_ID, "--hash_block_size=%d" % BLOCK,
                "--num_slots=16"], layout=TOY_LAYOUT)
    yield d
    d.close()


def test_every_example_is_run():
    found = {name: len(examples(doc))
             for name, doc in package_docstrings().items() if examples(doc)}
    assert found == EXAMPLES


def test_examples_file_a_checkpoint_a_later_turn_resumes(daemon,
                                                          monkeypatch):
    module_examples = examples(statecache.__doc__)
    (builder_example,) = examples(statecache.StepBuilder.__doc__)
    # The package example connects to the default address: this daemon's.
    monkeypatch.setattr(_client, "default_address", lambda: daemon.address)
    hashes = block_hashes(PROMPT)
    with statecache.Client.connect(daemon.address) as client, \
            client.attach(MODEL_ID, BLOCK, client_name="runner") as runner:
        forward = Forward(runner.memory)
        # Every slot holds another owner's bytes: a cold forward that read
        # its slot would carry them into the state.
        forward.view[:] = -1000.0
        # A guess, filed before the example: a checkpoint away from its
        # request's anchor (none: a prompt without a full block's end).
        guess = block_hashes(list(range(BLOCK)))[0]
        with client.attach(MODEL_ID, BLOCK) as s:
            s.step().begin_pass().admit("g", width=1, num_tokens=BLOCK).send()
            assert s.step().checkpoint("g", boundary_blocks=1,
                                       hash=guess).send()[0].kept
            s.step().release("g").send()

        # The first turn: the package docstring's example.
        run(module_examples[0], prompt=PROMPT, block_hashes=block_hashes,
            run_forward=forward)
        (cold, cold_slot, head), (fork_src, slot, tail) = forward.calls
        assert cold is None and head == PROMPT[:ANCHOR]
        # The second forward reads the slot the first wrote, now the
        # checkpoint, and writes a fresh one.
        assert fork_src == cold_slot and tail == PROMPT[ANCHOR:]
        assert slot != fork_src
        # The forward ran the whole prompt, from the zero state.
        np.testing.assert_array_equal(forward.view[slot], toy_state(PROMPT))

        # Its checkpoint is filed under the hash of the block ending at the
        # anchor, holding the state at the anchor, as known: a shortage
        # spends the guess, filed before it, first.
        with client.attach(MODEL_ID, BLOCK) as s:
            spend_one_checkpoint(client, s)
            assert s.step().lookup(guess).send()[0].slot == -1
            ck = s.step().lookup(hashes[ANCHOR // BLOCK - 1]).send()[0]
            assert ck.slot == fork_src
            np.testing.assert_array_equal(forward.view[ck.slot],
                                          toy_state(PROMPT[:ANCHOR]))
            # A later turn extends the prompt: it resumes at the anchor.
            prompt2 = PROMPT + [5] * 100
            a = (s.step().begin_pass()
                 .admit("turn2", width=1, num_tokens=len(prompt2),
                        anchor_pos=len(prompt2) // BLOCK * BLOCK,
                        block_hashes=block_hashes(prompt2),
                        kv_hit_blocks=ANCHOR // BLOCK)
                 .send())[1].check()
            assert a.blocks_resumed == ANCHOR // BLOCK
            assert a.fork_src == ck.slot
            forward(a.fork_src, a.slots[0], prompt2[ANCHOR:])
            np.testing.assert_array_equal(forward.view[a.slots[0]],
                                          toy_state(prompt2))
            s.step().consume_fork("turn2").release("turn2").send()

        # StepBuilder's example: the same prompt, all 4 blocks in the KV
        # cache, resumes from that checkpoint too.
        with client.attach(MODEL_ID, BLOCK) as session:
            scope = run(builder_example, session=session, hashes=hashes)
            admit = scope["admit"].check()
            assert admit.blocks_resumed == ANCHOR // BLOCK
            assert admit.fork_src == ck.slot

        # The package docstring's stream example, on a session holding r1.
        with client.attach(MODEL_ID, BLOCK) as s:
            s.step().begin_pass().admit("r1", width=1, num_tokens=10).send()
            results = run(module_examples[1], s=s)["results"]
            assert [r.code for r in results] == [0, 0]
            assert results[1].slots_released == 1


def test_the_columnar_example(daemon):
    (example,) = examples(statecache.ColumnarStep.__doc__)
    hashes = block_hashes(PROMPT)
    with statecache.Client.connect(daemon.address) as client, \
            client.attach(MODEL_ID, BLOCK) as session:
        session.step().begin_pass().admit(
            "a", 1, len(PROMPT), ANCHOR, hashes).admit(
            "b", 1, len(PROMPT), ANCHOR, hashes[:1]).send()
        scope = run(example, session=session, running_ids=["a", "b"],
                    ready_ids=statecache.RequestIds(["a", "b"]),
                    blocks=np.array([4, 1]),
                    boundary_hashes=np.array([hashes[3], hashes[0]]))
        ck = scope["ck"].check()
        assert ck.kept.tolist() == [True, True]
        assert ck.fork_src.tolist() == [0, 1]  # the slots admitted
        assert scope["results"][scope["forks"]].fork_src.tolist() == [-1, -1]


def test_the_layout_page_example():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        os.pardir, os.pardir, os.pardir, "docs", "layout.md")
    with open(path) as f:
        page = f.read()
    layout = json.loads(re.search(r"```json\n(.*?)```", page, re.S).group(1))
    scope = run(next(code for code in re.findall(r"```python\n(.*?)```",
                                                 page, re.S)
                     if code.startswith("def layout_fingerprint")))
    quoted = re.search(r"layout=mamba2-tiny \((\w+)\) (\d+) bytes/slot",
                       page)
    with Daemon(["--model_id=example/mamba2-tiny", "--num_slots=16"],
                layout=layout) as d, \
            statecache.Client.connect(d.address) as client, \
            client.attach("example/mamba2-tiny", 64,
                          layout_fingerprint=quoted.group(1)) as session:
        m = session.memory
        assert m.layout_fingerprint == scope["layout_fingerprint"](layout)
        assert m.bytes_per_slot == int(quoted.group(2))
        assert [t.name for t in m.tensors] == ["conv", "ssm"]

"""The model runner's side of the state memory: TinyMamba's state read from
and written to the daemon's slots, as client/README.md ("Mapping the state
memory") describes.

The daemon started with --layout=tiny_mamba.layout.json owns one region
holding every slot; Attach describes it (session.memory: tensors, layers,
placements). On the host backend the region is a POSIX shared-memory object,
and session.memory.tensor(name, layer) is a zero-copy numpy view of it of
shape (capacity_slots, *shape): view[slot] is that slot's piece. The views
follow the placements, so one runner serves both arrangements:
"slot_major" (a slot is one contiguous range) and "layer_major" (each
(layer, tensor) is one array over every slot, as ATOM and vLLM allocate
it).

The daemon never computes: it only decides which slot each request reads
and writes, and copies slots itself for `copy`, `snapshot`, the host tier and
relocations. Everything else is the runner's:

    runner = ModelRunner(TinyMamba(), session.memory)
    state = runner.read(slot)                 # a State (copied out)
    _, logits = model.forward(tokens, state)  # in this process's memory
    runner.write(slot, state)                 # copied in

A GPU runner is the same over statecache.cuda_views(memory) (torch tensors
over the IPC handle) with its kernels reading one slot and writing another.
"""

import numpy as np

import tiny_mamba
from tiny_mamba import NUM_LAYERS, STATE_TENSORS, State


class LayoutMismatch(ValueError):
    """The daemon's state layout is not the model's."""


def check_layout(memory):
    """Raises LayoutMismatch unless `memory` (session.memory) describes
    TinyMamba's state: the same tensors, in order, f32, with its shapes, for
    NUM_LAYERS layers. (Attaching with the layout's fingerprint in the
    identity makes the daemon check the same.)"""
    if memory is None:
        raise LayoutMismatch("the daemon keeps no state memory: start it "
                             "with --layout=tiny_mamba.layout.json")
    want = [(name, "f32", tuple(shape)) for name, shape in STATE_TENSORS]
    got = [(t.name, t.dtype, tuple(t.shape)) for t in memory.tensors]
    if got != want or memory.num_layers != NUM_LAYERS:
        raise LayoutMismatch("the daemon's layout is %s x %d layers; "
                             "TinyMamba's is %s x %d" % (
                                 got, memory.num_layers, want, NUM_LAYERS))
    if memory.backend != "host":
        raise LayoutMismatch("this runner maps host memory; the daemon's is "
                             "on %r" % memory.backend)


class ModelRunner:
    """TinyMamba over the daemon's slots.

    Args:
        model: a TinyMamba.
        memory: session.memory (a statecache.StateMemory, host backend).
        refresh: optional; called with no argument when a slot lies past
            the mapped region (the pool grew since `memory` was read), it
            returns a fresh StateMemory (attach again: client/README.md).
    """

    def __init__(self, model, memory, refresh=None):
        self.model = model
        self.refresh = refresh
        self.remaps = 0
        self._map(memory)

    def _map(self, memory):
        check_layout(memory)
        self.memory = memory
        # One zero-copy view per (tensor, layer), each (capacity, *shape).
        self.views = {(name, layer): memory.tensor(name, layer)
                      for name, _ in STATE_TENSORS
                      for layer in range(NUM_LAYERS)}

    def _view(self, slot):
        """Makes sure `slot` is mapped."""
        if slot < 0:
            raise ValueError("slot %d: no slot (the daemon's -1)" % slot)
        if slot >= self.memory.capacity_slots:
            if self.refresh is None:
                raise IndexError("slot %d is past the %d slots mapped" % (
                    slot, self.memory.capacity_slots))
            self._map(self.refresh())
            self.remaps += 1
            if slot >= self.memory.capacity_slots:
                raise IndexError("slot %d is past the region even after "
                                 "remapping (%d slots)" % (
                                     slot, self.memory.capacity_slots))

    # ---- slots <-> the model's state

    def read(self, slot):
        """The State in `slot`, copied out of the shared memory."""
        self._view(slot)
        return State(
            [self.views[("conv", l)][slot].copy() for l in range(NUM_LAYERS)],
            [self.views[("ssm", l)][slot].copy() for l in range(NUM_LAYERS)])

    def write(self, slot, state):
        """Writes `state` into `slot` (every tensor, every layer)."""
        self._view(slot)
        for layer in range(NUM_LAYERS):
            self.views[("conv", layer)][slot] = state.conv[layer]
            self.views[("ssm", layer)][slot] = state.ssm[layer]

    def slot_bytes(self, slot):
        """`slot`'s bytes in layout order (layer, then tensor)."""
        return self.read(slot).tobytes()

    def poison(self, slot):
        """Fills `slot` with NaN: what a runner may find in a slot whose
        bytes are undefined (a cold start's). Tests use it to show such a
        slot is never read."""
        self._view(slot)
        for view in self.views.values():
            view[slot] = np.nan

    # ---- one request's forward

    def run(self, tokens, read_slot, write_slot, midstep=(), start=0):
        """A forward of `tokens` for one request: reads the state from
        `read_slot` (None: the zero state, a cold start), feeds the tokens
        one at a time, copies the state out to each midstep reservation's
        slot as the forward passes its position, and writes the final state
        to `write_slot`.

        Args:
            tokens: the chunk's token ids.
            read_slot: the slot holding the state at `start`, or None.
            write_slot: where the state after the chunk goes.
            midstep: (position, slot) pairs, start < position <= start +
                len(tokens): the state at `position` goes to `slot`.
            start: the position the chunk starts at (tokens already in the
                state).

        Returns:
            (state read, state after, logits after the last token): the
            states are copies in this process, for the caller to inspect.
        """
        state = (tiny_mamba.TinyMamba.zero_state() if read_slot is None
                 else self.read(read_slot))
        read = state.copy()
        at = {position - start - 1: slot for position, slot in midstep}

        def copy_out(i, s):
            if i in at:
                self.write(at[i], s)

        _, logits = self.model.forward(tokens, state,
                                       copy_out if at else None)
        self.write(write_slot, state)
        return read, state, logits

    def run_states(self, tokens, read_slot, write_slots):
        """A speculative verify forward: feeds `tokens` (the pending token
        and the draft) from `read_slot`'s state and writes the state after
        token i to write_slots[i] (the committed slot, then the rollback
        slots). Returns the logits after each token."""
        state = self.read(read_slot)
        out = []
        for token, slot in zip(tokens, write_slots):
            out.append(self.model.step(int(token), state))
            self.write(slot, state)
        return out

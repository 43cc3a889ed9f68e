"""TinyMamba: a small recurrent language model in numpy (float32), the model
the reference runner serves.

Each of its layers is a Mamba block: an input projection to (x, z), a causal
depthwise conv1d over x whose state is the last KERNEL - 1 inputs, a
selective SSM (input-dependent dt, B and C; state h of shape (D_INNER,
D_STATE)), the output gated by silu(z), a projection back and a residual.
The weights are fixed random numbers drawn from a seed.

Computation is strictly one token at a time, every step the same numpy calls
on arrays of the same shapes, so the result depends only on the state and the
tokens: prefilling tokens [0, N) in one go, or [0, P) and then [P, N) from the
state at P (after it went through shared memory and back), gives the same
state and logits bit for bit. That is what lets a test compare a cached run
with a from-scratch one by np.array_equal.

Per layer the state is two float32 arrays:
    conv  (D_INNER, KERNEL - 1)   the last KERNEL - 1 conv inputs, oldest first
    ssm   (D_INNER, D_STATE)      h
which is what tiny_mamba.layout.json tells the daemon (tensors "conv" and
"ssm", f32, NUM_LAYERS layers).

    model = TinyMamba()
    state = model.zero_state()
    state, logits = model.forward(prompt, state)  # advances `state` in place
    tokens = model.greedy(state, logits, 8)       # 8 tokens, greedy
"""

import numpy as np

VOCAB = 64
D_MODEL = 32
D_INNER = 64
D_STATE = 8
KERNEL = 4
DT_RANK = 4
NUM_LAYERS = 3
SEED = 1234

F32 = np.float32

# The state layout, per layer: (name, shape), as the --layout file has it.
STATE_TENSORS = (("conv", (D_INNER, KERNEL - 1)),
                 ("ssm", (D_INNER, D_STATE)))


def _silu(x):
    return x / (F32(1) + np.exp(-x))


def _softplus(x):
    return np.log1p(np.exp(x))


def _rmsnorm(x, w):
    return x * (F32(1) / np.sqrt(np.mean(x * x) + F32(1e-5))) * w


class Layer:
    """One Mamba block's weights."""

    def __init__(self, rng):
        def w(*shape, scale):
            return (rng.standard_normal(shape) * scale).astype(F32)

        self.norm = (1 + w(D_MODEL, scale=0.1)).astype(F32)
        self.in_proj = w(D_MODEL, 2 * D_INNER, scale=D_MODEL ** -0.5)
        self.conv_w = w(D_INNER, KERNEL, scale=0.5)
        self.conv_b = w(D_INNER, scale=0.1)
        self.x_proj = w(D_INNER, DT_RANK + 2 * D_STATE, scale=D_INNER ** -0.5)
        self.dt_proj = w(DT_RANK, D_INNER, scale=DT_RANK ** -0.5)
        self.dt_bias = (w(D_INNER, scale=0.5) - 2).astype(F32)
        # A = -exp(A_log): the decay rates, 1..D_STATE as in Mamba's init.
        a = np.tile(np.arange(1, D_STATE + 1, dtype=F32), (D_INNER, 1))
        self.A = (-a).astype(F32)
        self.D = np.ones(D_INNER, dtype=F32)
        self.out_proj = w(D_INNER, D_MODEL, scale=D_INNER ** -0.5)

    def step(self, x, conv, ssm):
        """One token through the block: returns the residual stream's new
        value and updates `conv` and `ssm` in place."""
        h = _rmsnorm(x, self.norm)
        xz = h @ self.in_proj
        xi, z = xz[:D_INNER], xz[D_INNER:]
        # Causal depthwise conv: the window is the kept inputs, then xi.
        window = np.concatenate([conv, xi[:, None]], axis=1)
        xc = _silu(np.sum(window * self.conv_w, axis=1) + self.conv_b)
        conv[:] = window[:, 1:]
        # The selective SSM: dt, B and C depend on the input.
        dbc = xc @ self.x_proj
        dt = _softplus(dbc[:DT_RANK] @ self.dt_proj + self.dt_bias)
        b = dbc[DT_RANK:DT_RANK + D_STATE]
        c = dbc[DT_RANK + D_STATE:]
        ssm *= np.exp(dt[:, None] * self.A)
        ssm += (dt * xc)[:, None] * b[None, :]
        y = ssm @ c + self.D * xc
        y = y * _silu(z)
        return x + y @ self.out_proj


class State:
    """A sequence's recurrent state: conv[l] and ssm[l] for each layer."""

    def __init__(self, conv, ssm):
        self.conv = conv
        self.ssm = ssm

    def copy(self):
        return State([c.copy() for c in self.conv],
                     [s.copy() for s in self.ssm])

    def arrays(self):
        """{(tensor name, layer): array}, the layout's pieces."""
        out = {}
        for layer in range(NUM_LAYERS):
            out[("conv", layer)] = self.conv[layer]
            out[("ssm", layer)] = self.ssm[layer]
        return out

    def tobytes(self):
        """Every piece's bytes, in layout order (layer, then tensor)."""
        return b"".join(a.tobytes() for a in self.arrays().values())

    @classmethod
    def frombytes(cls, data):
        """The State whose tobytes() is `data`."""
        flat = np.frombuffer(data, dtype=F32)
        conv, ssm, at = [], [], 0
        for _ in range(NUM_LAYERS):
            for out, (_, shape) in zip((conv, ssm), STATE_TENSORS):
                n = int(np.prod(shape))
                out.append(flat[at:at + n].reshape(shape).copy())
                at += n
        if at != flat.size:
            raise ValueError("%d bytes are not one state" % len(data))
        return cls(conv, ssm)

    def equals(self, other):
        """Bit-for-bit equality."""
        return self.tobytes() == other.tobytes()


class TinyMamba:
    """The model: an embedding, NUM_LAYERS Mamba blocks, a final norm and
    an output head."""

    def __init__(self, seed=SEED):
        rng = np.random.default_rng(seed)
        self.embedding = (rng.standard_normal((VOCAB, D_MODEL))
                          .astype(F32))
        self.layers = [Layer(rng) for _ in range(NUM_LAYERS)]
        self.norm = np.ones(D_MODEL, dtype=F32)
        self.head = (rng.standard_normal((D_MODEL, VOCAB))
                     * 2 * D_MODEL ** -0.5).astype(F32)

    @staticmethod
    def zero_state():
        return State([np.zeros((D_INNER, KERNEL - 1), F32)
                      for _ in range(NUM_LAYERS)],
                     [np.zeros((D_INNER, D_STATE), F32)
                      for _ in range(NUM_LAYERS)])

    def step(self, token, state):
        """One token: advances `state` in place and returns the logits
        (VOCAB float32) for the next token."""
        x = self.embedding[token]
        for layer, block in enumerate(self.layers):
            x = block.step(x, state.conv[layer], state.ssm[layer])
        return _rmsnorm(x, self.norm) @ self.head

    def forward(self, tokens, state, on_token=None):
        """Feeds `tokens` one at a time, advancing `state` in place; returns
        (state, the logits after the last token: None for no tokens).
        `on_token(i, state)` runs after token i (state is then at i + 1
        tokens of this call)."""
        logits = None
        for i, token in enumerate(tokens):
            logits = self.step(int(token), state)
            if on_token is not None:
                on_token(i, state)
        return state, logits

    def greedy(self, state, logits, n):
        """n tokens decoded greedily from `logits` (the last prompt
        token's); each but the last is fed back, so `state` ends after
        n - 1 of them (an engine's decode: the last sampled token is fed by
        the next turn's prompt)."""
        out = []
        for i in range(n):
            token = int(np.argmax(logits))
            out.append(token)
            if i + 1 < n:
                logits = self.step(token, state)
        return out


def from_scratch(model, prompt, max_new, positions=()):
    """The reference: `prompt` from the zero state, then `max_new` greedy
    tokens. Returns a dict: "states" {position: State} for each of
    `positions` (0 <= position <= len(prompt)), "state" (after the
    prompt), "logits" (after the prompt), "tokens"."""
    wanted = set(positions)
    states = {}
    state = model.zero_state()
    if 0 in wanted:
        states[0] = state.copy()

    def record(i, s):
        if i + 1 in wanted:
            states[i + 1] = s.copy()

    _, logits = model.forward(prompt, state, record)
    after = state.copy()
    tokens = model.greedy(state, logits, max_new)
    return {"states": states, "state": after, "logits": logits.copy(),
            "tokens": tokens}

"""Repeated constructions in a meta build are copies of the first (``build.repeats``).

Each case executes a small document, builds its model on the meta device with and without
copies, and compares what the two builds hold: every module, attribute, parameter and buffer,
ties and identities included. ``test_results_are_the_same_with_each_speedup_switched_off``
(test_reuse.py) compares whole analyses of every example, corpus and bench file the same way.
"""

from __future__ import annotations

import sys
import textwrap
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from fxls.protocol.model import CaptureJob, ClassRequest
from fxls.worker.capture.build import repeats
from fxls.worker.capture.pipeline import run_capture

HEADER = """\
import itertools
from dataclasses import dataclass
import torch
from torch import nn
"""

GPT = """
class Attention(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.register_buffer("mask", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

class Block(nn.Module):
    def __init__(self, width, heads, context=16):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.attn = Attention(width, heads, context)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.sizes = [width, heads]

class Model(nn.Module):
    def __init__(self, depth=6, width=32):
        super().__init__()
        self.emb = nn.Embedding(100, width)
        self.blocks = nn.ModuleList([Block(width, 4) for _ in range(depth)])
"""


def _namespace(source: str) -> dict[str, Any]:
    module = types.ModuleType("fxls_repeats_document")
    sys.modules[module.__name__] = module  # for the dataclasses it defines
    try:
        exec(compile(HEADER + textwrap.dedent(source), "document.py", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


def _build(namespace: dict[str, Any], expr: str, copies: bool = True) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(repeats.COPY_ENV, "1" if copies else "0")
        with torch.device("meta"), repeats.copies_of_repeats(namespace):
            return eval(expr, namespace)


def _described(module: nn.Module) -> list[Any]:
    """Everything a capture could read of ``module``'s tree, with ties as paths."""
    first_path: dict[int, str] = {}
    out: list[Any] = []
    for path, sub in module.named_modules(remove_duplicate=False):
        first_path.setdefault(id(sub), path)
        plain = {
            k: v if isinstance(v, (int, float, str, bool, tuple, list, type(None))) else type(v)
            for k, v in vars(sub).items()
            if not k.startswith("_")
        }
        hooks = [len(getattr(sub, h)) for h in ("_forward_hooks", "_forward_pre_hooks")]
        out.append(("module", path, type(sub), first_path[id(sub)], sorted(plain.items()), hooks))
    for kind, tensors in (
        ("parameter", module.named_parameters(remove_duplicate=False)),
        ("buffer", module.named_buffers(remove_duplicate=False)),
    ):
        for path, t in tensors:
            first_path.setdefault(id(t), path)
            where = (kind, path, first_path[id(t)], type(t), t.device.type, t.requires_grad)
            out.append((*where, tuple(t.shape), t.stride(), t.dtype, t.is_contiguous()))
    return out


@pytest.fixture
def linear_inits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many ``nn.Linear`` were built by running their ``__init__``."""
    calls: list[int] = []
    init = nn.Linear.__init__

    def counted(self: nn.Linear, *args: Any, **kwargs: Any) -> None:
        calls.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(nn.Linear, "__init__", counted)
    yield calls


def test_the_third_identical_block_onwards_is_a_copy(linear_inits: list[int]) -> None:
    namespace = _namespace(GPT)
    without = _build(namespace, "Model()", copies=False)
    assert len(linear_inits) == 6 * 4
    linear_inits.clear()
    model = _build(namespace, "Model()")
    assert len(linear_inits) == 2 * 4  # two blocks ran __init__; four were copied
    assert _described(model) == _described(without)
    params = list(model.parameters())
    assert len({id(p) for p in params}) == len(params) == len(list(without.parameters()))
    assert model.blocks[5].sizes == [32, 4] and model.blocks[5].sizes is not model.blocks[0].sizes
    assert all(p.is_meta for p in params)


def test_copies_are_independent_of_the_first_and_of_each_other() -> None:
    namespace = _namespace(GPT)
    model = _build(namespace, "Model()")
    model.blocks[0].sizes.append(7)
    model.blocks[0].norm.eps = 0.5
    model.blocks[3].register_forward_hook(lambda *a: None)
    assert model.blocks[4].sizes == [32, 4]
    assert model.blocks[4].norm.eps == 1e-5
    assert not model.blocks[4]._forward_hooks and not model.blocks[0]._forward_hooks
    assert model.blocks[4].attn is not model.blocks[5].attn


def test_a_first_instance_changed_after_the_second_is_not_what_is_copied() -> None:
    namespace = _namespace(
        GPT
        + """
def make():
    blocks = [Block(8, 2) for _ in range(2)]
    blocks[0].extra = nn.Linear(8, 8)
    blocks[0].norm = nn.Identity()
    return nn.ModuleList(blocks + [Block(8, 2) for _ in range(3)])
"""
    )
    blocks = _build(namespace, "make()")
    assert [hasattr(b, "extra") for b in blocks] == [True, False, False, False, False]
    assert [type(b.norm).__name__ for b in blocks[1:]] == ["LayerNorm"] * 4


TABLE = """
counter = itertools.count()
class Attention(nn.Module):
    def __init__(self, resolution, mixed=False):
        super().__init__()
        points = list(itertools.product(range(resolution), range(resolution)))
        self.indices = [abs(p[0] - q[0]) + abs(p[1] - q[1]) for p in points for q in points]
        if mixed:  # equal items, of another type in the second run
            self.indices[0] = float(self.indices[0]) if next(counter) == 1 else self.indices[0]
        self.fc = nn.Linear(8, 8)
"""


def test_a_long_table_of_numbers_is_compared_and_copied_whole(linear_inits: list[int]) -> None:
    """LeViT's attention keeps every pair of its positions' offsets in a list (a million items
    at resolution 32), compared and copied as one sequence: equal items of the same type."""
    namespace = _namespace(TABLE)
    blocks = _build(namespace, "nn.ModuleList([Attention(8) for _ in range(4)])")
    assert len(linear_inits) == 2  # two ran __init__, two are copies
    assert len(blocks[3].indices) == 64 * 64
    assert blocks[3].indices == blocks[0].indices and blocks[3].indices is not blocks[0].indices
    linear_inits.clear()
    mixed = _build(namespace, "nn.ModuleList([Attention(8, mixed=True) for _ in range(4)])")
    assert len(linear_inits) == 4  # the two runs differ in one item's type: no copies
    assert [type(b.indices[0]) for b in mixed] == [int, float, int, int]


@pytest.mark.parametrize(
    ("source", "expr", "different"),
    [
        pytest.param(  # a counter read in __init__: the two real runs differ
            """
counter = itertools.count()
class Layer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.index = next(counter)
        self.fc = nn.Linear(width, width)
""",
            "nn.ModuleList([Layer(8) for _ in range(5)])",
            lambda blocks: [b.index for b in blocks] == [0, 1, 2, 3, 4],
            id="counter",
        ),
        pytest.param(  # one configuration object, changed between the calls
            """
@dataclass
class Config:
    width: int = 8
class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.width, config.width)
def make():
    config, layers = Config(), []
    for width in (8, 8, 16, 16, 8):
        config.width = width
        layers.append(Layer(config))
    return nn.ModuleList(layers)
""",
            "make()",
            lambda blocks: [b.fc.in_features for b in blocks] == [8, 8, 16, 16, 8],
            id="configuration-changed",
        ),
        pytest.param(  # a hook registered in __init__ refers to its own instance
            """
class Layer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.seen = []
        self.register_forward_hook(lambda module, args, out: self.seen.append(1))
""",
            "nn.ModuleList([Layer(8) for _ in range(4)])",
            lambda blocks: all(len(b._forward_hooks) == 1 for b in blocks),
            id="hook",
        ),
        pytest.param(  # a module passed in is shared by every instance, as written
            """
class Layer(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.shared = shared
        self.fc = nn.Linear(8, 8)
def make():
    shared = nn.Linear(8, 8)
    return nn.ModuleList([Layer(shared) for _ in range(4)]), shared
""",
            "make()",
            lambda made: all(b.shared is made[1] for b in made[0]),
            id="module-argument",
        ),
        pytest.param(  # a bound method kept as an attribute
            """
class Layer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = self.gelu
    def gelu(self, x):
        return x
""",
            "nn.ModuleList([Layer(8) for _ in range(4)])",
            lambda blocks: all(b.act.__self__ is b for b in blocks),
            id="bound-method",
        ),
    ],
)
def test_what_two_real_runs_cannot_vouch_for_runs_every_time(
    source: str, expr: str, different: Any, linear_inits: list[int]
) -> None:
    namespace = _namespace(source)
    assert different(_build(namespace, expr))
    with_copies = len(linear_inits)
    linear_inits.clear()
    assert different(_build(_namespace(source), expr, copies=False))
    copied = 1 if "configuration" in expr or "config." in source else 0
    # (the fifth layer of the changed configuration is the third with its arguments as they
    # are when it is built: a copy, 8 wide as it should be; every other __init__ ran)
    assert with_copies + copied == len(linear_inits) >= 4


def test_ties_inside_a_block_are_ties_in_its_copies() -> None:
    namespace = _namespace(
        """
class Tied(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.a = nn.Linear(width, width, bias=False)
        self.b = nn.Linear(width, width, bias=False)
        self.b.weight = self.a.weight
        self.act = nn.ReLU()
        self.again = self.act
"""
    )
    blocks = _build(namespace, "nn.ModuleList([Tied(8) for _ in range(4)])")
    for block in blocks:
        assert block.b.weight is block.a.weight and block.again is block.act
    assert blocks[3].a.weight is not blocks[0].a.weight
    assert _described(blocks) == _described(
        _build(namespace, "nn.ModuleList([Tied(8) for _ in range(4)])", copies=False)
    )


def test_a_subclass_builds_its_own_tree() -> None:
    namespace = _namespace(
        GPT
        + """
class Wider(Block):
    def __init__(self, width, heads):
        super().__init__(width, heads)
        self.extra = nn.Linear(width, 1)
"""
    )
    made = _build(namespace, "nn.ModuleList([Block(8, 2), Block(8, 2), Wider(8, 2), Block(8, 2)])")
    assert [type(m).__name__ for m in made] == ["Block", "Block", "Wider", "Block"]
    assert hasattr(made[2], "extra") and not hasattr(made[3], "extra")


def test_classes_are_left_as_they_were() -> None:
    namespace = _namespace(GPT)
    init = vars(namespace["Block"])["__init__"]
    _build(namespace, "Model()")
    assert vars(namespace["Block"])["__init__"] is init


def test_a_capture_shows_the_same_with_copies_and_without(monkeypatch: pytest.MonkeyPatch) -> None:
    source = (
        HEADER
        + textwrap.dedent(GPT)
        .replace(
            "class Model(nn.Module):", "# fxls: idx = (B=2, T=8) int64\nclass Model(nn.Module):"
        )
        .replace(
            "        self.sizes = [width, heads]\n",
            "        self.sizes = [width, heads]\n\n    def forward(self, x):\n"
            "        return x + self.mlp(self.norm(x))\n",
        )
        + "\n    def forward(self, idx):\n        x = self.emb(idx)\n"
        + ("        for block in self.blocks:\n            x = block(x)\n        return x\n")
    )
    lines = source.splitlines()

    def shown(copies: str) -> list[Any]:
        monkeypatch.setenv(repeats.COPY_ENV, copies)
        line = next(i for i, t in enumerate(lines, 1) if t.startswith("class Model"))
        job = CaptureJob(
            path="/virtual/model.py", source=source, classes=[ClassRequest("Model", line)]
        )
        result = run_capture(job, lambda *_: None)
        assert result.error is None
        (module,) = result.modules
        assert module.error is None, module.error
        return [(n.name, n.op, n.target, str(n.outputs)) for n in module.nodes]

    on = shown("1")
    assert on == shown("0")
    assert any("blocks.5.mlp" in str(target) for _, _, target, _ in on)

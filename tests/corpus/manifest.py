"""What every module class of the corpus is, how to build and feed it, and what plain FX does.

One :class:`Entry` per module class (``entries()``). An entry gives the constructor arguments
(source text, the same as the class's ``# fxls: init(...)`` directive), the example inputs
(symbol names with the concrete sizes used for eager runs) and the outcome of plain
``torch.fx`` tracing with ``proxy_buffer_attributes=True``: it traces, or it raises ``fx_error``
at the line marked ``# fxls-expect: FXnnn`` (``fx_at``). Expected output shapes are never
written down: :func:`eager_outputs` computes them by running the model.

Markers: a trailing comment ``# fxls-expect: FX101`` marks the line where a diagnostic with that
code belongs. A code marked once in a file resolves to that line; a code marked several times
resolves to the marker inside the entry's class.

This module imports only the standard library at import time (torch only inside the eager
helpers), so a benchmark can list the corpus cheaply::

    spec = importlib.util.spec_from_file_location("corpus_manifest", "tests/corpus/manifest.py")
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

CORPUS_DIR = Path(__file__).resolve().parent

MARKER_RE = re.compile(r"#\s*fxls-expect:\s*(?P<code>FX\d{3})\s*$")
"""A trailing marker comment; ``code`` is the diagnostic code expected on that line."""

_DIM_RE = re.compile(r"^(?:(?P<name>[A-Za-z_]\w*)\s*=\s*)?(?P<size>\d+)$")


@dataclass(frozen=True)
class Input:
    """One ``forward`` argument: a tensor of ``dims`` (``"B=2, T=16, 48"``) and ``dtype``, or,
    with ``expr``, a Python expression evaluated in the file's namespace.

    Integer inputs are drawn from ``[0, high)``; bool inputs are all False; float and complex
    inputs are standard normal.
    """

    name: str
    dims: str = ""
    dtype: str = "float32"
    high: int = 2
    expr: str | None = None

    def shape(self) -> list[tuple[str | None, int]]:
        """``[(symbol or None, size), ...]``."""
        out: list[tuple[str | None, int]] = []
        for item in self.dims.split(","):
            item = item.strip()
            if not item:
                continue
            m = _DIM_RE.match(item)
            if m is None:
                raise ValueError(f"{self.name}: bad dimension {item!r} in {self.dims!r}")
            out.append((m.group("name"), int(m.group("size"))))
        return out

    def sizes(self) -> list[int]:
        return [size for _, size in self.shape()]


@dataclass(frozen=True)
class Entry:
    """One module class of the corpus (or a variant of it with other inputs)."""

    cls: str
    file: str
    init: str | None
    """Constructor argument text: the class is built as ``cls(<init>)`` in the file's namespace."""
    inputs: tuple[Input, ...]
    fx_error: str | None = None
    """Exception type name plain FX raises; None when it traces."""
    fx_at: str | None = None
    """Marker code of the line plain FX fails at (the innermost frame of the file, or the
    ``class`` line when the failure is entirely inside torch)."""
    diagnostics: tuple[str, ...] = ()
    """Marker codes where fxls must report a diagnostic with that code."""
    capture_xfail: str | None = None
    """Why fxls's capture does not give the eager output shapes yet (None: it does)."""
    errors_xfail: str | None = None
    """Why fxls's capture reports error diagnostics where plain FX traces (None: it does not)."""
    slow: bool = False
    """Capturing it takes seconds (many nodes under symbolic shapes)."""
    variant: str = ""
    """Set for a second entry of the same class with other inputs (not the directives')."""

    @property
    def id(self) -> str:
        name = f"{Path(self.file).stem}.{self.cls}"
        return f"{name}-{self.variant}" if self.variant else name

    @property
    def path(self) -> Path:
        return CORPUS_DIR / self.file

    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def sizes(self) -> dict[str, int]:
        """Symbol -> concrete size over all inputs (a symbol must have one size)."""
        out: dict[str, int] = {}
        for inp in self.inputs:
            for name, size in inp.shape():
                if name is None:
                    continue
                if out.setdefault(name, size) != size:
                    raise ValueError(f"{self.id}: {name} has sizes {out[name]} and {size}")
        return out

    def class_range(self) -> tuple[int, int]:
        """First and last line of the ``class`` statement (1-based)."""
        return _class_ranges(self.file)[self.cls]

    def marker_line(self, code: str) -> int:
        """The line marked ``# fxls-expect: <code>`` that belongs to this entry."""
        lines = _markers(self.file).get(code, [])
        if len(lines) == 1:
            return lines[0]
        first, last = self.class_range()
        inside = [line for line in lines if first <= line <= last]
        if len(inside) != 1:
            raise LookupError(f"{self.id}: {len(inside)} `# fxls-expect: {code}` markers in class")
        return inside[0]


def _e(
    cls: str,
    file: str,
    init: str | None,
    *inputs: Input,
    fx_error: str | None = None,
    fx_at: str | None = None,
    diagnostics: tuple[str, ...] | None = None,
    capture_xfail: str | None = None,
    errors_xfail: str | None = None,
    slow: bool = False,
    variant: str = "",
) -> Entry:
    if diagnostics is None:
        diagnostics = (fx_at,) if fx_at else ()
    return Entry(
        cls,
        file,
        init,
        tuple(inputs),
        fx_error,
        fx_at,
        diagnostics,
        capture_xfail,
        errors_xfail,
        slow,
        variant,
    )


GPT_CONFIG = "config=GPTConfig(block_size=32, vocab_size=96, n_layer=2, n_head=4, n_embd=48)"
LLAMA_ARGS = "ModelArgs(dim=48, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=80, max_seq_len=32)"
LLAMA_BLOCK_ARGS = "ModelArgs(dim=48, n_heads=4, n_kv_heads=2, vocab_size=80, max_seq_len=32)"
VIT_ARGS = "image_size=32, patch_size=8, num_classes=10, dim=32, depth=2, heads=4, mlp_dim=64"
DETR_LAYER = "d_model=32, nhead=4, dim_feedforward=64, dropout=0.0"


_X_BTC48 = Input("x", "B=2, T=16, 48")
_FREQS = Input("freqs_cis", "T=16, 6", "complex64")
_VIT_X = Input("x", "B=2, N=17, 32")
_IMG_SMALL = Input("x", "B=2, 16, H=32, W=24")
_IMG = Input("x", "B=2, 3, H=64, W=48")

_ENTRIES: list[Entry] = [
    # gpt.py
    _e("LayerNorm", "gpt.py", "ndim=48, bias=False", _X_BTC48),
    _e("CausalSelfAttention", "gpt.py", GPT_CONFIG, _X_BTC48, slow=True),
    _e("MLP", "gpt.py", GPT_CONFIG, _X_BTC48),
    _e("Block", "gpt.py", GPT_CONFIG, _X_BTC48, slow=True),
    _e(
        "GPT",
        "gpt.py",
        GPT_CONFIG,
        Input("idx", "B=2, T=16", "int64", high=96),
        fx_error="TraceError",
        fx_at="FX101",
        slow=True,
    ),
    # llama.py
    _e("RMSNorm", "llama.py", "dim=48, eps=1e-6", _X_BTC48),
    _e(
        "Attention",
        "llama.py",
        LLAMA_ARGS,
        _X_BTC48,
        _FREQS,
        fx_error="TraceError",
        fx_at="FX103",
        slow=True,
    ),
    _e(
        "FeedForward",
        "llama.py",
        "dim=48, hidden_dim=192, multiple_of=32, ffn_dim_multiplier=None",
        _X_BTC48,
    ),
    _e(
        "TransformerBlock",
        "llama.py",
        f"0, {LLAMA_BLOCK_ARGS}",
        _X_BTC48,
        _FREQS,
        fx_error="TraceError",
        fx_at="FX103",
        slow=True,
    ),
    _e(
        "Transformer",
        "llama.py",
        LLAMA_ARGS,
        Input("tokens", "B=2, T=16", "int64", high=80),
        fx_error="TraceError",
        fx_at="FX101",
        slow=True,
    ),
    # vit.py
    _e("FeedForward", "vit.py", "dim=32, hidden_dim=64", _VIT_X),
    _e(
        "Attention",
        "vit.py",
        "dim=32, heads=4, dim_head=8",
        _VIT_X,
        fx_error="TraceError",
        fx_at="FX103",
        diagnostics=(),  # fxls iterates the three pieces of chunk(3)
    ),
    _e(
        "Transformer",
        "vit.py",
        "dim=32, depth=2, heads=4, dim_head=8, mlp_dim=64",
        _VIT_X,
        fx_error="TraceError",
        fx_at="FX103",
        diagnostics=(),
        slow=True,
    ),
    _e(
        "ViT",
        "vit.py",
        VIT_ARGS,
        Input("img", "B=2, 3, 32, 32"),
        fx_error="KeyError",
        fx_at="FX107",
        diagnostics=(),
    ),
    # resnet.py
    _e(
        "BasicBlock",
        "resnet.py",
        "16, 32, stride=2, downsample=nn.Sequential(conv1x1(16, 32, 2), nn.BatchNorm2d(32))",
        _IMG_SMALL,
    ),
    _e("Bottleneck", "resnet.py", "inplanes=64, planes=16", Input("x", "B=2, 64, H=12, W=10")),
    _e(
        "ResStage",
        "resnet.py",
        "BasicBlock, inplanes=16, planes=32, blocks=2, stride=2",
        Input("input", "B=2, 16, H=32, W=24"),
    ),
    _e("ResNet", "resnet.py", "BasicBlock, [2, 2, 2, 2], num_classes=10", _IMG, slow=True),
    # mobilenet.py
    _e("ConvBNActivation", "mobilenet.py", "3, 16, stride=2", Input("input", "B=2, 3, H=32, W=24")),
    _e(
        "InvertedResidual",
        "mobilenet.py",
        "16, 16, stride=1, expand_ratio=6",
        Input("x", "B=2, 16, H=12, W=10"),
        slow=True,
    ),
    _e("MobileNetV2", "mobilenet.py", "num_classes=10, width_mult=0.5", _IMG, slow=True),
    # squeezenet.py
    _e("Fire", "squeezenet.py", "64, 16, 64, 64", Input("x", "B=2, 64, H=15, W=13")),
    _e(
        "SqueezeNet",
        "squeezenet.py",
        "num_classes=10",
        Input("x", "B=2, 3, H=64, W=56"),
        slow=True,
    ),
    # lstm_lm.py
    _e(
        "LSTMLanguageModel",
        "lstm_lm.py",
        "ntoken=50, ninp=24, nhid=32, nlayers=2",
        Input("tokens", "B=3, T=10", "int64", high=50),
    ),
    _e(
        "LSTMLanguageModel",
        "lstm_lm.py",
        "ntoken=50, ninp=24, nhid=32, nlayers=2",
        Input("tokens", "B=3, T=10", "int64", high=50),
        Input("hidden", expr="(torch.randn(2, 3, 32), torch.randn(2, 3, 32))"),
        variant="state",
    ),
    # transformer_torch.py
    _e(
        "PositionalEncoding",
        "transformer_torch.py",
        "d_model=32, max_len=64",
        Input("x", "B=2, T=12, 32"),
    ),
    _e(
        "TextClassifier",
        "transformer_torch.py",
        "ntoken=40, d_model=32, nhead=4, d_hid=64, nlayers=2, num_classes=5",
        Input("src", "B=2, T=12", "int64", high=40),
        slow=True,
    ),
    _e(
        "CrossAttentionBlock",
        "transformer_torch.py",
        "dim=32, num_heads=4",
        Input("x", "B=2, T=12, 32"),
        Input("context", "B=2, S=7, 32"),
        slow=True,
    ),
    _e(
        "EncoderLayer",
        "transformer_torch.py",
        "d_model=32, nhead=4",
        Input("src", "B=2, T=12, 32"),
        fx_error="RuntimeError",
        fx_at="FX107",
        slow=True,
    ),
    # detr.py
    _e(
        "TransformerEncoderLayer",
        "detr.py",
        DETR_LAYER,
        Input("src", "S=12, B=2, 32"),
        Input("pos", "S=12, B=2, 32"),
    ),
    _e(
        "TransformerDecoderLayer",
        "detr.py",
        f"{DETR_LAYER}, normalize_before=True",
        Input("tgt", "Q=7, B=2, 32"),
        Input("memory", "S=12, B=2, 32"),
        Input("pos", "S=12, B=2, 32"),
        Input("query_pos", "Q=7, B=2, 32"),
        slow=True,
    ),
    _e(
        "Transformer",
        "detr.py",
        "d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=64",
        Input("src", "B=2, 32, H=6, W=5"),
        Input("mask", "B=2, H=6, W=5", "bool"),
        Input("query_embed", "Q=7, 32"),
        Input("pos_embed", "B=2, 32, H=6, W=5"),
        slow=True,
    ),
    # clip_pool.py
    _e(
        "AttentionPool2d",
        "clip_pool.py",
        "spacial_dim=7, embed_dim=64, num_heads=4, output_dim=32",
        Input("x", "B=2, 64, 7, 7"),
        slow=True,
    ),
    _e(
        "StemAndPool",
        "clip_pool.py",
        "width=64, heads=4, output_dim=32",
        Input("x", "B=2, 3, 56, 56"),
        slow=True,
    ),
    # misc.py
    _e("MultiTaskHeads", "misc.py", 'dim=16, tasks=("cls", "box", "mask")', Input("x", "B=2, 16")),
    _e("LambdaActivation", "misc.py", "dim=16", Input("x", "B=2, T=5, 16")),
    _e(
        "LengthNormalized",
        "misc.py",
        "dim=16",
        Input("x", "B=2, T=5, 16"),
        fx_error="RuntimeError",
        fx_at="FX102",
    ),
    _e(
        "TokenKeep",
        "misc.py",
        "ratio=0.5",
        Input("x", "B=2, T=8, 16"),
        fx_error="TypeError",
        fx_at="FX104",
    ),
    _e(
        "ZeroState",
        "misc.py",
        "dim=16",
        Input("x", "B=2, T=5, 16"),
        fx_error="TypeError",
        fx_at="FX105",
    ),
    _e(
        "RowWise",
        "misc.py",
        "dim=16",
        Input("x", "B=2, 16"),
        fx_error="TraceError",
        fx_at="FX103",
    ),
    _e(
        "SignGate",
        "misc.py",
        "dim=16",
        Input("x", "B=2, 16"),
        fx_error="TraceError",
        fx_at="FX101",
    ),
    _e("FeatureList", "misc.py", "dim=16", Input("x", "B=2, 16"), diagnostics=("FX108",)),
    _e(
        "OptionalBias",
        "misc.py",
        "dim=16",
        Input("x", "B=2, 16"),
        Input("bias", "16"),
    ),
]


def entries() -> list[Entry]:
    """Every module class of the corpus, in file order (variants after their class)."""
    return list(_ENTRIES)


def primary_entries() -> list[Entry]:
    """One entry per module class: the one whose inputs are the class's directives."""
    return [e for e in _ENTRIES if not e.variant]


def corpus_files() -> list[Path]:
    """The model files of the corpus (everything but this manifest)."""
    return sorted(p for p in CORPUS_DIR.glob("*.py") if p.name != "manifest.py")


@cache
def _markers(file: str) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    text = (CORPUS_DIR / file).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        m = MARKER_RE.search(line)
        if m is not None:
            found.setdefault(m.group("code"), []).append(number)
    return found


@cache
def _class_ranges(file: str) -> dict[str, tuple[int, int]]:
    tree = ast.parse((CORPUS_DIR / file).read_text(encoding="utf-8"))
    return {
        node.name: (node.lineno, node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }


def all_markers() -> dict[str, dict[str, list[int]]]:
    """File name -> marker code -> lines, for every corpus file."""
    return {p.name: {k: list(v) for k, v in _markers(p.name).items()} for p in corpus_files()}


# ---------------------------------------------------------------------------------------
# Eager execution (imports torch)
# ---------------------------------------------------------------------------------------

_LOADED: dict[str, ModuleType] = {}


def load(file: str) -> ModuleType:
    """Import a corpus file for real (once), as module ``fxls_corpus_<stem>``."""
    if file in _LOADED:
        return _LOADED[file]
    name = f"fxls_corpus_{Path(file).stem}"
    spec = importlib.util.spec_from_file_location(name, CORPUS_DIR / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _LOADED[file] = module
    return module


def build(entry: Entry, seed: int = 0) -> Any:
    """The module of ``entry`` with random weights on the CPU, in eval mode."""
    import torch

    namespace = vars(load(entry.file))
    torch.manual_seed(seed)
    cls = namespace[entry.cls]
    module = eval(f"_cls({entry.init or ''})", namespace, {"_cls": cls})
    return module.eval()


def example_inputs(entry: Entry, seed: int = 1) -> dict[str, Any]:
    """Real CPU tensors for the entry's inputs."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {}
    for inp in entry.inputs:
        if inp.expr is not None:
            torch.manual_seed(seed)
            out[inp.name] = eval(inp.expr, vars(load(entry.file)))
            continue
        dtype = getattr(torch, inp.dtype)
        sizes = inp.sizes()
        if dtype.is_floating_point or dtype.is_complex:
            out[inp.name] = torch.randn(sizes, generator=gen, dtype=dtype)
        elif dtype == torch.bool:
            out[inp.name] = torch.zeros(sizes, dtype=torch.bool)
        else:
            out[inp.name] = torch.randint(0, inp.high, sizes, generator=gen, dtype=dtype)
    return out


def flatten(value: Any) -> list[tuple[list[int], str] | None]:
    """Tensors in a nested output as ``(shape, dtype)`` and Nones as None, in order."""
    import torch

    if isinstance(value, torch.Tensor):
        return [(list(value.shape), str(value.dtype).removeprefix("torch."))]
    if value is None:
        return [None]
    if isinstance(value, (tuple, list)):
        return [item for v in value for item in flatten(v)]
    if isinstance(value, dict):
        return [item for v in value.values() for item in flatten(v)]
    return []


def eager_outputs(entry: Entry) -> list[tuple[list[int], str] | None]:
    """Run the entry's module eagerly on its example inputs; flattened output shapes/dtypes."""
    import torch

    module = build(entry)
    with torch.no_grad():
        out = module(**example_inputs(entry))
    return flatten(out)


@dataclass
class FxOutcome:
    """What plain ``torch.fx`` tracing did."""

    error: str | None = None
    message: str = ""
    line: int | None = None
    """Innermost line of the corpus file in the traceback (None: no frame of the file)."""
    frames: list[int] = field(default_factory=list)


def plain_fx(entry: Entry) -> FxOutcome:
    """Trace the entry's module with a stock ``torch.fx.Tracer`` (buffers as graph values)."""
    import torch.fx

    class Tracer(torch.fx.Tracer):
        proxy_buffer_attributes = True

    module = build(entry)
    try:
        Tracer().trace(module)
    except Exception as exc:
        filename = str(entry.path)
        lines: list[int] = []
        current: BaseException | None = exc
        while current is not None and not lines:
            tb = current.__traceback__
            while tb is not None:
                if tb.tb_frame.f_code.co_filename == filename:
                    lines.append(tb.tb_lineno)
                tb = tb.tb_next
            current = current.__cause__ or current.__context__
        return FxOutcome(type(exc).__name__, str(exc), lines[-1] if lines else None, lines)
    return FxOutcome()


# ---------------------------------------------------------------------------------------
# fxls capture requests and results
# ---------------------------------------------------------------------------------------


def capture_job(entry: Entry) -> Any:
    """A ``CaptureJob`` for the entry's class with its constructor text and sized inputs."""
    from fxls.protocol.model import CaptureJob, ClassRequest, DimSpec, InputSpec

    inputs = [
        InputSpec(name=inp.name, kind="expr", expr=inp.expr)
        if inp.expr is not None
        else InputSpec(
            name=inp.name,
            kind="shape",
            dims=[DimSpec(name, size) for name, size in inp.shape()],
            dtype=inp.dtype,
        )
        for inp in entry.inputs
    ]
    request = ClassRequest(
        name=entry.cls, line=entry.class_range()[0], init=entry.init, inputs=inputs
    )
    return CaptureJob(path=str(entry.path), source=entry.source(), classes=[request])


def concrete_dim(dim: int | str, sizes: dict[str, int]) -> int:
    """A captured dimension (``4``, ``"T"``, ``"B*T"``, ``"H*W"``) at the example sizes."""
    if isinstance(dim, int):
        return dim
    import sympy

    symbols = {name: sympy.Symbol(name, integer=True, positive=True) for name in sizes}
    value = sympy.sympify(dim, locals=symbols).subs(
        {symbols[name]: size for name, size in sizes.items()}
    )
    if not value.is_integer:
        raise ValueError(f"{dim!r} is not an integer at {sizes}")
    return int(value)


def captured_outputs(
    values: list[Any], sizes: dict[str, int]
) -> list[tuple[list[int], str] | None]:
    """``ModuleResult.outputs`` in the form of :func:`eager_outputs` (tensors and Nones)."""
    out: list[tuple[list[int], str] | None] = []
    for v in values:
        if v.kind == "tensor":
            out.append(([concrete_dim(d, sizes) for d in v.shape or []], v.dtype or "?"))
        elif v.kind == "none":
            out.append(None)
    return out

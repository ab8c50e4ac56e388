"""How a person builds and calls every module class of the zero-config corpus.

The model files beside this one carry no ``# fxls:`` directives: fxls must find out on its own
how to build each class and what to feed it. This file is the ground truth a benchmark and the
tests compare fxls against, and it is **never given to fxls**. For every module class it says:

- ``init``: the constructor argument text a user would write (``GPTConfig()``,
  ``Bottleneck, [3, 4, 6, 3]``), evaluated as ``Class(<init>)`` in the file's namespace after
  ``setup`` (statements, e.g. filling in a config object) ran there;
- ``inputs``: the ``forward`` arguments with symbol names and sizes (``"B=2, T=64"``), dtypes,
  the range of integer inputs, or a Python expression for non-tensor and structured values
  (``"0"``, ``"model.init_hidden(B)"``; symbols and ``model`` are in scope);
- ``device``: ``meta`` for real-size models (``with torch.device("meta")`` build and meta inputs
  give true shapes at no memory cost) or ``cpu`` for small ones.

Expected shapes are not written down: :func:`run` executes the model eagerly and returns the
flattened output shapes and dtypes, and those of every submodule call (forward hooks), so that
every shape fxls shows, not only the class output, can be checked.

Classes that cannot be built without outside data in real life (``CLIP`` is built from a
checkpoint's state_dict, ``RNNModel`` from a training script's arguments) get plausible
arguments (the released ViT-B/32 sizes, the word-level Wikitext-2 defaults).

Like ``tests/corpus/manifest.py``, this module imports only the standard library at import
time (torch only inside the eager helpers); load it by path::

    spec = importlib.util.spec_from_file_location("zeroconfig_truth", ".../zeroconfig/truth.py")
    truth = importlib.util.module_from_spec(spec)
    sys.modules["zeroconfig_truth"] = truth
    spec.loader.exec_module(truth)
"""

from __future__ import annotations

import ast
import importlib.util
import re
import dataclasses
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

ZEROCONFIG_DIR = Path(__file__).resolve().parent

_DIM_RE = re.compile(r"^(?:(?P<name>[A-Za-z_]\w*)\s*=\s*)?(?P<size>\d+)$")


@dataclass(frozen=True)
class Input:
    """One ``forward`` argument: a tensor of ``dims`` (``"B=2, T=64, 768"``) and ``dtype``, or,
    with ``expr``, the value of a Python expression (symbols of the other inputs and ``model``
    are in scope; tensors it makes land on the truth's device)."""

    name: str
    dims: str = ""
    dtype: str = "float32"
    high: int = 2
    """Integer inputs are drawn from ``[0, high)`` (on CPU; meta tensors hold no values)."""
    expr: str | None = None

    def shape(self) -> list[tuple[str | None, int]]:
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
class Truth:
    """One module class: how it is built and called."""

    cls: str
    file: str
    init: str
    inputs: tuple[Input, ...]
    setup: str = ""
    device: str = "meta"
    note: str = ""
    expr: str = ""
    """When set, the module is this expression (how fxls built it) instead of ``cls(init)``."""

    @property
    def id(self) -> str:
        return f"{Path(self.file).stem}.{self.cls}"

    @property
    def path(self) -> Path:
        return ZEROCONFIG_DIR / self.file

    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def sizes(self) -> dict[str, int]:
        """Symbol -> size over all tensor inputs (a symbol has one size)."""
        out: dict[str, int] = {}
        for inp in self.inputs:
            for name, size in inp.shape():
                if name is not None and out.setdefault(name, size) != size:
                    raise ValueError(f"{self.id}: {name} has sizes {out[name]} and {size}")
        return out

    def input(self, name: str) -> Input | None:
        return next((i for i in self.inputs if i.name == name), None)


def _t(cls: str, file: str, init: str, *inputs: Input, **kw: Any) -> Truth:
    return Truth(cls, file, init, tuple(inputs), **kw)


def _x(dims: str, name: str = "x", dtype: str = "float32", high: int = 2) -> Input:
    return Input(name, dims, dtype, high)


def _v(name: str, expr: str) -> Input:
    return Input(name, expr=expr)


_MINGPT_PARTS = (
    "config = CfgNode(n_embd=192, n_head=6, block_size=128, attn_pdrop=0.1, resid_pdrop=0.1)"
)
_MINGPT_MODEL = """
config = GPT.get_default_config()
config.model_type = 'gpt-mini'
config.vocab_size = 65
config.block_size = 128
"""
_LLAMA = "ModelArgs(vocab_size=32000)"
_LLAMA_CALL = (
    _v("start_pos", "0"),
    _v("freqs_cis", "precompute_freqs_cis(4096 // 32, 2048 * 2)[0:T]"),
    _v("mask", "torch.triu(torch.full((T, T), float('-inf')), diagonal=1)"),
)
_CLIP_B32 = "512, 224, 12, 768, 32, 77, 49408, 512, 8, 12"
_DETR = (
    "d_model=256, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048, "
    "dropout=0.1, normalize_before=False, return_intermediate_dec=True"
)
_IMG = _x("B=2, 3, 224, 224")

_TRUTH: list[Truth] = [
    # nanogpt.py: GPT-2 small sizes, the config's defaults
    _t("LayerNorm", "nanogpt.py", "768, bias=True", _x("B=2, T=64, 768", "input")),
    _t("CausalSelfAttention", "nanogpt.py", "GPTConfig()", _x("B=2, T=64, 768")),
    _t("MLP", "nanogpt.py", "GPTConfig()", _x("B=2, T=64, 768")),
    _t("Block", "nanogpt.py", "GPTConfig()", _x("B=2, T=64, 768")),
    _t("GPT", "nanogpt.py", "GPTConfig()", _x("B=2, T=64", "idx", "int64", 50304)),
    # mingpt.py: the 'gpt-mini' preset on a character vocabulary
    _t("NewGELU", "mingpt.py", "", _x("B=2, T=32, 768")),
    _t("CausalSelfAttention", "mingpt.py", "config", _x("B=2, T=32, 192"), setup=_MINGPT_PARTS),
    _t("Block", "mingpt.py", "config", _x("B=2, T=32, 192"), setup=_MINGPT_PARTS),
    _t("GPT", "mingpt.py", "config", _x("B=2, T=32", "idx", "int64", 65), setup=_MINGPT_MODEL),
    # llama2.py: Llama-2-7B sizes with the released tokenizer's vocabulary
    _t("RMSNorm", "llama2.py", "4096", _x("B=2, T=16, 4096")),
    _t("Attention", "llama2.py", _LLAMA, _x("B=2, T=16, 4096"), *_LLAMA_CALL),
    _t(
        "FeedForward",
        "llama2.py",
        "dim=4096, hidden_dim=4 * 4096, multiple_of=256, ffn_dim_multiplier=None",
        _x("B=2, T=16, 4096"),
    ),
    _t("TransformerBlock", "llama2.py", f"0, {_LLAMA}", _x("B=2, T=16, 4096"), *_LLAMA_CALL),
    _t(
        "Transformer",
        "llama2.py",
        _LLAMA,
        _x("B=2, T=16", "tokens", "int64", 32000),
        _v("start_pos", "0"),
    ),
    # vit_einops.py: the usage example of the file's docstring
    _t("FeedForward", "vit_einops.py", "1024, 2048, dropout=0.1", _x("B=2, N=65, 1024")),
    _t(
        "Attention",
        "vit_einops.py",
        "1024, heads=16, dim_head=64, dropout=0.1",
        _x("B=2, N=65, 1024"),
    ),
    _t("Transformer", "vit_einops.py", "1024, 6, 16, 64, 2048, 0.1", _x("B=2, N=65, 1024")),
    _t(
        "ViT",
        "vit_einops.py",
        "image_size=256, patch_size=32, num_classes=1000, dim=1024, depth=6, heads=16, "
        "mlp_dim=2048, dropout=0.1, emb_dropout=0.1",
        _x("B=2, 3, 256, 256", "img"),
    ),
    # clip_model.py: ViT-B/32 (CLIP, VisionTransformer) and RN50 (ModifiedResNet) sizes
    _t("Bottleneck", "clip_model.py", "64, 64", _x("B=2, 64, 56, 56")),
    _t("AttentionPool2d", "clip_model.py", "7, 2048, 32, 1024", _x("B=2, 2048, 7, 7")),
    _t(
        "ModifiedResNet",
        "clip_model.py",
        "layers=(3, 4, 6, 3), output_dim=1024, heads=32, input_resolution=224, width=64",
        _IMG,
    ),
    _t("LayerNorm", "clip_model.py", "768", _x("B=2, L=50, 768")),
    _t("QuickGELU", "clip_model.py", "", _x("B=2, L=50, 3072")),
    _t("ResidualAttentionBlock", "clip_model.py", "768, 12", _x("L=50, B=2, 768")),
    _t("Transformer", "clip_model.py", "width=768, layers=12, heads=12", _x("L=50, B=2, 768")),
    _t(
        "VisionTransformer",
        "clip_model.py",
        "input_resolution=224, patch_size=32, width=768, layers=12, heads=12, output_dim=512",
        _IMG,
    ),
    _t(
        "CLIP",
        "clip_model.py",
        _CLIP_B32,
        _x("B=2, 3, 224, 224", "image"),
        _x("B=2, 77", "text", "int64", 49408),
        note="built from a checkpoint's state_dict by build_model() in real use",
    ),
    # detr_transformer.py: DETR's hidden_dim 256 on a 25x34 feature map, 100 queries
    _t(
        "Transformer",
        "detr_transformer.py",
        _DETR,
        _x("B=2, 256, H=25, W=34", "src"),
        _x("B=2, H=25, W=34", "mask", "bool"),
        _x("Q=100, 256", "query_embed"),
        _x("B=2, 256, H=25, W=34", "pos_embed"),
        note="built by build_transformer(args) from command-line arguments in real use",
    ),
    _t(
        "TransformerEncoder",
        "detr_transformer.py",
        "TransformerEncoderLayer(256, 8, 2048, 0.1), 6",
        _x("S=850, B=2, 256", "src"),
        _x("B=2, S=850", "src_key_padding_mask", "bool"),
        _x("S=850, B=2, 256", "pos"),
    ),
    _t(
        "TransformerDecoder",
        "detr_transformer.py",
        "TransformerDecoderLayer(256, 8, 2048, 0.1), 6, nn.LayerNorm(256), return_intermediate=True",
        _x("Q=100, B=2, 256", "tgt"),
        _x("S=850, B=2, 256", "memory"),
        _x("B=2, S=850", "memory_key_padding_mask", "bool"),
        _x("S=850, B=2, 256", "pos"),
        _x("Q=100, B=2, 256", "query_pos"),
    ),
    _t(
        "TransformerEncoderLayer",
        "detr_transformer.py",
        "256, 8",
        _x("S=850, B=2, 256", "src"),
        _x("S=850, B=2, 256", "pos"),
    ),
    _t(
        "TransformerDecoderLayer",
        "detr_transformer.py",
        "256, 8",
        _x("Q=100, B=2, 256", "tgt"),
        _x("S=850, B=2, 256", "memory"),
        _x("S=850, B=2, 256", "pos"),
        _x("Q=100, B=2, 256", "query_pos"),
    ),
    # mnist.py
    _t("Net", "mnist.py", "", _x("B=8, 1, 28, 28"), device="cpu"),
    # fast_neural_style.py: 256x256 training crops
    _t("TransformerNet", "fast_neural_style.py", "", _x("B=4, 3, 256, 256", "X")),
    _t("ConvLayer", "fast_neural_style.py", "3, 32, kernel_size=9, stride=1", _x("B=4, 3, 256, 256")),
    _t("ResidualBlock", "fast_neural_style.py", "128", _x("B=4, 128, 64, 64")),
    _t(
        "UpsampleConvLayer",
        "fast_neural_style.py",
        "128, 64, kernel_size=3, stride=1, upsample=2",
        _x("B=4, 128, 64, 64"),
    ),
    # word_language_model.py: the training script's defaults on Wikitext-2 (33278 words)
    _t(
        "RNNModel",
        "word_language_model.py",
        "'LSTM', 33278, 200, 200, 2, 0.2",
        _x("T=35, B=20", "input", "int64", 33278),
        _v("hidden", "model.init_hidden(B)"),
        note="built by the training script from its arguments in real use",
    ),
    _t("PositionalEncoding", "word_language_model.py", "200, 0.2", _x("T=35, B=20, 200")),
    _t(
        "TransformerModel",
        "word_language_model.py",
        "33278, 200, 2, 200, 2, 0.2",
        _x("T=35, B=20", "src", "int64", 33278),
        device="cpu",  # nn.TransformerEncoder checks whether the mask is causal: values needed
        note="built by the training script from its arguments in real use",
    ),
    # shufflenetv2.py: shufflenet_v2_x1_0()
    _t("InvertedResidual", "shufflenetv2.py", "116, 116, 1", _x("B=2, 116, 28, 28")),
    _t("ShuffleNetV2", "shufflenetv2.py", "[4, 8, 4], [24, 116, 232, 464, 1024]", _IMG),
    # resnet.py: resnet50()
    _t("BasicBlock", "resnet.py", "64, 64", _x("B=2, 64, 56, 56")),
    _t("Bottleneck", "resnet.py", "256, 64", _x("B=2, 256, 56, 56")),
    _t("ResNet", "resnet.py", "Bottleneck, [3, 4, 6, 3]", _IMG),
    # mobilenetv2.py: mobilenet_v2()
    _t(
        "Conv2dNormActivation",
        "mobilenetv2.py",
        "3, 32, stride=2, norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU6",
        _x("B=2, 3, 224, 224", "input"),
    ),
    _t("InvertedResidual", "mobilenetv2.py", "32, 16, 1, expand_ratio=1", _x("B=2, 32, 112, 112")),
    _t("MobileNetV2", "mobilenetv2.py", "", _IMG),
    # vgg.py: vgg11()
    _t("VGG", "vgg.py", "make_layers(cfgs['A'], batch_norm=False)", _IMG),
    # squeezenet.py: squeezenet1_0()
    _t("Fire", "squeezenet.py", "96, 16, 64, 64", _x("B=2, 96, 54, 54"), device="cpu"),
    _t("SqueezeNet", "squeezenet.py", "'1_0'", _IMG),
    # vision_transformer.py: vit_b_16()
    _t(
        "MLP",
        "vision_transformer.py",
        "768, [3072, 768], activation_layer=nn.GELU",
        _x("B=2, N=197, 768", "input"),
    ),
    _t("MLPBlock", "vision_transformer.py", "768, 3072, 0.0", _x("B=2, N=197, 768", "input")),
    _t(
        "EncoderBlock",
        "vision_transformer.py",
        "12, 768, 3072, 0.0, 0.0",
        _x("B=2, N=197, 768", "input"),
    ),
    _t(
        "Encoder",
        "vision_transformer.py",
        "197, 12, 12, 768, 3072, 0.0, 0.0",
        _x("B=2, N=197, 768", "input"),
    ),
    _t(
        "VisionTransformer",
        "vision_transformer.py",
        "image_size=224, patch_size=16, num_layers=12, num_heads=12, hidden_dim=768, mlp_dim=3072",
        _IMG,
    ),
]


def entries() -> list[Truth]:
    """Every module class of the zero-config corpus, in file order."""
    return list(_TRUTH)


def files() -> list[Path]:
    """The model files (everything here but this file)."""
    return sorted(p for p in ZEROCONFIG_DIR.glob("*.py") if p.name != "truth.py")


def by_file() -> dict[str, list[Truth]]:
    out: dict[str, list[Truth]] = {p.name: [] for p in files()}
    for t in _TRUTH:
        out.setdefault(t.file, []).append(t)
    return out


def find(file: str, cls: str) -> Truth | None:
    return next((t for t in _TRUTH if t.file == file and t.cls == cls), None)


@cache
def class_lines(file: str) -> dict[str, int]:
    """Class name -> line of its ``class`` statement (top-level classes, by ``ast``)."""
    tree = ast.parse((ZEROCONFIG_DIR / file).read_text(encoding="utf-8"))
    return {n.name: n.lineno for n in tree.body if isinstance(n, ast.ClassDef)}


# ---------------------------------------------------------------------------------------
# Eager execution (imports torch)
# ---------------------------------------------------------------------------------------

_LOADED: dict[str, ModuleType] = {}


def load(file: str) -> ModuleType:
    """Import a model file for real (once), as module ``fxls_zeroconfig_<stem>``."""
    if file in _LOADED:
        return _LOADED[file]
    name = f"fxls_zeroconfig_{Path(file).stem}"
    spec = importlib.util.spec_from_file_location(name, ZEROCONFIG_DIR / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _LOADED[file] = module
    return module


def build(t: Truth, seed: int = 0) -> Any:
    """The module of ``t`` on its device (meta or CPU with random weights), in eval mode."""
    import contextlib
    import io

    import torch

    namespace = dict(vars(load(t.file)))
    torch.manual_seed(seed)
    with torch.device(t.device), contextlib.redirect_stdout(io.StringIO()):
        if t.setup:
            exec(t.setup, namespace)
        if t.expr:
            module = eval(t.expr, namespace)
        else:
            module = eval(f"_cls({t.init})", namespace, {"_cls": namespace[t.cls]})
    return module.eval()


@dataclass
class TensorArg:
    """A tensor input made by :func:`make_inputs`: concrete sizes and a dtype name."""

    sizes: list[int]
    dtype: str = "float32"
    high: int = 2


def make_inputs(
    t: Truth,
    model: Any,
    sizes: dict[str, int] | None = None,
    replace: dict[str, Any] | None = None,
    only: list[str] | None = None,
    seed: int = 1,
) -> dict[str, Any]:
    """Keyword arguments for ``model``: the truth's inputs at the truth's sizes (or ``sizes``
    for its symbols), with ``replace`` (name -> ``TensorArg`` or a plain value) applied.
    ``only`` restricts the arguments to these names, in this order (the others keep their
    defaults); names in ``only`` must be in the truth's inputs or in ``replace``."""
    import torch

    symbols = {**t.sizes(), **(sizes or {})}
    gen = torch.Generator().manual_seed(seed)
    replace = replace or {}
    # token ids stay within the smallest embedding of the model that is called (fxls's own
    # build may have a smaller vocabulary than the truth's)
    vocab = min(
        (m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding)),
        default=None,
    )

    def tensor(arg: TensorArg) -> Any:
        dtype = getattr(torch, arg.dtype)
        if t.device == "meta":
            return torch.empty(arg.sizes, dtype=dtype, device="meta")
        if dtype.is_floating_point or dtype.is_complex:
            return torch.randn(arg.sizes, generator=gen, dtype=dtype)
        if dtype == torch.bool:
            return torch.zeros(arg.sizes, dtype=torch.bool)
        high = min(arg.high, vocab) if vocab is not None else arg.high
        return torch.randint(0, max(high, 1), arg.sizes, generator=gen, dtype=dtype)

    out: dict[str, Any] = {}
    names = only if only is not None else [i.name for i in t.inputs]
    for name in names:
        if name in replace:
            value = replace[name]
            out[name] = tensor(value) if isinstance(value, TensorArg) else value
            continue
        inp = t.input(name)
        if inp is None:
            raise KeyError(f"{t.id}: no input {name!r}")
        if inp.expr is not None:
            scope = {**vars(load(t.file)), **symbols, "model": model}
            with torch.device(t.device):
                out[name] = eval(inp.expr, scope)
            continue
        dims = [symbols[n] if n is not None else s for n, s in inp.shape()]
        out[name] = tensor(TensorArg(dims, inp.dtype, inp.high))
    return out


Flat = list[tuple[list[int], str] | None]


def flatten(value: Any) -> Flat:
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


@dataclass
class EagerRun:
    """What one eager call gave: the flattened outputs (None when the call raised, see
    ``error``), for every submodule (by qualified name) the flattened outputs of its calls, and
    for every line of the model file the ``(shape, dtype)`` of every tensor that a torch
    function, tensor method or submodule call produced there (the innermost frame of the file)."""

    outputs: Flat | None
    calls: dict[str, list[Flat]] = field(default_factory=dict)
    lines: dict[int, set[tuple[tuple[int, ...], str]]] = field(default_factory=dict)
    params: dict[str, tuple[list[int], str]] = field(default_factory=dict)
    """Parameters and buffers by qualified name."""
    error: str | None = None


def _file_line(filename: str) -> int | None:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == filename:
            return frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return None


def run(
    t: Truth,
    sizes: dict[str, int] | None = None,
    replace: dict[str, Any] | None = None,
    only: list[str] | None = None,
) -> EagerRun:
    """Build ``t`` and call it eagerly (see :func:`make_inputs` for the arguments). A call that
    raises gives ``outputs=None`` and ``error``, with what ran before the failure recorded."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    filename = str(t.path)
    model = build(t)
    result = EagerRun(None)
    state = {n: (list(p.shape), str(p.dtype).removeprefix("torch.")) for n, p in
             [*model.named_parameters(), *model.named_buffers()]}
    result.params = state

    def note(line: int | None, value: Any) -> None:
        if line is None:
            return
        seen = result.lines.setdefault(line, set())
        for item in flatten(value):
            if item is not None:
                seen.add((tuple(item[0]), item[1]))

    class Lines(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            note(_file_line(filename), out)
            return out

    class AtenLines(TorchDispatchMode):
        """aten-level results too: a capture on fake tensors may show decomposed operations
        (``native_layer_norm``'s mean and rstd) where the eager call is one torch function."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            note(_file_line(filename), out)
            return out

    handles = []
    for name, sub in model.named_modules():
        if not name:
            continue

        def hook(_m: Any, _args: Any, output: Any, name: str = name) -> None:
            result.calls.setdefault(name, []).append(flatten(output))
            note(_file_line(filename), output)

        handles.append(sub.register_forward_hook(hook))
    try:
        kwargs = make_inputs(t, model, sizes, replace, only)
        with torch.no_grad(), Lines(), AtenLines():
            out = model(**kwargs)
        result.outputs = flatten(out)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    finally:
        for h in handles:
            h.remove()
    return result


# ---------------------------------------------------------------------------------------
# Comparing what fxls shows with eager truth
# ---------------------------------------------------------------------------------------

_NAME_RE = re.compile(r"^[A-Za-z_]\w*$")


@dataclass
class Verdict:
    """What fxls showed for one class, checked against an eager run on fxls's own inputs."""

    id: str
    nodes: int = 0
    shaped_nodes: int = 0
    """Nodes with at least one tensor output shape (what hovers and inlay hints show)."""
    outputs_shown: bool = False
    inputs: str = ""
    """fxls's inputs as text (``x: [B, 3, 224, 224] float32 (assumed)``)."""
    inputs_match_truth: bool = False
    """fxls's inputs are the truth's (same names, shapes at the truth's sizes, values)."""
    sizes: dict[str, int] = field(default_factory=dict)
    """The sizes given to fxls's symbols for the eager run."""
    eager_error: str | None = None
    outputs_correct: bool | None = None
    """None: no output shown (or nothing to compare)."""
    checked: int = 0
    """Shown node shapes compared with eager results."""
    unchecked: int = 0
    """Shown node shapes with nothing eager to compare with (a line eager never ran, a symbol
    without a size)."""
    wrong: list[str] = field(default_factory=list)
    """Every shown shape that eager execution contradicts, in words."""

    @property
    def has_shapes(self) -> bool:
        return self.shaped_nodes > 0 or self.outputs_shown

    @property
    def correct(self) -> bool:
        """Output shapes shown, equal to eager, and no node shape contradicted."""
        return bool(self.outputs_correct) and not self.wrong


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % k for k in range(2, int(n**0.5) + 1))


def _concrete(dim: Any, sizes: dict[str, int]) -> int | None:
    """A shown dimension (``4``, ``"B"``, ``"B*T"``, ``"(H - 1)//2 + 1"``) at ``sizes``; None
    when it names a symbol without a size."""
    if isinstance(dim, int):
        return dim
    text = str(dim)
    if text.lstrip("-").isdigit():
        return int(text)
    if text in sizes:
        return sizes[text]
    import sympy

    names = set(re.findall(r"[A-Za-z_]\w*", text))
    known = {"floor", "ceiling", "Mod", "Max", "Min", "sqrt", "FloorDiv", "CeilDiv"}
    if not names <= set(sizes) | known:
        return None
    symbols = {n: sympy.Symbol(n, integer=True, positive=True) for n in sizes}
    try:
        value = sympy.sympify(text, locals=symbols).subs(
            {symbols[n]: v for n, v in sizes.items() if n in symbols}
        )
    except (sympy.SympifyError, TypeError, SyntaxError):
        return None
    return int(value) if value.is_integer else None


def _tensor_values(values: list[Any], sizes: dict[str, int]) -> list[tuple[tuple[int, ...], str]] | None:
    """Tensor outputs as ``((sizes...), dtype)``; None when a dimension has no size."""
    out = []
    for v in values:
        if getattr(v, "kind", None) != "tensor" or v.shape is None:
            continue
        dims = [_concrete(d, sizes) for d in v.shape]
        if any(d is None for d in dims):
            return None
        out.append((tuple(dims), v.dtype or "float32"))  # type: ignore[arg-type]
    return out


def _flat_values(values: list[Any], sizes: dict[str, int]) -> Flat | None:
    """Outputs in the form of :func:`flatten` (tensors and Nones)."""
    out: Flat = []
    for v in values:
        if v.kind == "tensor":
            if v.shape is None:
                return None
            dims = [_concrete(d, sizes) for d in v.shape]
            if any(d is None for d in dims):
                return None
            out.append((dims, v.dtype or "float32"))  # type: ignore[arg-type]
        elif v.kind == "none":
            out.append(None)
    return out


def _value_text(v: Any) -> str:
    if v.kind == "tensor":
        dims = ", ".join(str(d) for d in (v.shape or []))
        return f"[{dims}] {v.dtype}"
    return v.text if v.text is not None else v.kind


def _bind(
    t: Truth, inputs: list[tuple[str, Any]], prefer_truth: bool, fixed: dict[str, int] | None = None
) -> dict[str, int]:
    """Sizes for the symbols of fxls's tensor inputs: the truth's size at the same place when
    ``prefer_truth``, otherwise (and for the rest) the smallest unused primes, as fxls picks.
    ``fixed``: sizes fxls says a name was specialized to (they win)."""
    sizes: dict[str, int] = dict(fixed or {})
    used: set[int] = {1, *sizes.values()}
    for _, v in inputs:
        if v.kind == "tensor":
            used.update(d for d in v.shape or [] if isinstance(d, int))
    if prefer_truth:
        for name, v in inputs:
            inp = t.input(name)
            if v.kind != "tensor" or inp is None or inp.expr is not None:
                continue
            shape = inp.shape()
            if len(shape) != len(v.shape or []):
                continue
            for dim, (_, size) in zip(v.shape or [], shape):
                if isinstance(dim, str) and _NAME_RE.match(dim) and dim not in sizes:
                    sizes[dim] = size
                    used.add(size)
    for _, v in inputs:
        if v.kind != "tensor":
            continue
        for dim in v.shape or []:
            if isinstance(dim, str) and _NAME_RE.match(dim) and dim not in sizes:
                candidate = 2
                while candidate in used or not _is_prime(candidate):
                    candidate += 1
                sizes[dim] = candidate
                used.add(candidate)
    return sizes


def _replacements(
    t: Truth, inputs: list[tuple[str, Any]], sizes: dict[str, int]
) -> tuple[dict[str, Any], str | None]:
    """fxls's inputs as :func:`make_inputs` replacements; an error text for one it cannot
    rebuild (a structured value the truth does not know)."""
    import ast as _ast

    replace: dict[str, Any] = {}
    for name, v in inputs:
        if v.kind == "tensor":
            dims = [_concrete(d, sizes) for d in v.shape or []]
            if any(d is None for d in dims):
                return replace, f"input {name} has a dimension without a size: {v.shape}"
            inp = t.input(name)
            high = inp.high if inp is not None and inp.expr is None else 2
            replace[name] = TensorArg(dims, v.dtype or "float32", high)  # type: ignore[arg-type]
        elif v.kind == "none":
            replace[name] = None
        elif v.kind in ("int", "float", "bool") and v.text is not None:
            text = v.text.strip()
            if text in sizes:
                replace[name] = sizes[text]
                continue
            try:
                replace[name] = _ast.literal_eval(text)
            except (ValueError, SyntaxError):
                return replace, f"input {name} = {text!r} cannot be rebuilt"
        elif t.input(name) is None:
            return replace, f"input {name} ({v.kind}: {v.text}) cannot be rebuilt"
        # else: a structured value (a tuple of states): the truth's expression at these sizes
    return replace, None


def _same_as_truth(t: Truth, inputs: list[tuple[str, Any]], sizes: dict[str, int],
                   replace: dict[str, Any]) -> bool:
    # an argument the truth leaves out may be passed explicitly at its default (None)
    extra = {n for n, _ in inputs} - {i.name for i in t.inputs}
    if any(replace.get(n, 0) is not None for n in extra):
        return False
    if not {i.name for i in t.inputs} <= {n for n, _ in inputs}:
        return False
    truth_sizes = t.sizes()
    if any(truth_sizes.get(n, v) != v for n, v in sizes.items()):
        return False
    for inp in t.inputs:
        got = replace.get(inp.name, inp)
        if inp.expr is None:
            if not isinstance(got, TensorArg) or got.dtype != inp.dtype:
                return False
            if got.sizes != [truth_sizes.get(n, s) if n else s for n, s in inp.shape()]:
                return False
        elif got is not inp:
            try:
                if got != eval(inp.expr, {}):
                    return False
            except Exception:
                return False
    return True


def compare(t: Truth, mod: Any) -> Verdict:
    """Check everything fxls shows for ``t``'s class (``mod``: a ``ModuleResult``) against eager
    execution of the real model on the inputs fxls says it used (its symbols given the truth's
    sizes where they line up, small primes otherwise): the class outputs, and every node's
    tensor shapes (``call_module`` nodes against that submodule's calls, parameters against the
    module's, other nodes against what ran on their source line)."""
    verdict = Verdict(t.id, nodes=len(mod.nodes))
    verdict.shaped_nodes = sum(
        1
        for n in mod.nodes
        if n.op not in ("placeholder", "output")
        and any(o.kind == "tensor" and o.shape is not None for o in n.outputs)
    )
    verdict.outputs_shown = any(o.kind == "tensor" and o.shape is not None for o in mod.outputs)
    inputs = [(i.name, i.value) for i in mod.inputs]
    verdict.inputs = ", ".join(
        f"{i.name}: {_value_text(i.value)}" + (" (assumed)" if i.assumed else "")
        for i in mod.inputs
    )
    if not verdict.has_shapes:
        return verdict
    constructed = getattr(mod, "constructed", None)
    if constructed is not None and constructed.source != "directive":
        if not constructed.expr:
            verdict.eager_error = f"fxls's build ({constructed.text}) cannot be rebuilt here"
            verdict.unchecked = verdict.shaped_nodes
            return verdict
        # check what fxls shows against the instance fxls built, not the truth's
        t = dataclasses.replace(t, expr=constructed.expr, setup="")

    # the truth's sizes for fxls's symbols first; fxls's own kind of sizes if that fails
    eager: EagerRun | None = None
    sizes: dict[str, int] = {}
    # a named dimension some of whose shapes hold for its example size only (fxls says so) is
    # checked at that size
    fixed = dict(getattr(mod, "example_sizes", {}) or {})
    for note in getattr(mod, "notes", []):
        for name, size in re.findall(r"only works for (\w+) = (\d+)", note):
            fixed.setdefault(name, int(size))
    static = any("for the example sizes" in n for n in mod.notes)
    order = (False, True) if static else (True, False)
    for prefer_truth in order:
        attempt_sizes = _bind(t, inputs, prefer_truth, fixed)
        replace, problem = _replacements(t, inputs, attempt_sizes)
        if problem is not None:
            verdict.eager_error = problem
            break
        attempt = run(t, sizes=attempt_sizes, replace=replace, only=[n for n, _ in inputs])
        if eager is None or attempt.error is None:
            eager, sizes = attempt, attempt_sizes
        if attempt.error is None:
            verdict.inputs_match_truth = _same_as_truth(t, inputs, sizes, replace)
            break
    verdict.sizes = sizes
    if eager is None:
        verdict.unchecked = verdict.shaped_nodes
        if verdict.outputs_shown:
            verdict.wrong.append(f"fxls shows outputs for inputs the checker cannot rebuild: {verdict.eager_error}")
        return verdict
    verdict.eager_error = eager.error

    if verdict.outputs_shown:
        shown = _flat_values(mod.outputs, sizes)
        if eager.outputs is None:
            verdict.outputs_correct = False
            verdict.wrong.append(
                f"outputs {shown} shown, but the model raises on these inputs: {eager.error}"
            )
        elif shown is None:
            verdict.outputs_correct = None
        elif shown == eager.outputs:
            verdict.outputs_correct = True
        else:
            verdict.outputs_correct = False
            verdict.wrong.append(f"outputs: fxls {shown}, eager {eager.outputs}")

    for node in mod.nodes:
        if node.op in ("placeholder", "output"):
            continue
        shown_t = _tensor_values(node.outputs, sizes)
        if shown_t is None:
            verdict.unchecked += 1
            continue
        if not shown_t:
            continue
        where = f"`{node.name}` ({node.target}, line {node.span.line if node.span else '?'})"
        if node.op == "get_attr" and node.target in eager.params:
            shape, dtype = eager.params[node.target]
            expected = [(tuple(shape), dtype)]
            verdict.checked += 1
            if shown_t != expected:
                verdict.wrong.append(f"{where}: fxls {shown_t}, the module's tensor is {expected}")
            continue
        if node.op == "call_module" and node.target in eager.calls:
            options = [
                [(tuple(i[0]), i[1]) for i in call if i is not None]
                for call in eager.calls[node.target]
            ]
            verdict.checked += 1
            if shown_t not in options:
                verdict.wrong.append(f"{where}: fxls {shown_t}, eager calls gave {options[:3]}")
            continue
        line = node.span.line if node.span is not None else None
        seen = eager.lines.get(line) if line is not None else None
        if not seen:
            verdict.unchecked += 1
            continue
        verdict.checked += 1
        missing = [v for v in shown_t if v not in seen]
        if missing:
            verdict.wrong.append(
                f"{where}: fxls {missing}, eager on that line gave {sorted(seen)[:4]}"
            )
    return verdict

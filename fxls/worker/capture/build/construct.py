"""How to build a module class nobody said how to build: recipes from evidence, then guesses.

A class with a ``# fxls: init(...)`` directive is built as the directive says. Otherwise fxls
tries, in order, and the first recipe whose module builds wins:

1. **defaults** — every constructor parameter has a default (``Net()``);
2. **config** — parameters that take a configuration object get one built from its defaults:
   an annotated dataclass / NamedTuple / plain class (``ModelArgs()``), the one ``*Config`` class
   of the file for a parameter named ``config``, or the class's ``get_default_config()``;
   fields whose default cannot work (``None``, ``-1``) are filled with assumed values;
3. **factory** — a function of the file that takes no arguments and returns the class
   (``def resnet18(): return _resnet(BasicBlock, [2, 2, 2, 2])``), called under a time limit;
4. **call site** — a call of the class in the file whose arguments are constants or names of
   the file (``Fire(96, 16, 64, 64)`` inside a parent, ``Net(10)`` in a ``__main__`` block);
5. **assumed** — small values consistent with common constraints, chosen by parameter name and
   annotation (``dim=64, heads=4, depth=2``), and string choices found in ``__init__`` (``rnn_type
   in ['LSTM', 'GRU']``). Always labelled: the class hover and an information diagnostic say
   what was assumed, with the directive that pins it.

Instances that a parent builds (``Block(config)`` inside ``GPT``) are found by
``fxls.worker.capture.build.parents``, not here.
"""

from __future__ import annotations

import ast
import collections.abc
import contextlib
import copy
import dataclasses
import functools
import inspect
import itertools
import re
import signal
import sys
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import torch
from torch import nn

from fxls.protocol.model import KnownCall
from fxls.worker.capture import cpulimit
from fxls.worker.capture.build import failedstatement
from fxls.worker.capture.document import ExecutedDocument, resolvable
from fxls.worker.capture.syntax import arguments_text, nodes_of

Made = TypeVar("Made")

RecipeSource = Literal["defaults", "config", "factory", "call site", "assumed"]

FACTORY_SECONDS = 2.0
"""Wall time a factory function of the file may take before it is given up."""
MAX_RECIPES = 12
"""Recipes tried per class before fxls gives up building it."""

CONFIG_PARAM_NAMES = frozenset(
    {"config", "cfg", "conf", "args", "params", "hparams", "hp", "opt", "opts", "model_args"}
)
_ENTRY_POINTS = re.compile(r"^(main|train\w*|test\w*|eval\w*|run\w*|cli|demo\w*|benchmark\w*)$")


@dataclass
class Recipe:
    """One way to build a class."""

    source: RecipeSource
    make: Callable[[], Any]
    """Builds the module (called under the build's device context)."""
    text: str
    """What was built, for people: ``GPT(GPTConfig())``, ``resnet18()``."""
    init: str | None = None
    """Arguments for ``# fxls: init(...)`` that pin this recipe (None when not expressible)."""
    assumed: dict[str, str] = field(default_factory=dict)
    """Assumed values by parameter or field name (text), for ``assumed``/filled configs."""
    call: str | None = None
    """An expression that builds it in the file's namespace, when it is not ``Cls(init)``."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """The constructor arguments, when known (defaults not included)."""
    notes: list[str] = field(default_factory=list)
    """What the class hover should say about this build (a configuration made smaller)."""
    default_make: Callable[[], Any] | None = None
    """For a build with fewer layers than the default configuration's: builds the default
    (its parameters are counted, nothing else)."""

    def expr(self, cls_name: str) -> str | None:
        """A Python expression that rebuilds the instance, when expressible."""
        if self.call is not None:
            return self.call
        return None if self.init is None else f"{cls_name}({self.init})"


# ---------------------------------------------------------------------------------------
# Guessing values by name
# ---------------------------------------------------------------------------------------

_INT_GUESSES: tuple[tuple[re.Pattern[str], tuple[int, ...]], ...] = tuple(
    (re.compile(pattern), values)
    for pattern, values in (
        (r"vocab|ntoken|n_token|num_tokens|num_embeddings", (256, 1000)),
        (r"(^|_)(idx|index|id)$", (0, 1)),  # a layer index (the first layer), a token id
        (r"num_classes|n_classes|nclass|classes|num_labels|n_out|output_dim|out_dim", (10, 16)),
        (r"kv_heads", (2, 1, 4)),
        (r"heads?$|n_head|nhead|num_head|head$", (4, 2, 1, 8)),
        (
            r"layers?$|depth|n_layer|nlayers|num_blocks|n_blocks|blocks$|stages|hierarch|levels?$|repeats?$",
            (2, 1, 3, 4),
        ),
        (r"patch", (4, 8, 2)),
        (r"frames$", (16, 8)),
        (r"resolution|image_size|img_size|imsize|im_size", (32, 64, 224)),
        (r"context|seq_len|max_len|block_size|max_seq|n_ctx|positions|max_position", (16, 32)),
        (r"in_ch|in_chans|input_channels|channels_in|n_channels|nc$|num_channels", (3, 1)),
        (r"stride", (1, 2)),
        (r"kernel|ksize", (3, 1)),
        (r"padding|pad$", (1, 0)),
        (r"groups", (1,)),
        (r"ratio|mult|expansion|factor", (4, 2)),
        (r"multiple_of", (32,)),
        (r"batch", (2,)),
        (r"", (64, 32, 128)),
    )
)
_FLOAT_GUESSES: tuple[tuple[re.Pattern[str], tuple[float, ...]], ...] = tuple(
    (re.compile(pattern), values)
    for pattern, values in (
        (r"drop|^p$|prob", (0.0,)),
        (r"eps|epsilon", (1e-5,)),
        (r"ratio|mult|expansion|factor", (4.0, 2.0)),
        (r"scale|temperature|theta", (1.0,)),
        (r"", (0.0, 1.0)),
    )
)


_PER_STAGE = re.compile(r"^(layers|depths|blocks|stages|num_blocks|block_counts|stage_depths)$")

_CLASS_VALUED = frozenset(
    {"norm_layer", "act_layer", "activation_layer", "activation", "act", "block", "layer",
     "block_fn", "conv_layer", "norm", "norm_fn"}
)  # fmt: skip


_ACTIVATION_NAMES = re.compile(r"(^|_)act(_fn|_layer|ivation|_func)?$|nonlinearity|hidden_act")
ACTIVATIONS = ("silu", "relu", "gelu")
"""Names every activation table of the libraries knows (diffusers' ``get_activation``,
transformers' ``ACT2FN``, timm's ``get_act_layer``), for an activation given by name."""


def _per_stage(name: str) -> list[Any]:
    """A list of ints: one width per stage (``block_out_channels``), else counts."""
    if re.search(r"channels|dims|widths", name):
        return [[64, 64], [64, 64, 64, 64]]
    return [[2, 2], [1, 1, 1, 1], [2, 2, 2, 2]]


def _string_guesses(lowered: str) -> list[Any]:
    """A name a string parameter takes by its own name: an activation, an upsampling mode."""
    if _ACTIVATION_NAMES.search(lowered):
        return list(ACTIVATIONS)
    if re.search(r"upsample_(fn|mode)|interpolat", lowered):
        return ["nearest"]  # a mode of ``nn.Upsample``/``F.interpolate``
    return []


def _first(table: Any, name: str) -> tuple[Any, ...]:
    lowered = name.lower()
    for pattern, values in table:
        if pattern.search(lowered):
            return tuple(values)
    return ()


def guesses(name: str, annotation: Any, choices: list[str]) -> list[Any]:
    """Candidate values for a required parameter, most plausible first ([] when none)."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if (
        annotation is bool
        or name.startswith(("use_", "is_", "with_", "tie", "enable"))
        or name in ("bias", "affine", "batch_first", "bidirectional", "inplace")
    ):
        return [False, True]
    if annotation is str or choices:
        return list(choices) or _string_guesses(name.lower())
    if annotation is float:
        return list(_first(_FLOAT_GUESSES, name))
    if origin in (list, tuple, typing.Union, types.UnionType) or annotation in (list, tuple):
        return _composite_guesses(name, origin, args, choices)
    if annotation is int or annotation is inspect.Parameter.empty:
        if re.search(r"drop|eps|prob|^p$", name.lower()):
            return list(_first(_FLOAT_GUESSES, name))
        if annotation is inspect.Parameter.empty and _PER_STAGE.search(name.lower()):
            # ``layers`` may be a count or one count per stage (``[2, 2, 2, 2]``)
            return [*_first(_INT_GUESSES, name)[:2], [2, 2, 2, 2], [1, 1, 1, 1]]
        lowered = name.lower()
        if re.search(r"mask|weight|bias_init|init_", lowered) or lowered in _CLASS_VALUED:
            return [None]
        return list(_first(_INT_GUESSES, name))
    return []


def _composite_guesses(name: str, origin: Any, args: list[Any], choices: list[str]) -> list[Any]:
    """Guesses for a union (``int | None``, ``list[int] | tuple[int, ...]``: its first member
    fxls can guess) or a list or tuple (one count or width per stage)."""
    if origin in (typing.Union, types.UnionType):
        if int in args:
            return list(_first(_INT_GUESSES, name))
        return next((found for arg in args if (found := guesses(name, arg, choices))), [])
    inner = args[0] if args else int
    return _per_stage(name) if inner is int or inner is Ellipsis else []


def string_choices(cls: type, param: str) -> list[str]:
    """String constants ``__init__`` compares ``param`` with (``==``, ``in [...]``, dict keys)."""
    try:
        source = inspect.getsource(cls.__init__)  # type: ignore[misc]
        tree = ast.parse(_dedent(source))
    except (OSError, TypeError, SyntaxError):
        return []
    found: list[str] = []

    def add(node: ast.AST) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
            if node.value not in found:
                found.append(node.value)
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for elt in node.elts:
                add(elt)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None:
                    add(key)

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            names = [node.left, *node.comparators]
            if any(isinstance(n, ast.Name) and n.id == param for n in names):
                for n in names:
                    add(n)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Name)
            and node.slice.id == param
        ):
            add(node.value)
    return found


def _dedent(source: str) -> str:
    lines = source.splitlines()
    indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)


def _text(value: Any) -> str:
    return repr(value)


# ---------------------------------------------------------------------------------------
# Recipes
# ---------------------------------------------------------------------------------------


def _parameters(cls: type) -> list[inspect.Parameter]:
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return []
    return [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _annotations(cls: type, namespace: dict[str, Any]) -> dict[str, Any]:
    """The annotations of ``cls.__init__``, names resolved where ``__init__`` was written
    (a class imported from a library that writes ``attn_layers: AttentionLayers`` under
    ``from __future__ import annotations``), then in the document's ``namespace``; those that
    do not resolve stay text."""
    init = getattr(cls, "__init__", None)
    own = None
    with contextlib.suppress(Exception):  # a wrapper chain that loops
        own = getattr(inspect.unwrap(init), "__globals__", None) if callable(init) else None
    scopes = [namespace] if own is None or own is namespace else [own, namespace]
    for scope in scopes:
        with contextlib.suppress(Exception):
            return typing.get_type_hints(init, globalns=scope)
    merged = {**namespace, **(own or {})}
    raw = getattr(init, "__annotations__", {}) or {}
    out = {}
    for key, value in raw.items():
        if isinstance(value, str):
            with contextlib.suppress(Exception):
                value = eval(value, merged)
        out[key] = value
    return out


def _is_config_class(tp: Any) -> bool:
    if not isinstance(tp, type) or issubclass(tp, nn.Module) or tp.__module__ == "builtins":
        return False
    if issubclass(tp, collections.abc.Mapping):
        return False  # what a model returns (transformers' ``ModelOutput`` dataclasses)
    if tp.__module__ in ("inspect", "typing", "torch") or tp.__module__.startswith("torch."):
        return False
    if dataclasses.is_dataclass(tp) or (issubclass(tp, tuple) and hasattr(tp, "_fields")):
        return True
    try:
        sig = inspect.signature(tp)
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
               for p in sig.parameters.values())  # fmt: skip


def _shared_parts(a: str, b: str) -> int:
    """How many leading dotted parts two module names share."""
    count = 0
    for x, y in zip(a.split("."), b.split(".")):
        if x != y:
            break
        count += 1
    return count


def _config_classes(doc: ExecutedDocument) -> list[type]:
    """Classes that look like configuration (dataclasses, NamedTuples, *Config): the file's
    own, then those it imports from its own package, nearest module first
    (``transformers.models.llama.configuration_llama`` before ``transformers.configuration_utils``
    for ``transformers.models.llama.modeling_llama``)."""
    own = str(doc.namespace.get("__name__", ""))
    local: list[type] = []
    imported: list[tuple[int, type]] = []
    for name, value in doc.namespace.items():
        if not isinstance(value, type) or not _is_config_class(value):
            continue
        if not (
            dataclasses.is_dataclass(value) or re.search(r"Config|Args|Params|Cfg|Settings", name)
        ):
            continue
        module = str(getattr(value, "__module__", ""))
        if module == own:
            local.append(value)
        elif "." in own and _shared_parts(module, own) > 0:
            imported.append((_shared_parts(module, own), value))
    imported.sort(key=lambda pair: -pair[0])
    return local + [value for _, value in imported]


def _optional(annotation: Any) -> bool:
    return typing.get_origin(annotation) is typing.Union and type(None) in typing.get_args(
        annotation
    )


def _unwrap_optional(annotation: Any) -> Any:
    if _optional(annotation):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation


@dataclass
class _ConfigCandidate:
    value: Any
    text: str
    init_text: str | None
    notes: list[str] = field(default_factory=list)
    default: Any = None
    """For a configuration built with fewer layers: the default it stands for."""
    fills: dict[str, Any] = field(default_factory=dict)
    """The fields given values fxls chose."""

    @property
    def assumed(self) -> dict[str, str]:
        """``fills`` as the texts FX408 shows."""
        return {k: _text(v) for k, v in self.fills.items()}


MAX_DEFAULT_LAYERS = 2
"""Layers of a library's default configuration that fxls builds (a 32-layer Llama runs 32
identical layers on fake tensors, each showing the shapes of the first)."""
_LAYER_COUNTS = re.compile(
    r"^(num_hidden_layers|num_layers|n_layers?|encoder_layers|decoder_layers|"
    r"num_encoder_layers|num_decoder_layers)$"
)


def _deep_stacks(config: Any) -> dict[str, int]:
    """The layer counts of ``config`` above ``MAX_DEFAULT_LAYERS`` (``num_hidden_layers``...)."""
    fields = _config_fields(config) or {}
    return {
        k: v
        for k, v in fields.items()
        if _LAYER_COUNTS.match(k) and type(v) is int and v > MAX_DEFAULT_LAYERS
    }


def _fewer_layers(make: Callable[..., Any], config: Any, text: str) -> _ConfigCandidate | None:
    """The default configuration again with at most ``MAX_DEFAULT_LAYERS`` of each stack of
    identical layers (every other size as it is), labelled; more, up to
    ``MAX_KINDS_LAYERS``, when fewer would lose a kind of layer its per-layer lists name
    (Qwen3.5's full attention every fourth layer: 4); None when it has no stack deeper
    than that or does not build so. A configuration of several models (``text_config``,
    ``vision_config``) has its sub-configurations' stacks made shorter instead."""
    counts = _deep_stacks(config)
    if not counts:
        return _fewer_sub_layers(make, config, text)
    for depth in _depths(counts):
        changes = dict.fromkeys(counts, depth)
        try:
            smaller = make(**changes)
        except Exception:  # a config that checks per-layer lists against the count
            return None
        if any(getattr(smaller, k, None) != depth for k in changes):
            return None
        if _keeps_kinds(config, smaller, counts, depth):
            was = ", ".join(f"{k}={v}" for k, v in counts.items())
            changed = [f"{k}={v}" for k, v in changes.items()]
            return _labelled((smaller, config), text, changed, (was, depth))
    return None


MAX_KINDS_LAYERS = 8
"""The most layers per stack fxls builds to keep every kind of layer of a default
configuration (hybrid stacks: attention every fourth or eighth layer)."""


def _depths(counts: dict[str, int]) -> range:
    """The depths tried for stacks of ``counts`` layers, fewest first (none without stacks)."""
    shallowest = min(counts.values(), default=MAX_DEFAULT_LAYERS)
    return range(MAX_DEFAULT_LAYERS, min(MAX_KINDS_LAYERS, shallowest - 1) + 1)


def _keeps_kinds(config: Any, smaller: Any, counts: dict[str, int], depth: int) -> bool:
    """Whether each list of one entry per layer of ``config`` (``layer_types``) has every
    kind of entry it had in ``smaller``, where it has ``depth`` entries."""
    old, new = _config_fields(config) or {}, _config_fields(smaller) or {}
    return all(
        _same_kinds(value, new[name])
        for name, value in old.items()
        if _per_layer(value, counts) and _per_layer(new.get(name), {name: depth})
    )


def _fewer_sub_layers(make: Callable[..., Any], config: Any, text: str) -> _ConfigCandidate | None:
    """``config`` built again with each sub-configuration's deep stacks (MuseSpark's
    ``text_config`` has 62 layers) given as ``{"num_hidden_layers": 2}`` (more when two
    would lose a kind of layer, :func:`_fewer_layers`), where the sub-configuration it builds
    is the default's but for the stack (its per-layer lists made again for the count) and
    nothing else of the configuration changes; None when no sub-configuration is so."""
    fields = _config_fields(config) or {}
    changes: dict[str, dict[str, int]] = {}
    was: list[str] = []
    smaller, deepest = None, MAX_DEFAULT_LAYERS
    for key, sub in fields.items():
        counts = _deep_stacks(sub) if key.endswith("_config") else {}
        for depth in _depths(counts):
            trial = {**changes, key: dict.fromkeys(counts, depth)}
            try:
                built = make(**trial)
            except Exception:  # a sub-configuration whose lists must match its count
                break
            if _alike_but_stacks(config, built, (key, *changes), (counts, depth)):
                changes, smaller, deepest = trial, built, max(deepest, depth)
                was.extend(f"{key}.{k}={v}" for k, v in counts.items())
                break
    if smaller is None:
        return None
    changed = [f"{k}={v!r}" for k, v in changes.items()]
    return _labelled((smaller, config), text, changed, (", ".join(was), deepest))


def _alike_but_stacks(
    config: Any, built: Any, keys: tuple[str, ...], stacks: tuple[dict[str, int], int]
) -> bool:
    """Whether ``built`` is ``config`` but for the stacks of ``keys[0]`` (their counts, made
    the depth ``stacks`` gives) and of the sub-configurations made shorter before
    (``keys[1:]``): the sub-configuration's other fields equal (lists of one entry per layer
    aside, if they keep every kind of layer), every other field equal."""
    key, (counts, depth) = keys[0], stacks
    mine, theirs = _config_fields(config) or {}, _config_fields(built) or {}
    if set(mine) != set(theirs):
        return False
    for name, value in mine.items():
        if name not in keys and _plain(value) != _plain(theirs[name]):
            return False
    old, new = _config_fields(mine[key]) or {}, _config_fields(theirs[key]) or {}
    if set(old) != set(new):
        return False
    for name, value in old.items():
        if name in counts:
            same = new[name] == depth
        elif _per_layer(value, counts) and _per_layer(new[name], {name: depth}):
            same = _same_kinds(value, new[name])  # one entry per layer, made for the count
        else:
            same = value == new[name]
        if not same:
            return False
    return True


def _plain(value: Any) -> Any:
    """A sub-configuration by its fields (configuration objects compare by identity)."""
    fields = _config_fields(value) if hasattr(value, "__dict__") else None
    return fields if fields is not None else value


def _per_layer(value: Any, counts: dict[str, int]) -> bool:
    return isinstance(value, list) and len(value) in counts.values()


def _same_kinds(old: list[Any], new: list[Any]) -> bool:
    """Whether the shorter stack keeps every kind of layer (Qwen3.5's `layer_types` of two
    layers holds no full attention layer: its cache code then stops)."""
    try:
        return set(old) == set(new)
    except TypeError:  # unhashable entries
        return all(v in new for v in old) and all(v in old for v in new)


def _labelled(
    configs: tuple[Any, Any], text: str, changed: list[str], stacks: tuple[str, int]
) -> _ConfigCandidate:
    """The candidate of ``configs[0]``, the default ``configs[1]`` (built from ``text``)
    with ``changed`` arguments added: its stacks (``stacks[0]``, the default's counts) made
    ``stacks[1]`` layers deep."""
    smaller, default = configs
    was, depth = stacks
    name, _, given = text.partition("(")
    given = given.removesuffix(")")
    args = ", ".join([*([given] if given else []), *changed])
    smaller_text = f"{name}({args})"
    note = (
        f"built from `{smaller_text}`: the default `{text}` with at most {depth} layers "
        f"per stack instead of {was}; every other size is the default's and every kind of "
        f"layer is kept, so the shapes are the default configuration's. Pin another with "
        f"`# fxls: init(config={text})`."
    )
    return _ConfigCandidate(smaller, smaller_text, smaller_text, [note], default)


def _fill_config(config: Any, cls_name: str, init_text: str | None) -> Iterator[_ConfigCandidate]:
    """The config as is, then with fields whose defaults cannot work (None, -1) filled."""
    yield _ConfigCandidate(config, init_text or cls_name, init_text)
    fields = _config_fields(config)
    if fields is None:
        return
    negative = [
        k for k, v in fields.items() if isinstance(v, int) and not isinstance(v, bool) and v < 0
    ]
    words = _not_numbers(config)
    missing = [k for k, v in fields.items() if v is None and k not in words]
    strings = [k for k, v in fields.items() if isinstance(v, str)]
    if not negative and not missing and not strings:
        return

    def filled(keys: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in keys:
            options = [_per_head(fields)] if key == "head_dim" else guesses(key, int, [])
            if options and options[0] is not None:
                out[key] = options[0]
        return out

    # sizes that cannot work (-1) first, then unset ones (None: often "same as another")
    variants: list[dict[str, Any]] = []
    for fills in (filled(negative), filled(negative + missing)):
        if fills and fills not in variants:
            variants.append(fills)
    base = variants[-1] if variants else {}
    for key in strings:  # a preset name may block explicit sizes: try it unset too
        variants.append({**base, key: None})
    for variant in variants:
        filled = _with_fields(config, variant)
        if filled is None:
            continue
        text = _config_text(config, variant, init_text)
        init = text if dataclasses.is_dataclass(config) else None
        yield _ConfigCandidate(filled, text, init, fills=variant)


def _config_fields(config: Any) -> dict[str, Any] | None:
    """The fields of a configuration and their values; a field whose read raises is left out
    (transformers' configurations of layers that differ refuse a per-layer value read as one:
    ``AmbiguousGlobalPerLayerAttributeError``)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(config):
            try:
                fields[f.name] = getattr(config, f.name)
            except Exception:  # library code refusing the read
                continue
        return fields
    if isinstance(config, tuple) and hasattr(config, "_asdict"):
        return dict(config._asdict())
    try:
        return dict(vars(config))
    except TypeError:
        return None


def _per_head(fields: dict[str, Any]) -> int:
    """The width of one attention head a configuration implies (``hidden_size //
    num_attention_heads``, the convention of the transformers models whose configuration
    leaves ``head_dim`` unset), or 64 when it names no such sizes."""
    width, heads = fields.get("hidden_size"), fields.get("num_attention_heads")
    if isinstance(width, int) and isinstance(heads, int) and heads > 0 and width % heads == 0:
        return width // heads
    return 64


_NUMBER_WORD = re.compile(r"\b(int|float|Any)\b")


def _not_numbers(config: Any) -> set[str]:
    """The fields of a dataclass ``config`` whose declared type admits no number: left unset
    (``None``), they are not filled with a guessed size (transformers' configurations leave
    ``transformers_version: str | None``, ``architectures: list[str] | None`` and ``dtype``
    unset; a size for them is no size and reads as nonsense where the build is described)."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        return set()
    return {
        f.name
        for f in dataclasses.fields(config)
        if not _NUMBER_WORD.search(f.type if isinstance(f.type, str) else repr(f.type))
    }


def _with_fields(config: Any, changes: dict[str, Any]) -> Any:
    try:
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            return dataclasses.replace(config, **changes)
        if isinstance(config, tuple) and hasattr(config, "_replace"):
            return config._replace(**changes)
        clone = copy.copy(config)
        for key, value in changes.items():
            setattr(clone, key, value)
        return clone
    except Exception:
        return None


def _config_text(config: Any, changes: dict[str, Any], base: str | None) -> str:
    args = ", ".join(f"{k}={_text(v)}" for k, v in changes.items())
    if dataclasses.is_dataclass(config) or hasattr(config, "_replace"):
        return f"{type(config).__name__}({args})"
    return f"{base or type(config).__name__} with {args}"


def _config_candidates(
    doc: ExecutedDocument, cls: type, param: inspect.Parameter, annotation: Any
) -> list[_ConfigCandidate]:
    """Configuration objects for ``param`` (empty when it does not take one)."""
    found: list[_ConfigCandidate] = []
    tp = None if annotation is inspect.Parameter.empty else _unwrap_optional(annotation)
    sources: list[tuple[Callable[[], Any], str]] = []
    config_named = param.name.lower() in CONFIG_PARAM_NAMES or param.name.lower().endswith(
        ("config", "cfg")
    )
    declared = getattr(cls, "config_class", None)  # PreTrainedModel subclasses name theirs
    if config_named and isinstance(declared, type) and _is_config_class(declared):
        sources.append((declared, f"{declared.__name__}()"))
    if isinstance(tp, type) and _is_config_class(tp) and tp is not declared:
        sources.append((tp, f"{tp.__name__}()"))
    if config_named:
        default_config = getattr(cls, "get_default_config", None)
        if callable(default_config):
            sources.append((default_config, f"{cls.__name__}.get_default_config()"))
        if not sources:
            for config_cls in _config_classes(doc):
                sources.append((config_cls, f"{config_cls.__name__}()"))
    for make, text in sources[:3]:
        try:
            config = make()
        except Exception:
            continue
        if isinstance(make, type) and text == f"{make.__name__}()":
            padded = _pad_token(cls, make, config, text)
            if padded is not None:
                make, config, text, notes = padded
                for candidate in _config_variants(make, config, text):
                    candidate.notes.extend(notes)
                    found.append(candidate)
                continue
            found.extend(_config_variants(make, config, text))
            continue
        found.extend(_fill_config(config, text, text))
    return found


def _config_variants(make: Callable[..., Any], config: Any, text: str) -> list[_ConfigCandidate]:
    """The candidates of one default configuration: fewer layers first, then as it is, then
    with unusable fields filled; not those for a configuration of several models whose
    sub-configurations' stacks were made shorter (its unset fields are not sizes: each
    variant would only push a later configuration past the combinations tried)."""
    smaller = _fewer_layers(make, config, text)
    variants = list(_fill_config(config, text, text))
    if smaller is None:
        return variants
    if not _deep_stacks(config):
        return [smaller, variants[0]]
    return [smaller, *_fewer_layers_filled(make, variants[1:]), *variants]


def _fewer_layers_filled(
    make: Callable[..., Any], variants: list[_ConfigCandidate]
) -> Iterator[_ConfigCandidate]:
    """``variants`` (a default configuration with unset sizes filled) with fewer layers each,
    labelled and saying which values fxls chose: HunYuan's default leaves ``head_dim`` unset,
    and without these its 32 layers of width 4096 ran on fake tensors."""
    for variant in variants:
        if not variant.fills:
            continue
        smaller = _fewer_layers(
            functools.partial(make, **variant.fills), variant.value, variant.text
        )
        if smaller is not None:
            smaller.fills = variant.fills
            yield smaller


PAD_TOKEN_ID = 0
"""The padding token id given to a default configuration that sets none when ``forward``
reads it (a sequence classifier finds each sequence's last token by it)."""


def _pad_token(
    cls: type, make: Callable[..., Any], config: Any, text: str
) -> tuple[Callable[..., Any], Any, str, list[str]] | None:
    """A default configuration without ``pad_token_id`` for a class whose ``forward`` reads it
    (transformers' ``*ForSequenceClassification`` of decoder models raise "Cannot handle
    batch sizes > 1 if no padding token is defined"): the configuration with
    ``pad_token_id=0``, its text and the note that says so. None when it is not needed or
    does not build."""
    if getattr(config, "pad_token_id", 0) is not None or not _reads(cls, "pad_token_id"):
        return None
    try:
        padded = make(pad_token_id=PAD_TOKEN_ID)
    except Exception:
        return None
    if getattr(padded, "pad_token_id", None) != PAD_TOKEN_ID:
        return None
    name = text.removesuffix("()")

    def made(**changes: Any) -> Any:
        return make(pad_token_id=PAD_TOKEN_ID, **changes)

    made.__name__ = name
    note = (
        f"`pad_token_id={PAD_TOKEN_ID}` added to the default `{text}`, which sets none: "
        "`forward` finds each sequence's last token by it, and raises for a batch of more "
        f"than one without it. Pin another with `# fxls: init(config={name}(pad_token_id=...))`."
    )
    return made, padded, f"{name}(pad_token_id={PAD_TOKEN_ID})", [note]


def _reads(cls: type, name: str) -> bool:
    """Whether the source of ``cls.forward`` (wherever it is defined) mentions ``name``."""
    try:
        source = inspect.getsource(inspect.unwrap(cls.forward))  # type: ignore[attr-defined]
    except (OSError, TypeError, AttributeError):
        return False
    return name in source


def recipes(
    doc: ExecutedDocument, cls: type, known_calls: Sequence[KnownCall] = ()
) -> Iterator[Recipe]:
    """Ways to build ``cls`` without a directive, best evidence first (see the module doc)."""
    params = _parameters(cls)
    required = [p for p in params if p.default is p.empty]
    annotations = _annotations(cls, doc.namespace)
    name = cls.__name__
    if not required:
        shorter = _fewer_keyword_layers(cls, params)
        if shorter is not None:
            yield shorter
        yield Recipe("defaults", cls, f"{name}()", init="")

    config_options = {
        p.name: _config_candidates(doc, cls, p, annotations.get(p.name, p.empty)) for p in required
    }
    config_params = [p for p in required if config_options[p.name]]
    if config_params and len(config_params) == len(required):
        for combo in _combinations([config_options[p.name] for p in config_params], limit=6):
            kwargs = {p.name: c.value for p, c in zip(config_params, combo)}
            inits = [c.init_text for c in combo]
            init = (
                ", ".join(f"{p.name}={i}" for p, i in zip(config_params, inits))
                if all(i is not None for i in inits)
                else None
            )
            assumed = {k: v for c in combo for k, v in c.assumed.items()}
            text = f"{name}({', '.join(c.text for c in combo)})"
            yield Recipe(
                "assumed" if assumed else "config",
                _bound(cls, kwargs),
                text,
                init=init,
                assumed=assumed,
                kwargs=kwargs,
                notes=[n for c in combo for n in c.notes],
                default_make=_at_default(cls, config_params, combo),
            )

    yield from factories(doc, cls)
    yield from _call_sites(doc, cls)
    for known in known_calls:
        bound: dict[str, Any] = {}
        yield Recipe(
            "call site", _evaluated(doc, cls, known.init, bound),
            f"{name}({known.init}) in {known.where}", init=known.init, kwargs=bound,
        )  # fmt: skip

    if required:
        yield from _assumed(doc, cls, required, annotations, config_options, _group_size(params))


_KEYWORD_LAYER_COUNTS = re.compile(r"^num_(\w+_)?layers$")
"""Layer counts among a configuration's keyword defaults (``num_layers``,
``num_single_layers``)."""


def _fewer_keyword_layers(cls: type, params: list[inspect.Parameter]) -> Recipe | None:
    """For a class whose constructor's keyword defaults are its configuration (diffusers'
    ``ConfigMixin`` models) and stack more than ``MAX_DEFAULT_LAYERS`` layers (Flux:
    ``num_layers=19, num_single_layers=38``): the build with that many per stack, labelled as
    the default configuration's, which ``default_make`` builds for its parameter count. None
    for other classes, or when a default is a list of one entry per layer (fewer layers could
    lose a kind of layer)."""
    if not any(base.__name__ == "ConfigMixin" for base in cls.__mro__):
        return None
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    counts = {
        k: v
        for k, v in defaults.items()
        if _KEYWORD_LAYER_COUNTS.match(k) and type(v) is int and v > MAX_DEFAULT_LAYERS
    }
    if not counts or any(_per_layer(v, counts) for v in defaults.values()):
        return None
    changes = dict.fromkeys(counts, MAX_DEFAULT_LAYERS)
    init = ", ".join(f"{k}={v}" for k, v in changes.items())
    was = ", ".join(f"{k}={v}" for k, v in counts.items())
    text = f"{cls.__name__}({init})"
    note = (
        f"built as `{text}`: the defaults with at most {MAX_DEFAULT_LAYERS} layers per stack "
        f"instead of {was}; every other size is the default's, so the shapes are the default "
        f"configuration's. Pin another with `# fxls: init({was})`."
    )
    return Recipe(
        "config", _bound(cls, changes), text, init=init, kwargs=changes, notes=[note],
        default_make=cls,
    )  # fmt: skip


def _at_default(
    cls: type, params: list[inspect.Parameter], combo: Sequence[_ConfigCandidate]
) -> Callable[[], Any] | None:
    """What builds ``cls`` from the defaults ``combo``'s shorter configurations stand for;
    None when none of them is shorter."""
    if all(c.default is None for c in combo):
        return None
    kwargs = {p.name: c.value if c.default is None else c.default for p, c in zip(params, combo)}
    return _bound(cls, kwargs)


MAX_REPAIRS = 5
"""Times one recipe is tried again with guesses for the parameters its failure names."""

_MISSING = re.compile(
    r"__init__\(\) missing \d+ required (?:positional|keyword-only) arguments?: (.+)"
)
_QUOTED = re.compile(r"[`'\"](\w+)[`'\"]")


def repaired(
    doc: ExecutedDocument, cls: type, recipe: Recipe, error: BaseException
) -> Recipe | None:
    """``recipe`` (the defaults or assumed values) again, with guesses for the parameters its
    failure names, or None: a parameter of a base class that ``cls`` passes its ``**kwargs``
    on to (x-transformers' ``Decoder(**kwargs)``: "AttentionLayers.__init__() missing 1
    required positional argument: 'dim'"), or one left at a ``None`` default that the
    constructor refuses ("`depth` must be passed in"), or a number guessed where the message
    asks for a tuple ("depth needs to be tuple if integers indicating number of transformer
    blocks at that stage": one count per stage, ``(2, 2)``)."""
    if recipe.source not in ("defaults", "assumed") or not set(recipe.assumed) <= set(
        recipe.kwargs
    ):
        return None  # a call in the file, or a configuration filled in: not its parameters
    message = str(error)
    missing = _MISSING.search(message)
    named = _QUOTED.findall(missing.group(1) if missing else message)
    kwargs = dict(recipe.kwargs)
    added: dict[str, Any] = {}
    for name in dict.fromkeys(named):
        found = None if name in kwargs else _inherited(cls, name)
        if found is None:
            continue
        owner, param = found
        if missing is None and param.default is not None and param.default is not param.empty:
            continue  # named in the message, but its default is a value, not a gap
        values = _guesses_for(doc, owner, param)
        if values:
            added[name] = values[0]
    if not added:
        added = _sequences_asked_for(message, recipe)
    if not added:
        added = _from_failed_statement(doc, cls, recipe, error)
    if not added:
        return None
    kwargs.update(added)
    texts = {**recipe.assumed, **{k: _value_text(v) for k, v in added.items()}}
    parts = ", ".join(f"{k}={t}" for k, t in texts.items())
    init = parts if recipe.init is not None else None
    return Recipe("assumed", _bound(cls, kwargs), f"{cls.__name__}({parts})", init=init,
                  assumed=texts, kwargs=kwargs, notes=list(recipe.notes))  # fmt: skip


def _guesses_for(doc: ExecutedDocument, owner: type, param: inspect.Parameter) -> list[Any]:
    """Guessed values of ``owner``'s constructor parameter ``param``."""
    annotation = _annotations(owner, doc.namespace).get(param.name, param.empty)
    return _values(doc, owner, param.name, annotation, 1)


def _from_failed_statement(
    doc: ExecutedDocument, cls: type, recipe: Recipe, error: BaseException
) -> dict[str, Any]:
    """What the statement the build failed at shows was wanted (:mod:`.failedstatement`):
    sequences for the ints fxls guessed that it needs as sequences (``ih, iw =
    image_size``: ``(32, 32)``), else guesses for the parameters left at a ``None`` default
    that it reads (``float(drop_prob)``, ``assert exists(depth)``)."""
    failed = failedstatement.failed_statement(error)
    if failed is None:
        return {}
    guessed = {k: v for k, v in recipe.kwargs.items() if k in recipe.assumed}
    added: dict[str, Any] = dict(failedstatement.sequences_wanted(failed, error, guessed))
    if added:
        return added
    for name in failedstatement.nones_read(failed):
        found = None if name in recipe.kwargs else _inherited(cls, name)
        if found is None or found[1].default is not None:
            continue
        values = [v for v in _guesses_for(doc, found[0], found[1]) if v is not None]
        if values:
            added[name] = values[0]
    return added


_SEQUENCE_ASKED = re.compile(r"\b(tuple|list|sequence)\b", re.IGNORECASE)


def _sequences_asked_for(message: str, recipe: Recipe) -> dict[str, Any]:
    """Per-stage tuples for the numbers the recipe guessed whose names a failure message that
    asks for a tuple or list names (``depth``): ``(2, 2)`` (widths ``(64, 64)``)."""
    if not _SEQUENCE_ASKED.search(message):
        return {}
    return {
        name: tuple(_per_stage(name.lower())[0])
        for name, value in recipe.kwargs.items()
        if name in recipe.assumed
        and type(value) is int
        and re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", message)
    }


def _inherited(cls: type, name: str) -> tuple[type, inspect.Parameter] | None:
    """Parameter ``name`` of the first ``__init__`` along ``cls``'s bases that has it (and that
    ``__init__``'s class), when each ``__init__`` before it takes ``**kwargs`` (and so may pass
    it on)."""
    for owner in cls.__mro__:
        init = vars(owner).get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):
            return None
        if name in params and params[name].kind not in (
            inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD
        ):  # fmt: skip
            return owner, params[name]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return None
    return None


def _bound(cls: type, kwargs: dict[str, Any]) -> Callable[[], Any]:
    def make() -> Any:
        return cls(
            **{k: v.make() if isinstance(v, Nested) else copy.copy(v) for k, v in kwargs.items()}
        )

    return make


@dataclass
class Nested:
    """A module argument built when the recipe runs (under the build's device), by a recipe
    of the annotated class that built in a trial (:func:`_nested`)."""

    make: Callable[[], Any]
    text: str
    init: str | None


MAX_NESTING = 2
"""Module arguments built inside module arguments, at most."""
_nesting: list[type] = []


def _nested(doc: ExecutedDocument, sub: type) -> Nested | None:
    """An instance of ``sub`` for a parameter annotated with it (x-transformers'
    ``TransformerWrapper(..., attn_layers: AttentionLayers)``): the first of ``sub``'s own
    recipes (repaired as a failed build is) that builds on the meta device, or None."""
    if sub in _nesting or len(_nesting) >= MAX_NESTING:
        return None
    _nesting.append(sub)
    try:
        for recipe in itertools.islice(recipes(doc, sub), MAX_RECIPES // 2):
            built = _tried(doc, sub, recipe)
            if built is not None:
                named = doc.namespace.get(sub.__name__) is sub
                init = built.expr(sub.__name__) if named else None
                return Nested(built.make, built.text, init)
    finally:
        _nesting.pop()
    return None


def _tried(doc: ExecutedDocument, cls: type, recipe: Recipe) -> Recipe | None:
    """``recipe``, or the repaired form of it (:func:`repaired`), that builds on meta."""
    made, error = _on_meta(recipe)
    return made if made is not None else repairs(doc, cls, recipe, error, _on_meta)


def _on_meta(recipe: Recipe) -> tuple[Recipe | None, BaseException | None]:
    """``recipe`` when it builds on the meta device, else its error."""
    try:
        with torch.device("meta"):
            recipe.make()
    except BaseException as exc:  # user code: anything but running out of CPU time
        cpulimit.passed_on(exc)
        return None, exc
    return recipe, None


def repairs(
    doc: ExecutedDocument,
    cls: type,
    recipe: Recipe,
    error: BaseException | None,
    attempt: Callable[[Recipe], tuple[Made | None, BaseException | None]],
) -> Made | None:
    """What ``attempt`` makes of ``recipe`` repaired from its ``error`` (:func:`repaired`),
    again from each new error, at most ``MAX_REPAIRS`` times; None when none builds or a
    repair is not possible (an exit of the program is not repaired)."""
    for _ in range(MAX_REPAIRS):
        if error is None or isinstance(error, (SystemExit, KeyboardInterrupt)):
            return None
        fixed = repaired(doc, cls, recipe, error)
        if fixed is None:
            return None
        recipe = fixed
        built, error = attempt(recipe)
        if built is not None:
            return built
    return None


def _combinations(options: list[list[Any]], limit: int) -> Iterator[tuple[Any, ...]]:
    """The first ``limit`` combinations, varying one position at a time from the first."""
    first = tuple(o[0] for o in options)
    yield first
    count = 1
    for i, opts in enumerate(options):
        for alt in opts[1:]:
            if count >= limit:
                return
            yield (*first[:i], alt, *first[i + 1 :])
            count += 1


def _assumed(
    doc: ExecutedDocument,
    cls: type,
    required: list[inspect.Parameter],
    annotations: dict[str, Any],
    config_options: dict[str, list[_ConfigCandidate]],
    groups: int = 1,
) -> Iterator[Recipe]:
    """Guessed values for every required parameter (configs from their candidates); channel
    counts are multiples of ``groups`` (the group norm size the class defaults to)."""
    options: list[list[tuple[Any, str, str | None]]] = []
    uses = _uses(cls)
    for p in required:
        configs = config_options.get(p.name) or []
        if configs:
            options.append([(c.value, c.text, c.init_text) for c in configs])
            continue
        annotation = annotations.get(p.name, p.empty)
        if p.name in uses.wrapped and _any_callable(annotation, p.empty):
            options.append(_wrapped_options(doc, cls, uses.reads.get(p.name, set())))
            continue
        if _module_class(annotation):
            nested = _nested(doc, _unwrap_optional(annotation))
            if nested is None:
                return
            options.append([(nested, nested.text, nested.init)])
            continue
        provided = []
        if annotation is p.empty and not _CONFIG_LIKE.search(p.name.lower()):
            provided = _provided(doc, cls, uses.reads.get(p.name, set()), 0)
        values = _values(doc, cls, p.name, annotation, groups)
        if not values and not provided:
            return
        options.append([*provided, *((v, _value_text(v), _value_text(v)) for v in values)])
    for combo in _with_uniform_channels(
        _combinations(options, limit=MAX_RECIPES), required, options, groups
    ):
        kwargs = {p.name: value for p, (value, _, _) in zip(required, combo)}
        parts = [f"{p.name}={text}" for p, (_, text, _) in zip(required, combo)]
        init_parts = [f"{p.name}={i}" for p, (_, _, i) in zip(required, combo)]
        init = ", ".join(init_parts) if all(i is not None for _, _, i in combo) else None
        assumed = {p.name: text for p, (_, text, _) in zip(required, combo)}
        yield Recipe("assumed", _bound(cls, kwargs), f"{cls.__name__}({', '.join(parts)})",
                     init=init, assumed=assumed, kwargs=kwargs)  # fmt: skip


def _values(doc: ExecutedDocument, cls: type, name: str, annotation: Any, groups: int) -> list[Any]:
    """Guessed values of one required parameter, most plausible first ([] when none)."""
    values = guesses(name, _unwrap_optional(annotation), string_choices(cls, name))
    if groups > 1 and _CHANNELS.search(name.lower()):
        values = _multiples(values, groups)
    if not values and _optional(annotation):
        values = [None]
    return values or _class_choices(doc, name)


def _module_class(annotation: Any) -> bool:
    """Whether ``annotation`` names a module class of its own (not ``nn.Module`` itself)."""
    tp = _unwrap_optional(annotation)
    return isinstance(tp, type) and issubclass(tp, nn.Module) and tp is not nn.Module


def _init_uses(fn: ast.FunctionDef, kept: dict[str, str], reads: dict[str, set[str]]) -> None:
    """Into ``kept`` (attribute of ``self`` -> parameter) and ``reads``: the parameters
    ``__init__`` (``fn``) keeps (``self.vit = vit``) and the attributes it reads of them."""
    params = {a.arg for a in [*fn.args.args, *fn.args.kwonlyargs]}
    for node in ast.walk(fn):
        value = node.value if isinstance(node, (ast.Assign, ast.Attribute)) else None
        if not (isinstance(value, ast.Name) and value.id in params):
            continue
        if isinstance(node, ast.Assign):
            kept.update(dict.fromkeys(_self_attributes(node.targets), value.id))
        else:
            reads.setdefault(value.id, set()).add(typing.cast(ast.Attribute, node).attr)


def _any_callable(annotation: Any, empty: Any) -> bool:
    """Whether a kept and called parameter annotated ``annotation`` takes any module or
    function: unannotated, ``nn.Module`` or ``Callable`` (``GLU(..., activation: Callable)``),
    optional or not."""
    tp = _unwrap_optional(annotation)
    return tp in (empty, nn.Module, Callable) or typing.get_origin(tp) is Callable


def _wrapped_options(
    doc: ExecutedDocument, cls: type, reads: set[str]
) -> list[tuple[Any, str, str | None]]:
    """What a module ``cls`` keeps and calls (``_Uses.wrapped``) is given:
    ``nn.Identity()``, after an instance of a module class that has what the class reads of
    it when ``nn.Identity()`` has not (:func:`_provided`)."""
    identity = _identity_text(doc)
    return [*_provided(doc, cls, reads, nn.Identity()), (nn.Identity(), identity, identity)]


def _provided(
    doc: ExecutedDocument, cls: type, reads: set[str], stand_in: Any
) -> list[tuple[Any, str, str | None]]:
    """Instances of module classes that have the attributes ``cls`` reads of a parameter
    (``reads``, ``_Uses.reads``) and ``stand_in`` lacks: ``AutoregressiveWrapper(net)``
    reads ``net.max_seq_len``, ``MAE(encoder)`` ``encoder.pos_embedding``, ``Recorder(vit)``
    ``self.vit.transformer``; a ``TransformerWrapper`` or ``ViT`` found by :func:`_providers`,
    built by its own recipes (:func:`_nested`); [] when none."""
    wanted = {a for a in reads if not hasattr(stand_in, a)}
    options: list[tuple[Any, str, str | None]] = []
    if wanted:
        for provider in _providers(doc, cls, wanted):
            nested = _nested(doc, provider)
            if nested is not None:
                options.append((nested, nested.text, nested.init))
    return options


MAX_PROVIDERS = 2
"""Module classes tried for a kept module whose attributes the class reads."""
_CONFIG_LIKE = re.compile(r"conf|cfg|args|opt|param|setting")
"""Parameters never given a module for the attributes read of them (a configuration)."""


@dataclass
class _Uses:
    """What a class's source does with the parameters of its ``__init__``."""

    wrapped: set[str]
    """The parameters it keeps as an attribute that another method calls (``self.fn = fn`` in
    ``__init__``, ``self.fn(self.norm(x)) + x`` in ``forward``): wrapped modules, as in
    ``PreNorm(dim, fn)``, given ``nn.Identity()`` when nothing in the file says what they wrap
    and their annotation, if any, is ``nn.Module`` (``LayerScale(fn: Module, dim)``)."""
    reads: dict[str, set[str]]
    """Per parameter, the attributes the class reads of it: in ``__init__``
    (``net.max_seq_len``, ``net.attn_layers`` of ``net.attn_layers.dim``), and in any method
    through the attribute ``__init__`` keeps it as (``self.vit = vit``, then
    ``self.vit.transformer``)."""


def _uses(cls: type) -> _Uses:
    """:class:`_Uses` of ``cls``, from one reading of its source (none when it has none)."""
    try:
        tree = ast.parse(_dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return _Uses(set(), {})
    kept: dict[str, str] = {}  # attribute of self -> parameter
    called: set[str] = set()
    reads: dict[str, set[str]] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        if fn.name != "__init__":
            called.update(
                _self_attributes([n.func for n in ast.walk(fn) if isinstance(n, ast.Call)])
            )
            continue
        _init_uses(fn, kept, reads)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            for attribute in _self_attributes([node.value]) & kept.keys():
                reads.setdefault(kept[attribute], set()).add(node.attr)
    return _Uses({kept[a] for a in called & kept.keys()}, reads)


def _providers(doc: ExecutedDocument, cls: type, wanted: set[str]) -> list[type]:
    """Module classes whose ``__init__`` (or a base's) names every attribute of ``wanted``:
    the document's first, then those of ``cls``'s module, of the modules it imports classes
    from (``mae.py`` imports from ``vit.py``: its ``ViT``), and of the other loaded modules of
    its package, each by name; at most ``MAX_PROVIDERS``."""
    found: list[type] = []
    try:
        for scope in _provider_scopes(doc, cls):
            for value in sorted(
                (v for v in list(scope.values()) if isinstance(v, type)), key=lambda v: v.__name__
            ):
                if value not in found and value is not cls and _names_all(value, wanted):
                    found.append(value)
                    if len(found) >= MAX_PROVIDERS:
                        return found
    except Exception:  # user classes and modules: a name or a module that raises on reading
        pass
    return found


def _provider_scopes(doc: ExecutedDocument, cls: type) -> list[dict[str, Any]]:
    """Where :func:`_providers` looks, in order (see there)."""
    package = str(cls.__module__).split(".")[0]

    def ours(name: str) -> bool:
        return name == package or name.startswith(package + ".")

    own = sys.modules.get(cls.__module__)
    owned = vars(own) if own is not None else {}
    imported = sorted(
        {str(getattr(v, "__module__", "")) for v in list(owned.values()) if isinstance(v, type)}
    )
    loaded = sorted(name for name, module in list(sys.modules.items()) if module and ours(name))
    scopes = [doc.namespace, owned]
    seen = {id(doc.namespace), id(owned)}
    for name in [*imported, *loaded]:
        module = sys.modules.get(name)
        if module is not None and id(vars(module)) not in seen:
            seen.add(id(vars(module)))
            scopes.append(vars(module))
    return scopes


def _names_all(kind: type, wanted: set[str]) -> bool:
    """Whether ``kind`` is a module class whose ``__init__`` or a base's (below ``nn.Module``)
    names every attribute of ``wanted`` (``self.max_seq_len = max_seq_len``)."""
    names: set[str] = set()
    try:
        if not issubclass(kind, nn.Module) or str(kind.__module__).startswith("torch"):
            return False
        for base in kind.__mro__:
            if base is nn.Module:
                break
            init = vars(base).get("__init__")
            code = getattr(inspect.unwrap(init), "__code__", None) if callable(init) else None
            if code is not None:
                names.update(code.co_names)
    except Exception:  # user classes: a metaclass may raise anywhere
        return False
    return wanted <= names


def _identity_text(doc: ExecutedDocument) -> str:
    """``nn.Identity()`` as the file can write it (a directive is evaluated in its namespace)."""
    return "nn.Identity()" if doc.namespace.get("nn") is nn else "torch.nn.Identity()"


def _self_attributes(nodes: list[ast.expr]) -> set[str]:
    """The ``X`` of each ``self.X`` among ``nodes``."""
    return {
        n.attr
        for n in nodes
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }


UNIFORM_CHANNELS = 64
"""The one channel count given to every channel parameter of a block whose first guesses
do not build (``in_channels=3`` of a block that divides it by 4 for its group norms)."""
_CHANNEL_NAMES = re.compile(r"channel")


def _with_uniform_channels(
    combos: Iterator[tuple[Any, ...]],
    required: list[inspect.Parameter],
    options: list[list[tuple[Any, str, str | None]]],
    groups: int,
) -> Iterator[tuple[Any, ...]]:
    """The combinations, with one more second: every channel parameter (``in_channels``,
    ``prev_output_channel``, ``temb_channels``) at ``UNIFORM_CHANNELS`` (a multiple of the
    block's group count) and the others at their first guess. A UNet block's
    ``in_channels`` are features, not an image's 3."""
    channels = UNIFORM_CHANNELS if UNIFORM_CHANNELS % groups == 0 else 2 * groups
    uniform = tuple(
        (channels, repr(channels), repr(channels))
        if _CHANNEL_NAMES.search(p.name.lower()) and type(opts[0][0]) is int
        else opts[0]
        for p, opts in zip(required, options)
    )
    for index, combo in enumerate(combos):
        yield combo
        if index == 0 and uniform != combo:
            yield uniform


_GROUPS = re.compile(r"(^|_)groups$")
_CHANNELS = re.compile(r"channels|^dim$|_dim$|^features$|hidden_size")


def _group_size(params: list[inspect.Parameter]) -> int:
    """The largest group count a constructor defaults to (``resnet_groups=32``,
    ``norm_num_groups=32``): channel counts must be multiples of it for ``GroupNorm``."""
    found = 1
    for p in params:
        value = p.default
        if _GROUPS.search(p.name.lower()) and type(value) is int and 1 < value <= 256:
            found = max(found, value)
    return found


def _multiples(values: list[Any], groups: int) -> list[Any]:
    """The int guesses that are multiples of ``groups``, else ``2 * groups`` and ``groups``."""
    kept = [v for v in values if type(v) is int and v % groups == 0]
    return kept or [2 * groups, groups]


def _value_text(value: Any) -> str:
    if isinstance(value, type):
        return value.__name__
    return _text(value)


def _class_choices(doc: ExecutedDocument, param: str) -> list[Any]:
    """For a parameter that takes a module class (``block``): the file's classes named alike."""
    if not re.search(r"block|layer|cell|module", param.lower()):
        return []
    word = param.lower().rstrip("s").split("_")[-1]
    out = []
    for name, value in doc.namespace.items():
        if (
            isinstance(value, type)
            and issubclass(value, nn.Module)
            and getattr(value, "__module__", None) == doc.namespace.get("__name__")
            and word in name.lower()
        ):
            out.append(value)
    return out[:3]


# ---------------------------------------------------------------------------------------
# Evidence in the file: factories and call sites
# ---------------------------------------------------------------------------------------


def _mentions(fn: ast.FunctionDef, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(fn))


def factories(doc: ExecutedDocument, cls: type) -> Iterator[Recipe]:
    """Module-level functions without required parameters that return an instance of ``cls``."""
    if doc.tree is None:
        return
    functions = {
        s.name: s for s in doc.tree.body if isinstance(s, ast.FunctionDef) and _no_required(s)
    }
    helpers = {s.name: s for s in doc.tree.body if isinstance(s, ast.FunctionDef)}
    makers = {cls.__name__}
    for _ in range(3):  # functions that call functions that build the class
        grown = makers | {n for n, fn in helpers.items() if _mentions(fn, makers)}
        if grown == makers:
            break
        makers = grown
    for name, fn in functions.items():
        if _ENTRY_POINTS.match(name) or name not in makers or name == cls.__name__:
            continue
        if not any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn)):
            continue
        func = doc.namespace.get(name)
        if not callable(func):
            continue
        yield Recipe("factory", _limited(func, cls), f"{name}()", call=f"{name}()")


def _no_required(fn: ast.FunctionDef) -> bool:
    a = fn.args
    positional = a.posonlyargs + a.args
    required = len(positional) - len(a.defaults)
    missing_kw = any(d is None for d in a.kw_defaults)
    return required == 0 and not missing_kw


def _limited(func: Callable[[], Any], cls: type) -> Callable[[], Any]:
    def make() -> Any:
        result = _call_with_alarm(func, FACTORY_SECONDS)
        if not isinstance(result, cls):
            raise TypeError(f"returned {type(result).__name__}, not {cls.__name__}")
        return result

    return make


class _TooSlow(Exception):
    pass


def _call_with_alarm(func: Callable[[], Any], seconds: float) -> Any:
    def on_alarm(signum: int, frame: Any) -> None:
        raise _TooSlow(f"took longer than {seconds:g} s")

    try:
        previous = signal.signal(signal.SIGALRM, on_alarm)
    except ValueError:  # not the main thread
        return func()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return func()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _call_sites(doc: ExecutedDocument, cls: type) -> Iterator[Recipe]:
    """Calls ``Cls(...)`` in the file whose arguments use only constants and module names."""
    if doc.tree is None:
        return
    seen: set[str] = set()
    for node in nodes_of(doc.tree, ast.Call):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id != cls.__name__ or not (node.args or node.keywords):
            continue
        if not all(resolvable(a, doc.namespace) for a in [*node.args, *node.keywords]):
            continue
        args_text = arguments_text(node)
        if args_text is None or args_text in seen:
            continue
        seen.add(args_text)
        bound: dict[str, Any] = {}
        yield Recipe(
            "call site", _evaluated(doc, cls, args_text, bound), f"{cls.__name__}({args_text})",
            init=args_text, kwargs=bound,
        )  # fmt: skip
        if len(seen) >= 3:
            return


def _evaluated(
    doc: ExecutedDocument, cls: type, args_text: str, bound: dict[str, Any] | None = None
) -> Callable[[], Any]:
    """Builds ``cls({args_text})`` in the file's namespace; the arguments, by parameter name,
    go into ``bound`` (the sizes a call site names: ``prev_output_channel=128``)."""

    def make() -> Any:
        args, kwargs = eval(f"_fxls_args({args_text})", doc.namespace, {"_fxls_args": _given})
        if bound is not None:
            bound.clear()
            with contextlib.suppress(TypeError, ValueError):
                bound.update(inspect.signature(cls).bind_partial(*args, **kwargs).arguments)
        return cls(*args, **kwargs)

    return make


def _given(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return args, kwargs

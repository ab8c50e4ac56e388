"""Conventions of model libraries (transformers, diffusers), each on one small file of its
own: default configurations with deep stacks, inputs sized from a configuration or from the
build, dict-like results, sub-blocks called with caches and ``**kwargs``, group-normed blocks.

Every case runs the real capture (``run_capture``) on a document without ``# fxls:``
directives."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from fxls.protocol.labels import strategy_label
from fxls.protocol.model import CaptureJob, ClassRequest, ModuleResult
from fxls.worker.capture.pipeline import run_capture

HEADER = """\
from collections import OrderedDict
from dataclasses import dataclass
import torch
from torch import nn
"""


def _capture(source: str, *names: str) -> dict[str, ModuleResult]:
    text = textwrap.dedent(HEADER + source)
    lines = text.splitlines()
    requests = [
        ClassRequest(name, next(i for i, t in enumerate(lines, 1) if t.startswith(f"class {name}")))
        for name in names
    ]
    result = run_capture(CaptureJob(path="/virtual/lib.py", source=text, classes=requests), print)
    assert result.error is None, result.error
    return {m.name: m for m in result.modules}


def _shape(mod: ModuleResult) -> list[object]:
    assert mod.outputs and mod.outputs[0].shape is not None, (mod.status, mod.notes)
    return list(mod.outputs[0].shape)


DEEP = """
@dataclass
class DeepConfig:
    vocab_size: int = 100
    hidden_size: int = 48
    num_hidden_layers: int = 12


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states):
        return hidden_states + self.fc(hidden_states)


class Backbone(nn.Module):
    config_class = DeepConfig

    def __init__(self, config):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))

    def forward(self, input_ids=None, inputs_embeds=None):
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        hidden_states = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        if hidden_states.shape[-1] != self.embed.embedding_dim:  # FX cannot trace this
            raise ValueError("embeddings of the wrong size")
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states
"""


def test_a_default_configuration_with_a_deep_stack_is_built_with_two_layers_and_says_so() -> None:
    mod = _capture(DEEP, "Backbone")["Backbone"]
    assert mod.constructed is not None
    assert mod.constructed.text == "Backbone(DeepConfig(num_hidden_layers=2))", mod.constructed
    assert mod.constructed.pin == "config=DeepConfig(num_hidden_layers=2)"
    assert any("num_hidden_layers=12" in n and "DeepConfig()" in n for n in mod.notes), mod.notes
    assert _shape(mod)[-1] == 48  # every other size is the default's
    # its parameters as built (two layers) and at the default's twelve: 100 x 48 embedded,
    # 48 x 48 + 48 per layer
    assert (mod.params, mod.default_params) == (4800 + 2 * 2352, 4800 + 12 * 2352)


def _head(parameters: str, call: str) -> str:
    """``DEEP`` and a head model over its ``Backbone``: ``forward(self, {parameters})`` calls
    the backbone with ``{call}``."""
    return DEEP + textwrap.dedent(f"""
        class Head(nn.Module):
            config_class = DeepConfig

            def __init__(self, config):
                super().__init__()
                self.model = Backbone(config)
                self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)

            def forward(self, {parameters}):
                return self.lm_head(self.model({call}))
    """)


def test_token_ids_are_sized_from_the_configuration_when_no_layer_tells() -> None:
    """``input_ids`` reaches no layer fxls can read (it is passed by keyword to a block kept
    whole): the configuration's vocabulary says it is token ids ``(B, T)``."""
    head = _capture(
        _head("input_ids=None, labels=None, **kwargs", "input_ids=input_ids, **kwargs"), "Head"
    )["Head"]
    assert head.inputs[0].name == "input_ids" and head.inputs[0].value.dtype == "int64", head.inputs
    assert head.inputs[0].value.shape == ["B", "T"] and head.inputs[0].assumed
    assert _shape(head) == ["B", "T", 100]
    # the plain trace stopped inside the backbone, which fxls kept whole: the fix says so
    (failed,) = [d for d in head.diagnostics if d.code == "FX101"]
    assert failed.severity == "information" and failed.fix is not None, failed
    assert failed.fix.endswith("Here fxls kept `Backbone` as a leaf."), failed.fix


def test_a_failure_a_leaf_got_past_says_what_fxls_did_not_what_to_declare() -> None:
    """A head passing both ``input_ids`` and ``inputs_embeds`` stops a plain trace at the
    backbone's "exactly one of" (FX199, as in Llama's heads); fxls keeps the backbone whole
    and shows shapes. The fix said to mark the failing submodule as a leaf or to skip the
    class: it says fxls kept it as a leaf."""
    head = _capture(
        _head(
            "input_ids=None, inputs_embeds=None", "input_ids=input_ids, inputs_embeds=inputs_embeds"
        ),
        "Head",
    )["Head"]
    assert _shape(head) == ["B", "T", 100]
    (failed,) = [d for d in head.diagnostics if d.code == "FX199"]
    assert "exactly one of input_ids or inputs_embeds" in failed.message, failed
    assert failed.severity == "information" and failed.fix is not None, failed
    assert failed.fix.endswith(
        "Here fxls kept `Backbone` as a leaf; a torch.fx trace of your own can do the same."
    ), failed.fix
    assert "skip" not in failed.fix


def test_a_dict_like_result_shows_its_tensor_fields() -> None:
    """A ``ModelOutput``-style result (an ordered dict with dataclass fields) shows the fields
    that hold tensors and names them in a note (a transformers head's unset fields, left
    out, are checked on the real library in tests/e2e/test_libraries.py)."""
    mods = _capture(
        """
@dataclass
class Output(OrderedDict):
    logits: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None
    attentions: torch.Tensor | None = None

    def __post_init__(self):
        for name in ("logits", "hidden_states", "attentions"):
            if getattr(self, name) is not None:
                self[name] = getattr(self, name)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return Output(logits=self.fc(x), hidden_states=None)
""",
        "Classifier",
    )
    mod = mods["Classifier"]
    assert [v.kind for v in mod.outputs] == ["tensor"], mod.outputs
    assert _shape(mod)[-1] == 4
    assert not [d for d in mod.diagnostics if d.code == "FX109"], mod.diagnostics
    assert any("returns a dict" in n and "`logits` [B, 4]" in n for n in mod.notes), mod.notes


def test_the_results_a_file_defines_are_not_taken_for_its_configuration() -> None:
    """A model file defines its ``ModelOutput`` dataclasses (every field defaults, as a
    configuration's do) and imports its configuration: a block taking ``config`` is built
    with the configuration, not with one of the results (``'BaseModelOutputWithPast' object
    has no attribute 'hidden_size'`` on 39 classes of 87 transformers files)."""
    outputs = "".join(
        f"""
@dataclass
class Vision{kind}Output(OrderedDict):
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple | None = None
"""
        for kind in ("Encoder", "Model", "Pooled")
    )
    mods = _capture(
        outputs
        + """
class VisionConfig:
    def __init__(self, hidden_size=24, intermediate_size=40):
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size


class VisionMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, hidden_state):
        return self.down(self.up(hidden_state))
""",
        "VisionMLP",
    )
    mod = mods["VisionMLP"]
    assert mod.status == "traced", mod.diagnostics
    assert mod.constructed is not None and "VisionConfig()" in mod.constructed.text
    assert _shape(mod)[-1] == 24


def test_a_sub_block_called_with_a_cache_and_kwargs_is_captured_from_its_parent() -> None:
    """The parent passes a cache object to a parameter that defaults to ``None`` and flags
    through ``**kwargs``: the block is still the instance the parent called, with the
    parent's inputs, and a note says what was not passed again."""
    mods = _capture(
        """
class Cache:
    def update(self, key):
        return key


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, hidden_states, past_key_values=None, **kwargs):
        out = self.proj(hidden_states)
        if past_key_values is not None:
            out = past_key_values.update(out)
        return out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 24)
        self.attn = Attention(24)

    def forward(self, input_ids):
        cache = Cache()
        return self.attn(self.embed(input_ids), past_key_values=cache, use_cache=True)
""",
        "Model",
        "Attention",
    )
    attn = mods["Attention"]
    assert attn.constructed is not None and attn.constructed.source == "parent", attn.constructed
    assert _shape(attn) == ["B", "T", 24]
    assert any("`past_key_values` (Cache)" in n and "`use_cache`" in n for n in attn.notes)


SHARED_KV = """
from collections import UserDict


class Attention(nn.Module):
    def __init__(self, dim, layer_type):
        super().__init__()
        self.layer_type = layer_type
        self.k = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)

    def forward(self, hidden_states, shared_kv_states=None):
        # LOOP
        if self.layer_type in shared_kv_states:
            key = shared_kv_states[self.layer_type]
        else:
            key = self.k(hidden_states)
            shared_kv_states[self.layer_type] = key
        return self.o(key + hidden_states)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 24)
        self.layers = nn.ModuleList([Attention(24, "full"), Attention(24, "full")])

    def forward(self, input_ids):
        shared = UserDict()
        hidden_states = self.embed(input_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, shared_kv_states=shared)
        return hidden_states
"""


@pytest.mark.parametrize(
    "loop",
    [
        "pass",  # traced by torch.fx
        "for _ in range(hidden_states.shape[-1] // 24):\n"  # torch.fx cannot: a fake run
        "            hidden_states = hidden_states * 1.0",
    ],
    ids=["fx", "fake-run"],
)
def test_a_mapping_the_parent_passes_for_its_blocks_to_fill_is_passed_again(loop: str) -> None:
    """Gemma 4's layers share keys and values through a ``UserDict`` the model makes and each
    attention writes into: the block is given that mapping as it was when the parent called
    it (empty), not the parameter's default ``None``, which it cannot write into; each run of
    the block gets its own (what the trace or a run writes is not read by the runs after it)."""
    mods = _capture(SHARED_KV.replace("# LOOP", loop), "Model", "Attention")
    attn = mods["Attention"]
    assert attn.constructed is not None and attn.constructed.source == "parent", attn.constructed
    assert attn.status == "traced", [d.message for d in attn.diagnostics]
    assert (attn.strategy.method == "fake-run") == (loop != "pass"), attn.strategy
    assert _shape(attn) == ["B", "T", 24]
    shared = next(i for i in attn.inputs if i.name == "shared_kv_states")
    assert shared.origin == "parent" and shared.value.text == "{}", shared  # empty when called
    assert not any("shared_kv_states" in n for n in attn.notes), attn.notes


BLOCKS = """
class Resnet(nn.Module):
    def __init__(self, in_channels, out_channels, temb_channels=512, groups=32):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb_channels, out_channels)

    def forward(self, input_tensor, temb):
        hidden_states = input_tensor
        hidden_states = self.conv1(torch.nn.functional.silu(self.norm1(hidden_states)))
        if hidden_states.shape[1] > 0:  # a decision FX cannot trace: kept whole
            hidden_states = hidden_states + self.time_emb_proj(temb)[:, :, None, None]
        return hidden_states


class DownBlock(nn.Module):
    def __init__(self, in_channels, out_channels, temb_channels, resnet_groups=32):
        super().__init__()
        self.resnets = nn.ModuleList(
            [Resnet(in_channels, out_channels, temb_channels, resnet_groups)]
        )

    def forward(self, hidden_states, temb=None):
        for resnet in self.resnets:
            hidden_states = resnet(hidden_states, temb)
        return hidden_states
"""


def test_a_group_normed_block_is_assumed_with_channels_its_groups_divide() -> None:
    mod = _capture(BLOCKS, "DownBlock")["DownBlock"]
    assert mod.constructed is not None and mod.constructed.source == "assumed"
    assert int(mod.constructed.assumed["in_channels"]) % 32 == 0, mod.constructed


def test_inputs_of_a_block_come_through_the_block_it_keeps_whole_and_its_build() -> None:
    """``hidden_states`` reaches a ``Resnet`` kept as a leaf, whose own forward passes it
    (renamed) to a GroupNorm: ``(B, C, H, W)``. ``temb`` defaults to ``None`` but the block
    was built with ``temb_channels``: ``(B, temb_channels)``."""
    mod = _capture(BLOCKS, "DownBlock")["DownBlock"]
    shapes = {i.name: i.value.shape for i in mod.inputs}
    channels = int(mod.constructed.assumed["in_channels"]) if mod.constructed else 0
    assert shapes["hidden_states"] is not None and shapes["hidden_states"][:2] == ["B", channels]
    assert len(shapes["hidden_states"]) == 4, shapes
    assert shapes["temb"] == ["B", int(mod.constructed.assumed["temb_channels"])], shapes
    assert len(_shape(mod)) == 4


def test_a_wrapper_taking_only_args_and_kwargs_called_with_none_is_no_error() -> None:
    """``forward(self, *args, **kwargs)`` passes everything on (Whisper's decoder wrapper):
    called with nothing, the block it wraps raises; that is a hint, not an error."""
    mods = _capture(
        """
class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)

    def forward(self, input_ids=None, inputs_embeds=None):
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        return self.embed(input_ids) if inputs_embeds is None else inputs_embeds


class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder = Decoder()

    def forward(self, *args, **kwargs):
        return self.decoder(*args, **kwargs)
""",
        "Wrapper",
    )
    diagnostics = mods["Wrapper"].diagnostics
    assert not [d for d in diagnostics if d.severity == "error"], diagnostics


PADDED = """
class TinyConfig:
    def __init__(self, vocab_size=100, hidden_size=16, num_labels=3, pad_token_id=None):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_labels = num_labels
        self.pad_token_id = pad_token_id


class SequenceClassifier(nn.Module):
    config_class = TinyConfig

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.score = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids=None, inputs_embeds=None):
        logits = self.score(self.embed(input_ids))
        batch_size = input_ids.shape[0]
        if self.config.pad_token_id is None and batch_size != 1:
            raise ValueError("Cannot handle batch sizes > 1 if no padding token is defined.")
        non_pad_mask = (input_ids != self.config.pad_token_id).to(torch.int32)
        token_indices = torch.arange(input_ids.shape[-1])
        last_non_pad_token = (token_indices * non_pad_mask).argmax(-1)
        return logits[torch.arange(batch_size), last_non_pad_token]
"""


def test_a_default_configuration_gets_a_pad_token_when_forward_needs_one_and_says_so() -> None:
    """A decoder's sequence classifier finds each sequence's last token by ``pad_token_id``
    and raises for a batch of more than one when the default configuration sets none."""
    mod = _capture(PADDED, "SequenceClassifier")["SequenceClassifier"]
    assert mod.constructed is not None
    assert mod.constructed.pin == "config=TinyConfig(pad_token_id=0)", mod.constructed
    assert any("pad_token_id=0" in n and "TinyConfig()" in n for n in mod.notes), mod.notes
    assert _shape(mod) == ["B", 3]


UP = """
class Res(nn.Module):
    def __init__(self, in_channels, out_channels, temb_channels):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.norm1 = nn.GroupNorm(32, in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.time_emb_proj = nn.Linear(temb_channels, out_channels)

    def forward(self, input_tensor, temb):
        hidden_states = self.conv1(self.norm1(input_tensor))
        return hidden_states + self.time_emb_proj(temb)[:, :, None, None]


class UpBlock(nn.Module):
    def __init__(self, in_channels, prev_output_channel, out_channels, temb_channels,
                 num_layers=3):
        super().__init__()
        resnets = []
        for i in range(num_layers):
            res_skip_channels = in_channels if (i == num_layers - 1) else out_channels
            resnet_in_channels = prev_output_channel if i == 0 else out_channels
            resnets.append(Res(resnet_in_channels + res_skip_channels, out_channels,
                               temb_channels))
        self.resnets = nn.ModuleList(resnets)
        self.up = nn.Upsample(scale_factor=2.0)

    def forward(self, hidden_states, res_hidden_states_tuple, temb=None):
        for resnet in self.resnets:
            res_hidden_states = res_hidden_states_tuple[-1]
            res_hidden_states_tuple = res_hidden_states_tuple[:-1]
            hidden_states = torch.cat([hidden_states, res_hidden_states], dim=1)
            hidden_states = resnet(hidden_states, temb)
        return self.up(hidden_states)


class SkipDown(nn.Module):
    def __init__(self, in_channels, out_channels, temb_channels):
        super().__init__()
        self.resnets = nn.ModuleList(
            [Res(in_channels, out_channels, temb_channels)]
        )
        self.groups = torch.nn.GroupNorm(min(in_channels // 4, 32), in_channels)
        self.downsamplers = nn.ModuleList([nn.AvgPool2d(2)])
        self.skip_conv = nn.Conv2d(3, out_channels, 1)

    def forward(self, hidden_states, temb=None, skip_sample=None):
        hidden_states = self.resnets[0](self.groups(hidden_states), temb)
        hidden_states = self.downsamplers[0](hidden_states)
        skip_sample = self.downsamplers[0](skip_sample)
        return hidden_states + self.skip_conv(skip_sample), skip_sample
"""


def test_an_up_block_gets_one_skip_state_per_resnet_sized_from_its_resnets() -> None:
    """``res_hidden_states_tuple`` is popped from the end, one state per resnet: the states
    are sized from what each resnet's input channels leave after the states it receives,
    ``hidden_states`` from ``prev_output_channel``."""
    mod = _capture(UP + "\n\nblock = UpBlock(32, 128, 64, temb_channels=16)\n", "UpBlock")[
        "UpBlock"
    ]
    assert mod.constructed is not None and mod.constructed.source == "call site"
    inputs = {i.name: i.value for i in mod.inputs}
    assert inputs["hidden_states"].shape is not None and inputs["hidden_states"].shape[1] == 128
    states = inputs["res_hidden_states_tuple"].text or ""
    assert states.startswith("([B, 32, 224, 224], [B, 64, 224, 224], [B, 64, "), states
    # the states' batch is the batch of hidden_states: symbolic, not their example size 2
    assert _shape(mod)[:3] == ["B", 64, 2 * inputs["hidden_states"].shape[2]]


def test_block_channels_are_tried_alike_when_the_first_guesses_do_not_build() -> None:
    """``in_channels=3`` (an image's) leaves no group for a norm of ``in_channels // 4``
    groups: every channel parameter at 64 builds; ``skip_sample`` is the image the block's
    ``skip_conv`` takes."""
    mod = _capture(UP, "SkipDown")["SkipDown"]
    assert mod.constructed is not None and mod.constructed.assumed["in_channels"] == "64"
    inputs = {i.name: i.value for i in mod.inputs}
    assert inputs["skip_sample"].shape is not None and inputs["skip_sample"].shape[:2] == ["B", 3]
    assert _shape(mod)[1] == 64


HEADS = """
class TextConfig:
    def __init__(self, vocab_size=100, hidden_size=16):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size


class Encoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)

    def forward(self, input_ids):
        return self.embed(input_ids)


class TinyForMultipleChoice(nn.Module):
    config_class = TextConfig

    def __init__(self, config):
        super().__init__()
        self.encoder = Encoder(config)
        self.score = nn.Linear(config.hidden_size, 1)

    def forward(self, input_ids=None, inputs_embeds=None):
        num_choices = input_ids.shape[1]
        input_ids = input_ids.view(-1, input_ids.size(-1))
        pooled = self.encoder(input_ids=input_ids)[:, 0]
        return self.score(pooled).view(-1, num_choices)


class TinyCrossAttention(nn.Module):
    config_class = TextConfig

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None):
        scores = self.query(hidden_states) @ self.key(encoder_hidden_states).transpose(1, 2)
        return scores.softmax(-1)
"""


def test_a_multiple_choice_head_gets_token_ids_per_choice() -> None:
    """``*ForMultipleChoice`` reads ``num_choices`` off the second dimension of its token ids:
    ``(B, N, T)``, and its logits are ``[B, N]``."""
    mod = _capture(HEADS, "TinyForMultipleChoice")["TinyForMultipleChoice"]
    assert mod.inputs[0].value.shape == ["B", "N", "T"], mod.inputs
    assert _shape(mod) == ["B", "N"]


def test_a_cross_attention_block_gets_the_states_it_attends_to() -> None:
    """``encoder_hidden_states`` defaults to ``None``, but a ``*CrossAttention`` block attends
    to nothing else: ``(B, S, hidden_size)``."""
    mod = _capture(HEADS, "TinyCrossAttention")["TinyCrossAttention"]
    inputs = {i.name: i.value for i in mod.inputs}
    assert inputs["encoder_hidden_states"].shape == ["B", "S", 16], inputs
    assert _shape(mod) == ["B", "T", "S"]


def test_the_module_tree_follows_the_documents_text() -> None:
    """Every document runs as the same module name (and the zygote's warm-up captured one
    before any job was forked): the parsed source a capture reads is the current text's."""
    import linecache
    import sys
    import types

    from fxls.worker.capture.build.inputs import module_tree

    name, path = "__fxls_tree_test__", "/virtual/tree_test.py"
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    try:
        for text in ("class First:\n    pass\n", "class Second:\n    pass\n"):
            linecache.cache[path] = (len(text), None, text.splitlines(keepends=True), path)
            cls = type("C", (), {"__module__": name})
            tree = module_tree(cls)
            assert tree is not None
            names = [c.name for c in tree.body if isinstance(c, ast.ClassDef)]
            assert names == [text.split()[1].rstrip(":")]
    finally:
        sys.modules.pop(name, None)
        linecache.cache.pop(path, None)


ANNOTATED = """
class Frames(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, hidden_states: torch.Tensor, num_frames: int, extra_kwargs=None):
        batch_frames, tokens, channels = hidden_states.shape
        batch = batch_frames // num_frames
        hidden_states = hidden_states.reshape(batch, num_frames, tokens, channels)
        return self.norm(hidden_states)


assert Frames.forward.__annotations__["num_frames"] is int  # the file's own semantics
"""


def test_the_document_keeps_its_own_annotations_and_an_int_count_is_one() -> None:
    """The document is compiled with its own ``__future__`` imports only: ``num_frames: int``
    stays the class ``int`` (the file asserts it at import), so fxls passes a count, 1,
    which divides the batch, instead of a tensor shaped like the first input."""
    mod = _capture(ANNOTATED, "Frames")["Frames"]
    inputs = {i.name: i.value for i in mod.inputs}
    assert inputs["num_frames"].kind == "int" and inputs["num_frames"].text == "1", inputs
    assert _shape(mod) == ["B", 1, "T", 8]


PROCESSED = """
class Processor:
    def __call__(self, attn, hidden_states, temb=None):
        if hidden_states.ndim == 4:  # FX cannot trace this
            hidden_states = hidden_states.flatten(2).transpose(1, 2)
        query = attn.to_q(hidden_states)
        return attn.to_out(query)


class Modulation(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.act = nn.SiLU()
        self.linear = nn.Linear(dim, 2 * dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, emb=None):
        scale, shift = self.linear(self.act(emb)).chunk(2, dim=-1)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


class ProcessedAttention(nn.Module):
    def __init__(self, query_dim: int = 24):
        super().__init__()
        self.to_q = nn.Linear(query_dim, 32)
        self.to_out = nn.Linear(32, query_dim)
        self.processor = Processor()

    def forward(self, hidden_states, temb=None):
        return self.processor(self, hidden_states, temb=temb)


class Modulated(nn.Module):
    def __init__(self, dim: int = 24):
        super().__init__()
        self.norm = Modulation(dim)
        self.attn = ProcessedAttention(dim)

    def forward(self, hidden_states, temb):
        return self.attn(self.norm(hidden_states, emb=temb))
"""


def test_inputs_are_followed_into_processors_and_keyword_arguments() -> None:
    """``self.processor(self, hidden_states)`` (diffusers' attention processors): the value
    reaches ``attn.to_q`` inside the processor's ``__call__``; ``self.norm(x, emb=temb)``:
    ``temb`` reaches ``self.linear`` through the activation inside the sub-block."""
    found = _capture(PROCESSED, "ProcessedAttention", "Modulated")
    attention = found["ProcessedAttention"]
    assert attention.inputs[0].value.shape == ["B", "T", 24], attention.inputs
    modulated = {i.name: i.value for i in found["Modulated"].inputs}
    assert modulated["temb"].shape == ["B", 24], modulated
    assert _shape(found["Modulated"]) == ["B", "T", 24]


BUILT_BY_NAME = """
class Block(nn.Module):
    def __init__(self, channels: int, act_fn: str, upsample_fn: str):
        super().__init__()
        acts = {"silu": nn.SiLU, "relu": nn.ReLU, "gelu": nn.GELU}
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.act = acts[act_fn]()
        self.up = nn.Upsample(scale_factor=2, mode=upsample_fn)

    def forward(self, x):
        return self.up(self.act(self.conv(x)))


class Decoder(nn.Module):
    def __init__(self, block_out_channels: tuple[int, ...]):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(block_out_channels[0], block_out_channels[-1], 4, 2, 1)

    def forward(self, x):
        x = torch.relu(x)
        return self.deconv(x.add(1).div(2))
"""


def test_activations_and_modes_by_name_and_transposed_convolutions() -> None:
    """A string parameter named like an activation or an upsampling mode gets a name every
    table knows; widths per stage are 64 each; a transposed convolution sizes its input."""
    found = _capture(BUILT_BY_NAME, "Block", "Decoder")
    assert _shape(found["Block"])[:2] == ["B", 64], found["Block"].constructed
    construction = found["Block"].constructed
    assert construction is not None and "act_fn='silu'" in construction.text, construction
    decoder = found["Decoder"]
    assert decoder.inputs[0].value.shape == ["B", 64, 224, 224], decoder.inputs
    assert _shape(decoder) == ["B", 64, 448, 448]


ROTARY = """
class Rotary(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.register_buffer("inv_freq", torch.ones(dim // 2))

    def forward(self, x, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


class RotatedAttention(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, hidden_states, position_embeddings):
        cos, sin = position_embeddings
        q = self.proj(hidden_states)
        return q * cos + q * sin


class RotatedModel(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.embed = nn.Embedding(50, dim)
        self.rotary = Rotary(dim)
        self.attn = RotatedAttention(dim)

    def forward(self, input_ids):
        hidden_states = self.embed(input_ids)
        position_ids = torch.arange(input_ids.shape[1])[None, :]
        return self.attn(hidden_states, self.rotary(hidden_states, position_ids))
"""


def test_tensors_inside_a_tuple_from_the_parent_keep_their_dimension_names() -> None:
    """``position_embeddings = (cos, sin)`` passed by the parent as ``[1, T, 8]`` each: the
    child's output is ``[B, T, 8]``, with ``T`` a name and not the example size 3 that a
    static tuple would have fixed; the input reads ``([1, T, 8], [1, T, 8])``."""
    found = _capture(ROTARY, "RotatedModel", "RotatedAttention")
    child = found["RotatedAttention"]
    inputs = {i.name: i.value for i in child.inputs}
    assert inputs["position_embeddings"].text == "([1, T, 8], [1, T, 8])", inputs
    assert _shape(child) == ["B", "T", 8]


BASES = """
class AbstractBlock(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        "Subclasses compute here."
        raise NotImplementedError("subclasses implement forward")


class LinearBlock(AbstractBlock):
    def __init__(self, dim: int = 8):
        super().__init__(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fc(x)


class Processor(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def __call__(self, attn, hidden_states):
        return self.fc(hidden_states)
"""


def test_abstract_bases_and_modules_called_through_call_are_skipped_with_a_reason() -> None:
    """A ``forward`` that only raises ``NotImplementedError`` and a module with its own
    ``__call__`` and no ``forward`` are correct code: skipped, saying why, with no warning;
    the subclass is captured."""
    found = _capture(BASES, "AbstractBlock", "LinearBlock", "Processor")
    for name, why in (("AbstractBlock", "an abstract base"), ("Processor", "`__call__`")):
        mod = found[name]
        assert mod.status == "skipped" and why in mod.notes[0], (mod.status, mod.notes)
        assert not [d for d in mod.diagnostics if d.severity in ("warning", "error")]
    assert _shape(found["LinearBlock"]) == ["B", 8]


ADA_BLOCKS = """
import torch.nn.functional as F


class AdaGroupNorm(nn.Module):
    def __init__(self, embedding_dim, out_dim, num_groups):
        super().__init__()
        self.num_groups = num_groups
        self.linear = nn.Linear(embedding_dim, out_dim * 2)

    def forward(self, x, emb):
        emb = self.linear(emb)[:, :, None, None]
        scale, shift = emb.chunk(2, dim=1)
        x = F.group_norm(x, self.num_groups)
        return x * (1 + scale) + shift


class CondResnet(nn.Module):
    def __init__(self, channels, temb_channels):
        super().__init__()
        self.norm1 = AdaGroupNorm(temb_channels, channels, 2)
        self.nonlinearity = nn.GELU()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, input_tensor, temb):
        hidden_states = self.norm1(input_tensor, temb)
        hidden_states = self.conv1(self.nonlinearity(hidden_states))
        return input_tensor + hidden_states


class Mixer(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.proj = nn.Linear(channels, channels)

    def forward(self, x):
        out = torch.zeros_like(x)
        for i in range(x.shape[0]):
            out[i] = x[i]
        return out


class CondDownBlock(nn.Module):
    def __init__(self, channels=64, temb_channels=32):
        super().__init__()
        self.resnets = nn.ModuleList([CondResnet(channels, temb_channels) for _ in range(2)])
        self.attentions = nn.ModuleList([Mixer(channels) for _ in range(2)])

    def forward(self, hidden_states, temb=None):
        for resnet, attn in zip(self.resnets, self.attentions):
            hidden_states = resnet(hidden_states, temb)
            hidden_states = attn(hidden_states)
        return hidden_states
"""


def test_an_input_is_sized_by_the_layer_after_a_functional_norm_not_by_a_leaf_first_reached() -> (
    None
):
    """diffusers' ``KCrossAttnDownBlock2D``: ``hidden_states`` goes to ``F.group_norm`` inside
    a block traced through, and on the residual path to a block kept whole (``Mixer``, which
    assigns into a traced value), which is nearer and tells no shape. The input is sized by
    ``conv1`` after the norm, not shaped like ``temb``."""
    mod = _capture(ADA_BLOCKS, "CondDownBlock")["CondDownBlock"]
    shapes = {i.name: i.value.shape for i in mod.inputs}
    assert shapes["hidden_states"] == ["B", 64, 224, 224], (shapes, mod.notes)
    assert shapes["temb"] == ["B", 32], shapes
    assert _shape(mod) == ["B", 64, 224, 224]


DUAL = """
@dataclass
class DualConfig:
    vocab_size: int = 100
    hidden_size: int = 32
    image_size: int = 16
    patch_size: int = 4
    num_channels: int = 3


class PatchEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj = nn.Conv2d(config.num_channels, config.hidden_size, config.patch_size,
                              stride=config.patch_size)

    def forward(self, pixel_values):
        return self.proj(pixel_values).flatten(2).transpose(1, 2)


class VisionTower(nn.Module):
    input_modalities = ("image",)

    def __init__(self, config):
        super().__init__()
        self.embeddings = PatchEmbeddings(config)

    def forward(self, pixel_values=None):
        return self.embeddings(pixel_values).mean(1)


class DualEncoder(nn.Module):
    config_class = DualConfig
    input_modalities = ("image", "text")

    def __init__(self, config):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.vision = VisionTower(config)

    def forward(self, input_ids=None, pixel_values=None, attention_mask=None):
        text = self.tokens(input_ids).mean(1)
        image = self.vision(pixel_values)
        return text @ image.t()


class Captioner(nn.Module):
    config_class = DualConfig
    input_modalities = ("image", "text")

    def __init__(self, config):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.vision = VisionTower(config)

    def forward(self, input_ids=None, pixel_values=None):
        text = self.tokens(input_ids)
        if pixel_values is not None:
            text = text + self.vision(pixel_values)[:, None]
        return text


class Listener(nn.Module):
    config_class = DualConfig
    input_modalities = ("audio", "text")

    def __init__(self, config):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.audio = nn.Linear(8, config.hidden_size)

    def forward(self, input_ids=None, input_features=None, features_embeds=None):
        if (input_features is None) ^ (features_embeds is not None):
            raise ValueError("You must specify exactly one of input_features or features_embeds")
        if input_features is not None:
            features_embeds = self.audio(input_features)
        return self.tokens(input_ids) + features_embeds.mean()


class ListenerForGeneration(nn.Module):
    config_class = DualConfig
    input_modalities = ("audio", "text")

    def __init__(self, config):
        super().__init__()
        self.model = Listener(config)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids=None, input_features=None):
        return self.head(self.model(input_ids=input_ids, input_features=input_features))
"""


def test_a_model_of_two_modalities_gets_an_input_of_each_and_its_towers_theirs() -> None:
    mods = _capture(
        DUAL, "PatchEmbeddings", "VisionTower", "DualEncoder", "Captioner", "Listener",
        "ListenerForGeneration",
    )  # fmt: skip

    dual = mods["DualEncoder"]
    given = {i.name: i.value.shape for i in dual.inputs if i.value.kind == "tensor"}
    assert given == {"input_ids": ["B", "T"], "pixel_values": ["B", 3, 16, 16]}
    assert _shape(dual) == ["B", "B"]
    # the towers are captured with the image their parent passes
    assert _shape(mods["VisionTower"]) == ["B", 32]
    assert _shape(mods["PatchEmbeddings"]) == ["B", 16, 32]
    # a model that also runs on text alone (it asks whether an image was given) keeps None
    captioner = mods["Captioner"]
    assert [i.name for i in captioner.inputs if i.value.kind == "tensor"] == ["input_ids"]
    assert _shape(captioner) == ["B", "T", 32]
    # asking is not enough when forward raises without it ("exactly one of ..."): a model
    # that needs its audio or their embeddings gets the audio, and so does its head
    for name in ("Listener", "ListenerForGeneration"):
        given = [i.name for i in mods[name].inputs if i.value.kind == "tensor"]
        assert given == ["input_ids", "input_features"], (name, given)
    assert _shape(mods["ListenerForGeneration"]) == ["B", "T", 100]


GRID = (
    DUAL
    + """


class Tower(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj = nn.Conv2d(config.num_channels, config.hidden_size, config.patch_size,
                              stride=config.patch_size)

    def forward(self, pixel_values, grid=None):
        # the grid's own size: a tower given no grid (None) stops
        return self.proj(pixel_values).flatten(2).mean(2) * grid.shape[0]


class Counter(nn.Module):
    config_class = DualConfig
    input_modalities = ("image", "text")

    def __init__(self, config):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.vision = Tower(config)

    def forward(self, input_ids=None, pixel_values=None, image_grid=None):
        text = self.tokens(input_ids)
        if pixel_values is not None:
            text = text + self.vision(pixel_values, image_grid)[:, None]
        return text


class CounterForGeneration(nn.Module):
    config_class = DualConfig
    input_modalities = ("image", "text")

    def __init__(self, config):
        super().__init__()
        self.model = Counter(config)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids=None, pixel_values=None, image_grid=None):
        states = self.model(input_ids=input_ids, pixel_values=pixel_values, image_grid=image_grid)
        return self.head(states)
"""
)


def test_a_model_whose_path_through_an_assumed_image_stops_is_shown_with_its_text() -> None:
    """A head that passes an image on (transformers' ``*ForConditionalGeneration``) is
    given one; when the image's path stops (a vision tower given no grid: Qwen2.5-VL's), the
    head is captured with its main input alone and says so."""
    mods = _capture(GRID, "Tower", "Counter", "CounterForGeneration")

    head = mods["CounterForGeneration"]
    assert [i.name for i in head.inputs if i.value.kind == "tensor"] == ["input_ids"]
    assert _shape(head) == ["B", "T", 100]
    assert any("with `pixel_values` as well (assumed)" in note for note in head.notes)
    # the model asks whether it was given an image: its main input alone, as before
    assert [i.name for i in mods["Counter"].inputs if i.value.kind == "tensor"] == ["input_ids"]


NONE_FROM_PARENT = """
class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, images):
        return self.conv(images)


class TwoWay(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = Stem()
        self.fc = nn.Linear(8, 8)

    def forward(self, x=None, images=None):
        return self.fc(x) + self.stem(images).mean((2, 3))
"""


def test_a_block_given_none_for_a_required_input_by_its_parent_is_captured_on_its_own() -> None:
    mods = _capture(NONE_FROM_PARENT, "Stem", "TwoWay")

    # TwoWay is given x alone (its main input): it calls its stem with images=None, which
    # Stem cannot take; Stem is then captured with an image of its own
    stem = mods["Stem"]
    assert _shape(stem) == ["B", 8, 224, 224], [d.message for d in stem.diagnostics]
    assert not [d for d in stem.diagnostics if d.code == "FX201"]


VIDEO = """
class VideoResBlock(nn.Module):
    def __init__(self, in_channels=8, temb_channels=32):
        super().__init__()
        self.norm1 = nn.GroupNorm(4, in_channels)
        self.act = nn.SiLU()
        self.conv1 = nn.Conv3d(in_channels, in_channels, (3, 1, 1), padding=(1, 0, 0))
        self.time_emb_proj = nn.Linear(temb_channels, in_channels)

    def forward(self, input_tensor, temb):
        hidden_states = self.conv1(self.act(self.norm1(input_tensor)))
        temb = self.time_emb_proj(self.act(temb))[:, :, :, None, None].permute(0, 2, 1, 3, 4)
        return input_tensor + hidden_states + temb
"""


def test_a_group_norm_before_a_3d_convolution_takes_a_video_and_time_features_per_frame() -> None:
    """A group norm takes any number of spatial dimensions: the ``Conv3d`` after it says the
    input is a video ``[B, C, F, H, W]`` (it was assumed an image, and the convolution
    failed); a time embedding used per frame is tried as ``[B, F, D]``."""
    mod = _capture(VIDEO, "VideoResBlock")["VideoResBlock"]

    shapes = {i.name: i.value.shape for i in mod.inputs}
    assert shapes["input_tensor"] == ["B", 8, 16, 112, 112], shapes
    assert shapes["temb"] == ["B", "T", 32], shapes
    assert _shape(mod) == ["B", 8, 16, 112, 112]
    assert mod.example_sizes == {"T": 16}  # what the shown shapes hold for


SPEECH = """
class SpeechConfig:
    def __init__(self):
        self.hidden_size = 32
        self.conv_dim = (16, 16)
        self.conv_kernel = (10, 3)
        self.conv_stride = (5, 2)


class ConvLayer(nn.Module):
    def __init__(self, config, layer_id=0):
        super().__init__()
        in_dim = config.conv_dim[layer_id - 1] if layer_id > 0 else 1
        self.conv = nn.Conv1d(in_dim, config.conv_dim[layer_id], config.conv_kernel[layer_id],
                              stride=config.conv_stride[layer_id])

    def forward(self, hidden_states):
        return torch.relu(self.conv(hidden_states))


class NormedConvLayer(nn.Module):
    config_class = SpeechConfig

    def __init__(self, config):
        super().__init__()
        self.conv = nn.Conv1d(1, config.conv_dim[0], config.conv_kernel[0],
                              stride=config.conv_stride[0])
        self.norm = nn.LayerNorm(config.conv_dim[0])

    def forward(self, hidden_states):
        hidden_states = self.conv(hidden_states)
        return self.norm(hidden_states.transpose(-2, -1)).transpose(-2, -1)


class SpeechModel(nn.Module):
    config_class = SpeechConfig

    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList([ConvLayer(config, i) for i in range(2)])
        self.proj = nn.Linear(config.conv_dim[-1], config.hidden_size)
        # the legacy constructor ignores the default device
        self.masked_spec_embed = nn.Parameter(torch.Tensor(config.hidden_size).uniform_())

    def forward(self, input_values, attention_mask=None):
        hidden_states = input_values[:, None]
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        hidden_states = self.proj(hidden_states.transpose(1, 2))
        return hidden_states + 0 * self.masked_spec_embed
"""


def test_a_speech_model_gets_a_second_of_raw_audio_and_its_conv_layers_their_channels() -> None:
    """``input_values`` of a model whose configuration has a convolution stack
    (``conv_kernel``, ``conv_stride``: wav2vec 2.0) is a raw waveform ``[B, 16000]`` (fxls
    could not tell); a layer whose ``hidden_states`` meet a convolution first is sized by it,
    not by the configuration's width; a parameter the legacy ``torch.Tensor(n)`` made on the
    CPU during a meta build is moved to meta (it failed every run as a device mismatch)."""
    mods = _capture(SPEECH, "ConvLayer", "NormedConvLayer", "SpeechModel")

    model = mods["SpeechModel"]
    shapes = {i.name: i.value.shape for i in model.inputs if i.value.kind == "tensor"}
    assert shapes == {"input_values": ["B", 16000]}, shapes
    # (16000 - 10) // 5 + 1 = 3199 frames, then (3199 - 3) // 2 + 1 = 1599
    assert _shape(model) == ["B", 1599, 32]
    assert model.build == "meta"
    conv = {i.name: i.value.shape for i in mods["ConvLayer"].inputs}
    assert conv["hidden_states"] == ["B", 1, 16000], conv
    # captured alone: its convolution says [B, 1, L], the configuration would say [B, T, 32]
    normed = mods["NormedConvLayer"]
    assert [i.value.shape for i in normed.inputs] == [["B", 1, 128]]
    assert _shape(normed) == ["B", 16, 24]


STAGE_WITH_SIZES = """
class Stage(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, hidden_states, input_dimensions, always_partition=False, **kwargs):
        height, width = input_dimensions
        if not always_partition:
            hidden_states = hidden_states.view(hidden_states.shape[0], height, width, -1)
            hidden_states = hidden_states.flatten(1, 2)
        return self.fc(hidden_states)


class Encoder(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, stride=4)
        self.stage = Stage(dim)

    def forward(self, pixel_values):
        x = self.patch(pixel_values)
        dims = (x.shape[2], x.shape[3])
        x = x.flatten(2).transpose(1, 2)
        return self.stage(x, dims, always_partition=False)
"""


def test_a_tuple_from_the_parent_is_one_input_and_the_flags_after_it_keep_their_names() -> None:
    """Swin's stages take ``input_dimensions`` (a tuple of sizes) and flags. Captured from
    the parent's call, they are fixed to its values, and fx makes one placeholder per item of
    the tuple (``input_dimensions_1``, ``input_dimensions_2``): the inputs are the forward's
    parameters, each once, with no input made up for a placeholder counted past them (an
    ``always_partition_1`` "assumed" to be a tensor, with an FX405 about it)."""
    modules = _capture(STAGE_WITH_SIZES, "Stage", "Encoder")
    stage = modules["Stage"]
    assert [(i.name, i.value.kind, i.value.text) for i in stage.inputs] == [
        ("hidden_states", "tensor", None),
        ("input_dimensions", "other", "(56, 56)"),
        ("always_partition", "bool", "False"),
    ]
    assert not [d for d in stage.diagnostics if d.code == "FX405"], stage.diagnostics
    assert _shape(stage) == ["B", 3136, 16]


PASS_THROUGH = """
class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(100, 32)
        self.fc = nn.Linear(32, 32)

    def forward(self, input_ids=None, inputs_embeds=None, use_cache=None):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        return self.fc(inputs_embeds)


class DecoderWrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder = Decoder()

    def forward(self, *args, **kwargs):
        \"\"\"Loads checkpoints of the decoder alone.\"\"\"
        return self.decoder(*args, **kwargs)
"""


def test_a_wrapper_passing_every_argument_to_its_decoder_takes_the_decoders_inputs() -> None:
    """transformers' ``*DecoderWrapper``: ``forward(self, *args, **kwargs)`` hands everything
    to ``self.decoder``. Its inputs are the decoder's (token ids sized from the embedding), and
    the trace goes through the wrapper's line into the decoder's code; before, the decoder was
    called with nothing and raised."""
    wrapper = _capture(PASS_THROUGH, "DecoderWrapper")["DecoderWrapper"]
    assert wrapper.status == "traced", (wrapper.status, wrapper.diagnostics)
    assert [(i.name, i.value.kind) for i in wrapper.inputs][:2] == [
        ("input_ids", "tensor"),
        ("inputs_embeds", "none"),
    ]
    assert wrapper.inputs[0].value.shape == ["B", "T"]
    assert _shape(wrapper) == ["B", "T", 32]
    lines = textwrap.dedent(HEADER + PASS_THROUGH).splitlines()
    fc = next(n for n in wrapper.nodes if n.target == "decoder.fc")
    assert fc.span is not None and "self.fc(inputs_embeds)" in lines[fc.span.line - 1]


MADE_IN_FORWARD = """
ACTIVATIONS = {"gelu": nn.GELU, "tanh": nn.Tanh}


class ConvLayer(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.act = "tanh"

    def forward(self, hidden_states):
        return ACTIVATIONS[self.act]()(self.fc(hidden_states))
"""


def test_a_module_made_while_forward_runs_is_traced_through() -> None:
    """transformers' ``ACT2FN[self.conv_act](x)`` makes the activation's module on each
    call; it is none of the root's submodules, and torch.fx stopped with "module is not
    installed as a submodule" (the class fell back to a fake-tensor run, with no graph to
    rewrite). It is traced through, as torch.fx does with any module it does not keep whole."""
    layer = _capture(MADE_IN_FORWARD, "ConvLayer")["ConvLayer"]
    assert layer.strategy is not None and layer.strategy.method == "fx", layer.strategy
    assert not [d for d in layer.diagnostics if d.code == "FX199"], layer.diagnostics
    assert [str(n.target) for n in layer.nodes if n.op == "call_function"] == ["torch.tanh"]
    assert _shape(layer) == ["B", "T", 16]


RESULT_LEFT_BY_A_CALLER = """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        h = self.fc(x)
        return h, self.norm(h)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        h, _ = self.block(x)
        scaled = x * 3
        return h * 2
"""


def test_what_a_caller_leaves_of_a_blocks_results_is_not_unused_in_the_block() -> None:
    """A backbone that reads one of a block's results (Swin's backbone reads its stages and
    not the final norm of the model it calls): the norm is unused in the backbone's graph, but
    the block returns it, and its other callers use it. No FX302 says "computed but never used"
    at the block's line (with a fix that would remove it from the block); the backbone's own
    unused computation is still reported."""
    modules = _capture(RESULT_LEFT_BY_A_CALLER, "Block", "Backbone")
    hints = {
        name: [d.message for d in mod.diagnostics if d.code == "FX302"]
        for name, mod in modules.items()
    }
    assert hints == {"Block": [], "Backbone": ["`x * 3` is computed but never used"]}, hints


TIMESTEP_AND_LABEL = """
import math


def timestep_embedding(timesteps, dim):
    assert len(timesteps.shape) == 1, "Timesteps should be a 1d-array"
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = timesteps[:, None].float() * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=-1)


class LabelEmbedding(nn.Module):
    def __init__(self, num_classes, hidden_size):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + 1, hidden_size)

    def forward(self, labels):
        return self.embedding_table(labels)


class CombinedTimestepLabelEmbeddings(nn.Module):
    def __init__(self, num_classes=10, embedding_dim=64):
        super().__init__()
        self.linear = nn.Linear(embedding_dim, embedding_dim)
        self.class_embedder = LabelEmbedding(num_classes, embedding_dim)

    def forward(self, timestep, class_labels):
        timesteps_emb = self.linear(timestep_embedding(timestep, 64))
        return timesteps_emb + self.class_embedder(class_labels)
"""


def test_a_timestep_and_class_labels_are_one_per_sample() -> None:
    """diffusers' combined embeddings: ``timestep`` reaches a function that asserts a 1-d
    tensor and ``class_labels`` an embedding table. Both are one value per sample, ``[B]``
    (the timestep was shaped like the labels, which were token ids ``[B, T]``, and the class
    stopped at the assertion). As an eager run at batch 2 and 3 gives: ``[B, 64]``."""
    combined = _capture(TIMESTEP_AND_LABEL, "CombinedTimestepLabelEmbeddings")[
        "CombinedTimestepLabelEmbeddings"
    ]
    shapes = {i.name: i.value.shape for i in combined.inputs}
    assert shapes == {"timestep": ["B"], "class_labels": ["B"]}, shapes
    assert _shape(combined) == ["B", 64]


OWN_NORM = """
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, hidden_states):
        variance = hidden_states.float().pow(2).mean(-1, keepdim=True)
        return hidden_states * torch.rsqrt(variance + self.eps) * self.weight
"""


def test_a_normalization_class_of_the_file_takes_the_width_it_normalizes() -> None:
    """A library's own ``RMSNorm``, captured on its own (no parent calls it): its input is
    ``[B, T, dim]`` from its weight (it got FX402, "cannot tell"), said to be assumed."""
    norm = _capture(OWN_NORM, "RMSNorm")["RMSNorm"]
    assert [i.value.shape for i in norm.inputs] == [["B", "T", 64]], norm.diagnostics
    assert [d.code for d in norm.diagnostics if d.code in ("FX402", "FX405")] == ["FX405"]
    assert _shape(norm) == ["B", "T", 64]


PARAMETERS_OF_ITS_OWN = """
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = dim ** 0.5
        self.g = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        gamma = self.g + 0.0
        return F.normalize(x, dim=-1) * self.scale * gamma


class DynamicTanh(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(0.5))
        self.gamma = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return (x * self.alpha).tanh() * self.gamma + self.beta


class MixHeads(nn.Module):
    def __init__(self, heads=4):
        super().__init__()
        self.mix = nn.Parameter(torch.ones(heads, heads))

    def forward(self, x):
        return x * self.mix


class RotaryEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, t):
        freqs = torch.einsum("i , j -> i j", t.type_as(self.inv_freq), self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)


class LearnedRotary(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.freqs = nn.Parameter(torch.ones(dim // 2))

    def forward(self, t):
        return torch.einsum("..., f -> ... f", t.float(), self.freqs)


class Rotate(nn.Module):
    def __init__(self, dim):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, x):
        return x.flip(-1)


class ResponseNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, 1, dim))

    def forward(self, x):
        gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * nx) + self.beta + x


class FourierFeatures(nn.Module):
    def __init__(self, size=32):
        super().__init__()
        self.W = nn.Parameter(torch.randn(size), requires_grad=False)

    def forward(self, x):
        x_proj = torch.log(x)[:, None] * self.W[None, :] * 6.28
        return torch.cat([torch.sin(x_proj), torch.cos(x_proj)], dim=-1)
"""


def test_a_class_with_parameters_of_its_own_takes_their_width() -> None:
    """lucidrains-style layers with no submodule the input reaches: an ``RMSNorm`` scaled by
    ``self.g``, a ``DynamicTanh`` with ``gamma`` and ``beta`` (after a scalar ``alpha``)
    take vectors of their parameters' width, ``[B, T, 64]`` (they got FX402); a parameter
    of two dimensions tells nothing (``MixHeads`` keeps FX402). A rotary embedding's ``t``
    is a position each, ``[T]`` int64, for its ``inv_freq`` (a ``forward(self, x)`` is not
    taken for positions). A parameter ``(1, 1, 1, C)`` (ConvNeXt-V2's global response norm)
    meets an image channels last, ``[B, 224, 224, 64]``; an input given a last axis to meet
    a parameter given a first (``x[:, None] * self.W[None, :]``) is one value per sample,
    ``[B]``. As eager runs at two sizes give."""
    found = _capture(
        PARAMETERS_OF_ITS_OWN,
        *("RMSNorm", "DynamicTanh", "MixHeads", "RotaryEmbedding", "LearnedRotary", "Rotate"),
        *("ResponseNorm", "FourierFeatures"),
    )
    fourier = found["FourierFeatures"]  # ``x[:, None] * self.W[None, :]``: one value a sample
    assert [i.value.shape for i in fourier.inputs] == [["B"]], fourier.diagnostics
    assert _shape(fourier) == ["B", 64]
    response = found["ResponseNorm"]
    assert [i.value.shape for i in response.inputs] == [["B", 224, 224, 64]], response.diagnostics
    assert _shape(response) == ["B", 224, 224, 64]
    for name in ("RMSNorm", "DynamicTanh"):
        mod = found[name]
        assert [i.value.shape for i in mod.inputs] == [["B", "T", 64]], mod.diagnostics
        assert [d.code for d in mod.diagnostics if d.code in ("FX402", "FX405")] == ["FX405"]
        assert _shape(mod) == ["B", "T", 64]
    assert "FX402" in [d.code for d in found["MixHeads"].diagnostics]
    rotary = found["RotaryEmbedding"]
    assert [(i.value.shape, i.value.dtype) for i in rotary.inputs] == [(["T"], "int64")]
    assert _shape(rotary) == ["T", 64]
    learned = found["LearnedRotary"]  # rotary-embedding-torch keeps them in ``freqs``
    assert [i.value.shape for i in learned.inputs] == [["T"]] and _shape(learned) == ["T", 32]
    assert "FX402" in [d.code for d in found["Rotate"].diagnostics]
    import torch

    namespace: dict[str, object] = {}
    exec(HEADER + PARAMETERS_OF_ITS_OWN, namespace)  # the test's own source
    for length in (5, 9):  # what eager makes of the inputs fxls assumed
        x = torch.randn(3, length, 64)
        assert namespace["RMSNorm"](64)(x).shape == (3, length, 64)  # type: ignore[operator]
        assert namespace["DynamicTanh"](64)(x).shape == (3, length, 64)  # type: ignore[operator]
        t = torch.arange(length)
        assert namespace["RotaryEmbedding"](64)(t).shape == (length, 64)  # type: ignore[operator]
        assert namespace["LearnedRotary"](64)(t).shape == (length, 32)  # type: ignore[operator]
        image = torch.randn(3, length, length + 2, 64)
        assert namespace["ResponseNorm"](64)(image).shape == image.shape  # type: ignore[operator]
        levels = torch.rand(length) + 0.1
        assert namespace["FourierFeatures"]()(levels).shape == (length, 64)  # type: ignore[operator]


NONE_FED_TO_A_LAYER = """
class AdaLayerNormZeroSingle(nn.Module):
    def __init__(self, embedding_dim=64):
        super().__init__()
        self.silu = nn.SiLU()
        self.linear = nn.Linear(embedding_dim, 3 * embedding_dim)
        self.norm = nn.LayerNorm(embedding_dim, elementwise_affine=False)

    def forward(self, x, emb=None):
        emb = self.linear(self.silu(emb))
        shift, scale, gate = emb.chunk(3, dim=1)
        x = self.norm(x) * (1 + scale[:, None]) + shift[:, None]
        return x, gate


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.act = nn.GELU()

    def forward(self, hidden_states, attention_mask=None, scale=None):
        if scale is not None:
            hidden_states = hidden_states * scale
        return self.act(self.fc(hidden_states)), attention_mask
"""


def test_an_input_defaulting_to_none_that_forward_hands_to_a_layer_is_needed() -> None:
    """diffusers' ``AdaLayerNormZero(x, emb=None)`` calls ``self.silu(emb)`` whatever it is
    given: the default cannot run (it was kept, and the class stopped at "silu() argument
    must be Tensor, not NoneType"). Such an input is inferred (from the layer after the
    activation: ``[B, 64]``); one that ``forward`` asks about (``if scale is not None``), or only
    passes on, keeps its default. Eager at batch 2 and 3: ``[B, T, 64]`` and ``[B, 64]``."""
    modules = _capture(NONE_FED_TO_A_LAYER, "AdaLayerNormZeroSingle", "Block")
    norm = modules["AdaLayerNormZeroSingle"]
    shapes = {i.name: i.value.shape for i in norm.inputs}
    assert shapes == {"x": ["B", "T", 64], "emb": ["B", 64]}, shapes
    assert [o.shape for o in norm.outputs] == [["B", "T", 64], ["B", 64]]
    block = modules["Block"]
    kinds = {i.name: i.value.kind for i in block.inputs}
    assert kinds == {"hidden_states": "tensor", "attention_mask": "none", "scale": "none"}


VECTOR_FOR_THE_BATCH = """
class AdaLayerNorm(nn.Module):
    def __init__(self, embedding_dim: int, chunk_dim: int = 0):
        super().__init__()
        self.chunk_dim = chunk_dim
        self.silu = nn.SiLU()
        self.linear = nn.Linear(embedding_dim, embedding_dim * 2)
        self.norm = nn.LayerNorm(embedding_dim, elementwise_affine=False)

    def forward(self, x, temb=None):
        temb = self.linear(self.silu(temb))
        if self.chunk_dim == 1:
            shift, scale = temb.chunk(2, dim=1)
            shift, scale = shift[:, None, :], scale[:, None, :]
        else:
            scale, shift = temb.chunk(2, dim=0)
        return self.norm(x) * (1 + scale) + shift
"""


def test_a_conditioning_split_along_its_first_dimension_is_one_vector_for_the_batch() -> None:
    """diffusers' ``AdaLayerNorm`` (``chunk_dim=0``, its default) takes one embedding vector
    and splits it with ``chunk(2, dim=0)``: the guess ``temb = [B, 64]`` failed as a shape
    error ("64 must match 128") on correct code. An assumed ``[B, F]`` that does not run
    through is tried as one ``[F]`` vector too. Eager: ``x [2, 5, 64]``, ``temb [64]`` gives
    ``[2, 5, 64]`` (and ``[3, 5, 64]`` at batch 3)."""
    norm = _capture(VECTOR_FOR_THE_BATCH, "AdaLayerNorm")["AdaLayerNorm"]
    assert norm.status == "traced", [d.message for d in norm.diagnostics]
    shapes = {i.name: i.value.shape for i in norm.inputs}
    assert shapes == {"x": ["B", "T", 64], "temb": [64]}, shapes
    assert _shape(norm) == ["B", "T", 64]
    assert not [d for d in norm.diagnostics if d.code == "FX201"]


A_DTYPE = """
def get_timestep_embedding(timesteps, dim):
    half = dim // 2
    freqs = torch.exp(-torch.arange(half, dtype=torch.float32) / half)
    args = timesteps[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class CombinedTimestepSizeEmbeddings(nn.Module):
    def __init__(self, embedding_dim: int = 64):
        super().__init__()
        self.linear_1 = nn.Linear(256, embedding_dim)
        self.act = nn.SiLU()
        self.linear_2 = nn.Linear(embedding_dim, embedding_dim)

    def forward(self, timestep, hidden_dtype):
        timesteps_proj = get_timestep_embedding(timestep, 256)
        emb = self.linear_1(timesteps_proj.to(dtype=hidden_dtype))
        return self.linear_2(self.act(emb))
"""


def test_a_parameter_naming_a_dtype_is_given_a_dtype() -> None:
    """diffusers' ``PixArtAlphaCombinedTimestepSizeEmbeddings.forward(timestep, ...,
    hidden_dtype)`` casts with ``.to(dtype=hidden_dtype)``: fxls guessed ``hidden_dtype`` as a
    ``[B]`` tensor and showed a shape error hint ("to() received an invalid combination of
    arguments"). A parameter named ``dtype`` or ``*_dtype`` (or annotated ``torch.dtype``) is
    ``torch.float32``. Eager at batch 2 and 3: ``[B, 64]``."""
    mod = _capture(A_DTYPE, "CombinedTimestepSizeEmbeddings")["CombinedTimestepSizeEmbeddings"]
    assert mod.status == "traced", [d.message for d in mod.diagnostics]
    kinds = {i.name: (i.value.kind, i.value.text) for i in mod.inputs}
    assert kinds["hidden_dtype"][0] != "tensor", kinds
    assert "float32" in str(kinds["hidden_dtype"][1]), kinds
    assert _shape(mod) == ["B", 64]
    assert not [d for d in mod.diagnostics if d.code == "FX201"]


VISION_TOWER = """
@dataclass
class TowerConfig:
    hidden_size: int = 32


class VisionTower(nn.Module):
    config_class = TowerConfig

    def __init__(self, config):
        super().__init__()
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, grid_thw):
        patches = grid_thw[:, 1] * grid_thw[:, 2]
        return self.proj(hidden_states), patches


@dataclass
class WideConfig:
    hidden_size: int = 512


class PackedTower(nn.Module):
    config_class = WideConfig

    def __init__(self, config):
        super().__init__()
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, lengths):
        starts = [0]
        for length in lengths.tolist():
            starts.append(starts[-1] + length)
        return self.proj(hidden_states), len(starts)
"""


def test_a_vision_towers_grid_is_integers_and_a_large_read_of_values_stops_at_once() -> None:
    """Qwen2-VL-style vision towers take ``grid_thw``, one ``(t, h, w)`` row of integers per
    image: assumed ``(1, 3)`` int64 (it was shaped like ``hidden_states``, a float
    ``[B, T, 32]``: the tower's ``tolist()`` of it made one unknown number per value, and
    GLM-Image's took the file's whole CPU budget). An input assumed so large that reading its
    values would make thousands of unknown numbers stops the fake run at that read and says
    why, instead of running until the CPU limit."""
    found = _capture(VISION_TOWER, "VisionTower", "PackedTower")
    tower = found["VisionTower"]
    grid = next(i.value for i in tower.inputs if i.name == "grid_thw")
    assert (grid.shape, grid.dtype) == ([1, 3], "int64"), grid
    assert [o.shape for o in tower.outputs] == [["B", "T", 32], [1]]
    packed = found["PackedTower"]
    assert any("`.tolist()` of a tensor of" in note for note in packed.notes), packed.notes


POPPING_HELPER = """
def frame_rows(x, kwargs=None):
    if kwargs is not None and (given := kwargs.pop("frame_rows", None)) is not None:
        return given
    return torch.stack([row * 2 for row in x])


class Frames(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, hidden_states, **kwargs):
        return frame_rows(self.proj(hidden_states), kwargs=kwargs)
"""


def test_a_helper_fx_calls_as_one_node_may_change_the_dict_it_is_given() -> None:
    """Kimi-K2.5's `get_vision_frame_index(grid_thw, kwargs=kwargs)` pops a precomputed index
    out of `kwargs`. FX cannot trace the helper (it iterates a tensor), so it is called as one
    node, whose arguments FX keeps in immutable dicts and lists: the pop raised TypeError,
    shown as a shape error (FX201, an error). An eager call gets a plain dict, and so does the
    helper now: the class is traced, its output the input's shape."""
    frames = _capture(POPPING_HELPER, "Frames")["Frames"]
    assert frames.status == "traced", [(d.code, d.message) for d in frames.diagnostics]
    assert _shape(frames) == ["B", "T", 8]
    assert not [d for d in frames.diagnostics if d.code == "FX201"], frames.diagnostics


COMPOSITE = """
@dataclass
class TextConfig:
    vocab_size: int = 50
    hidden_size: int = 16
    num_hidden_layers: int = 12
    layer_types: list = None

    def __post_init__(self):
        if self.layer_types is None:
            self.layer_types = ["full_attention"] * self.num_hidden_layers


@dataclass
class AudioConfig:
    num_hidden_layers: int = 4
    depths: tuple = (1, 1, 2, 2)

    def __post_init__(self):
        if len(self.depths) != self.num_hidden_layers:
            raise ValueError("one depth per layer")


@dataclass
class HybridConfig:
    num_hidden_layers: int = 8
    layer_types: list = None

    def __post_init__(self):
        if self.layer_types is None:
            self.layer_types = [
                "full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                for i in range(self.num_hidden_layers)
            ]


class MultiConfig:
    def __init__(
        self, text_config=None, audio_config=None, hybrid_config=None, tie_word_embeddings=False
    ):
        self.text_config = TextConfig(**(text_config or {}))
        self.audio_config = AudioConfig(**(audio_config or {}))
        self.hybrid_config = HybridConfig(**(hybrid_config or {}))
        self.tie_word_embeddings = tie_word_embeddings


class Layer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, hidden_states):
        return hidden_states + self.fc(hidden_states)


class Multi(nn.Module):
    config_class = MultiConfig

    def __init__(self, config):
        super().__init__()
        text = config.text_config
        self.embed = nn.Embedding(text.vocab_size, text.hidden_size)
        self.layers = nn.ModuleList(Layer(text.hidden_size) for _ in text.layer_types)

    def forward(self, input_ids):
        hidden_states = self.embed(input_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states
"""


def test_a_configuration_of_several_models_is_built_with_two_layers_per_sub_stack() -> None:
    """A multimodal model's default configuration holds its towers' configurations
    (`text_config` of 62 layers in MuseSpark: a fake run of them took 28 s and the file's CPU
    budget, 15 classes ended in FX510). Each sub-configuration's stack is built with two
    layers (`text_config={'num_hidden_layers': 2}`), its per-layer lists made again for the
    count, when the result is the default but for the stack; one whose lists must match its
    count (`audio_config`) keeps its layers; one whose two layers would lose a kind of layer
    gets the fewest that keep every kind (`hybrid_config`, full attention every fourth layer:
    4; with two, Qwen3.5's cache code stopped). The notes say so; the parameters are counted at the default's depth too
    (a code lens showed CLIPModel's 48.9 M of two layers per tower for its 151 M)."""
    multi = _capture(COMPOSITE, "Multi")["Multi"]
    assert _shape(multi) == ["B", "T", 16]
    built = multi.constructed
    assert built is not None and "text_config={'num_hidden_layers': 2}" in built.text, built
    assert "audio_config" not in built.text, built.text
    assert "hybrid_config={'num_hidden_layers': 4}" in built.text, built.text
    assert any("text_config.num_hidden_layers=12" in note for note in multi.notes), multi.notes
    layers = {n.module_path for n in multi.nodes if (n.module_path or "").startswith("layers.")}
    assert {p.split(".")[1] for p in layers} == {"0", "1"}, layers
    # parameters as built and of the default: 50 x 16 embedded, 16 x 16 + 16 per layer
    assert (multi.params, multi.default_params) == (50 * 16 + 2 * 272, 50 * 16 + 12 * 272)


def test_a_single_layer_of_a_build_with_fewer_layers_shows_its_own_parameters_only() -> None:
    """A layer is the same at any depth: only its own parameters, no second count."""
    found = _capture(DEEP, "Layer", "Backbone")
    backbone, layer = found["Backbone"], found["Layer"]
    assert backbone.default_params == 4800 + 12 * 2352, backbone.default_params
    assert layer.params == 2352 and layer.default_params is None, layer


INHERITED = """
from transformers import LlamaConfig
from transformers.modeling_layers import GenericForSequenceClassification
from transformers.models.llama.modeling_llama import LlamaPreTrainedModel


class TinyForSequenceClassification(GenericForSequenceClassification, LlamaPreTrainedModel):
    pass
"""


def test_a_forward_inherited_from_a_library_is_traced_with_the_arguments_it_failed_on_fixed() -> (
    None
):
    """transformers' ``GenericForSequenceClassification.forward`` (another file) reaches its
    loss with ``labels`` a proxy; the call it failed in names ``labels``, so the trace is
    made again with the optional arguments at their defaults: an FX graph with the base
    model kept whole, not a run on fake tensors."""
    mod = _capture(INHERITED, "TinyForSequenceClassification")["TinyForSequenceClassification"]
    assert strategy_label(mod.strategy) == "fx+leaf+concrete", (mod.strategy, mod.notes)
    assert any("`labels=None`" in n for n in mod.notes), mod.notes
    assert _shape(mod) == ["B", 2]


FLUX_LIKE = """
class FrozenDict(OrderedDict):
    def __getattr__(self, name):
        return self[name]


class ConfigMixin:
    def register(self, **kwargs):
        self.config = FrozenDict(kwargs)


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, hidden_states, rotary):
        return hidden_states + self.fc(hidden_states) * rotary.sum()


class FluxLike(nn.Module, ConfigMixin):
    def __init__(self, in_channels=16, inner_dim=32, num_layers=6, num_single_layers=9,
                 pooled_projection_dim=24, axes_dims_rope=(4, 6, 6)):
        super().__init__()
        self.register(in_channels=in_channels, axes_dims_rope=axes_dims_rope)
        self.axes = axes_dims_rope
        self.x_embedder = nn.Linear(in_channels, inner_dim)
        self.context_embedder = nn.Linear(40, inner_dim)
        self.time = nn.Linear(1, inner_dim)
        self.pooled = nn.Linear(pooled_projection_dim, inner_dim)
        self.blocks = nn.ModuleList([Block(inner_dim) for _ in range(num_layers)])
        self.single = nn.ModuleList([Block(inner_dim) for _ in range(num_single_layers)])
        self.proj_out = nn.Linear(inner_dim, in_channels)

    def forward(self, hidden_states, encoder_hidden_states=None, pooled_projections=None,
                timestep=None, img_ids=None, txt_ids=None):
        hidden_states = self.x_embedder(hidden_states)
        temb = self.time(timestep.to(hidden_states.dtype)[:, None]) + self.pooled(pooled_projections)
        context = self.context_embedder(encoder_hidden_states)
        ids = torch.cat((txt_ids, img_ids), dim=0)
        rotary = torch.cat([ids[:, i : i + 1].float() * n for i, n in enumerate(self.axes)], -1)
        assert ids.shape[-1] == len(self.axes), "one position per rotary axis"
        x = torch.cat([context, hidden_states], dim=1) + temb[:, None]
        for block in self.blocks:
            x = block(x, rotary)
        for block in self.single:
            x = block(x, rotary)
        return self.proj_out(x[:, context.shape[1]:])
"""


def test_a_flux_style_model_gets_position_ids_and_is_built_with_fewer_layers() -> None:
    """A diffusers-style model (its constructor's keyword defaults are its configuration,
    ``ConfigMixin``) stacking 6 and 9 blocks, whose ``forward`` takes ``timestep``,
    ``pooled_projections`` and the position ids ``img_ids`` / ``txt_ids`` (one row per token
    of ``hidden_states`` / ``encoder_hidden_states``, one column per rotary axis), each left
    at ``None`` by default. It is built with 2 blocks per stack, says so, reports the
    parameters of its defaults, and runs with the ids shaped ``[T, 3]`` and ``[S, 3]`` (they
    reach no layer: before, each was shaped like ``hidden_states`` and the class stopped): the
    text's length is its own, ``S``, not the image's ``T`` (both were ``T``, and the sequence
    the blocks see showed as ``2*T``); a block captured from the parent's call gets that
    sequence as ``S + T`` (a sum of names was made a number before). Its configuration
    is a dict whose ``__getattr__`` raises ``KeyError`` for a missing field, as attribute
    dicts of research code do: looking for sub-configurations stopped the capture (FX511)."""
    captured = _capture(FLUX_LIKE, "FluxLike", "Block")
    model = captured["FluxLike"]
    shapes = {i.name: i.value.shape for i in model.inputs if i.value.kind == "tensor"}
    assert shapes["img_ids"] == ["T", 3] and shapes["hidden_states"] == ["B", "T", 16], shapes
    assert shapes["txt_ids"] == ["S", 3] and shapes["encoder_hidden_states"] == ["B", "S", 40]
    # the blocks get the joined sequence from the parent as its sum, not a number
    block = {i.name: i.value.shape for i in captured["Block"].inputs}
    assert block == {"hidden_states": ["B", "S + T", 32], "rotary": ["S + T", 3]}, block
    assert _shape(captured["Block"]) == ["B", "S + T", 32]
    assert model.status == "traced" and _shape(model)[-1] == 16, model.diagnostics
    block = 32 * 32 + 32  # built with 2 + 2 blocks of the default's 6 + 9
    assert model.default_params is not None and model.params is not None
    assert model.default_params - model.params == 11 * block
    [note] = [n for n in model.notes if "layers per stack" in n]
    assert "FluxLike(num_layers=2, num_single_layers=2)" in note
    assert "num_layers=6, num_single_layers=9" in note


STOPS_TWICE = """
class StopsTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.wide = nn.Linear(8, 16)

    def forward(self, hidden_states, timestep=None):
        scale = timestep.to(hidden_states.dtype)[:, None, None]
        return self.fc(hidden_states) * scale + self.wide(hidden_states)
"""


def test_a_class_that_stops_again_with_its_none_defaults_given_says_where() -> None:
    """The first capture stops on ``timestep`` left at ``None`` (FX402 names it); captured
    again with it given, the class stops on a shape error. Declaring ``timestep`` would not be
    enough, and the class's notes say so: what was given and where it stopped then (before,
    nothing of the second capture was said)."""
    model = _capture(STOPS_TWICE, "StopsTwice")["StopsTwice"]
    assert [d.code for d in model.diagnostics if d.code == "FX402"] == ["FX402"]
    [note] = [n for n in model.notes if n.startswith("captured again")]
    assert note.startswith("captured again with `timestep` given as well"), note
    assert "did not run through either: shape error" in note, note


UNSET = """
@dataclass
class UnsetConfig:
    transformers_version: str | None = None
    architectures: list[str] | None = None
    hidden_size: int = 48
    num_attention_heads: int = 4
    head_dim: int | None = None


class Attention(nn.Module):
    config_class = UnsetConfig

    def __init__(self, config):
        super().__init__()
        self.scaling = config.head_dim**-0.5  # the default's unset size cannot work
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states):
        return self.proj(hidden_states) * self.scaling
"""


def test_only_the_unset_fields_that_may_hold_a_size_are_filled() -> None:
    """A configuration whose unset ``head_dim`` stops the build is built with a size for it,
    and only for it: its unset version string and list of names are left as they are, not
    given ``64`` (and not shown as given). The width of a head is the one the configuration
    implies: ``hidden_size // num_attention_heads``."""
    mod = _capture(UNSET, "Attention")["Attention"]
    assert mod.constructed is not None and mod.constructed.source == "assumed"
    assert mod.constructed.assumed == {"head_dim": "12"}, mod.constructed
    (fx408,) = [d for d in mod.diagnostics if d.code == "FX408"]
    assert "head_dim=12" in fx408.message
    assert "transformers_version" not in fx408.message and "architectures" not in fx408.message
    assert _shape(mod)[-1] == 48


def test_a_default_with_an_unset_size_and_a_deep_stack_is_built_filled_and_shorter() -> None:
    """The default's stack is made shorter for the configuration with its unset size filled
    too (the default as it is does not build): not twelve layers of it."""
    mod = _capture(
        UNSET
        + """
@dataclass
class DeepUnsetConfig(UnsetConfig):
    num_hidden_layers: int = 12


class Stack(nn.Module):
    config_class = DeepUnsetConfig

    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(Attention(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden_states):
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states
""",
        "Stack",
    )["Stack"]
    assert mod.constructed is not None
    assert mod.constructed.text == "Stack(DeepUnsetConfig(head_dim=12, num_hidden_layers=2))"
    assert mod.constructed.assumed == {"head_dim": "12"}
    assert any("num_hidden_layers=12" in n for n in mod.notes), mod.notes
    assert len([n for n in mod.nodes if n.op == "call_module"]) == 2  # one `proj` a layer
    assert mod.default_params == 12 * (48 * 48 + 48)


SEQUENCE_FIRST = "sequence_first.py"
"""Attention written sequence first (``tests/fixtures/capture/``)."""


def _fixture(name: str) -> str:
    """A fixture's model code without its own imports (``HEADER`` has them)."""
    text = (Path(__file__).parents[2] / "fixtures" / "capture" / name).read_text()
    return text.split("from torch import nn\n", 1)[1]


def test_inputs_take_the_axis_order_the_code_unpacks() -> None:
    """``tgt_len, bsz, embed_dim = query.size()`` in forward (or in the forward of the
    submodule the input reaches through its norm) lays the assumed input out sequence first;
    ``key`` and ``value``, assumed alike, follow ``query``; other names name their axes; a
    batch-first unpacking gives the rank it unpacks. Eager runs at two sizes agree."""
    source = _fixture(SEQUENCE_FIRST)
    attention = _capture(source, "TimeBatchAttention")["TimeBatchAttention"]
    assert [i.value.shape for i in attention.inputs] == [["T", "B", 64]] * 3
    assert [o.shape for o in attention.outputs] == [["T", "B", 64], ["B", 4, "T", "T"]]
    reasons = [d.message for d in attention.diagnostics if d.code == "FX405"]
    unpacks = "`TimeBatchAttention.forward` unpacks them: `tgt_len, bsz, embed_dim = query.size()`"
    assert len(reasons) == 3 and unpacks in reasons[0], reasons
    assert all("its axes as `query`'s" in r for r in reasons[1:]), reasons
    found = _capture(source, "TimeBatchLayer", "AxialRows", "BatchFirstTokens")
    layer = found["TimeBatchLayer"]  # through its norm into the attention's forward
    assert [i.value.shape for i in layer.inputs] == [["T", "B", 64]]
    assert [o.shape for o in layer.outputs] == [["T", "B", 64], ["B", 4, "T", "T"]]
    axial = found["AxialRows"]  # axes named as the code names them, the batch as ``B``
    assert [i.value.shape for i in axial.inputs] == [["num_rows", "num_cols", "B", 64]]
    assert _shape(axial) == ["num_rows", "num_cols", "B", 64]
    tokens = found["BatchFirstTokens"]
    assert [i.value.shape for i in tokens.inputs] == [["B", "T", 64]]
    assert _shape(tokens) == ["B", "T", 4, 16]
    import torch

    namespace: dict[str, object] = {}
    exec(HEADER + source, namespace)  # the fixture, run eagerly
    for length, batch in ((5, 3), (7, 2)):
        x = torch.randn(length, batch, 64)
        out, weights = namespace["TimeBatchLayer"](64)(x)  # type: ignore[operator]
        assert out.shape == (length, batch, 64) and weights.shape == (batch, 4, length, length)
        rows = torch.randn(length, 4, batch, 64)
        assert namespace["AxialRows"](64)(rows).shape == (length, 4, batch, 64)  # type: ignore[operator]
        tokens_out = namespace["BatchFirstTokens"](64)(torch.randn(batch, length, 64))  # type: ignore[operator]
        assert tokens_out.shape == (batch, length, 4, 16)


CHANNELS_FIRST = "channels_first.py"
"""Axes named in a method, channels first, patches (``tests/fixtures/capture/``)."""


def test_axes_named_in_methods_and_channels_first() -> None:
    """A norm whose weight meets the input as ``self.weight[:, None, None]`` takes an image
    ``[B, C, H, W]`` (not a sequence a broadcast makes ``[C, B, C]`` of); an attention that
    unpacks its heads' input in a method of its own, after a ``Linear``, takes ``[B, T, D]``
    (its ``context``, an encoder's sequence by its name, ``[B, S, D]``);
    ``bs, c, h, w = image.shape`` lays an image out channels first with the code's names;
    a patch embedding that reshapes what it unpacks keeps the layer's guess. Eager runs at two
    sizes agree with what is shown."""
    source = _fixture(CHANNELS_FIRST)
    found = _capture(source, "ChannelNorm", "HeadsAttention", "ImageToTokens", "PatchTokens")
    norm = found["ChannelNorm"]
    assert [i.value.shape for i in norm.inputs] == [["B", 64, 224, 224]], norm.diagnostics
    assert _shape(norm) == ["B", 64, 224, 224]
    reason = next(d.message for d in norm.diagnostics if d.code == "FX405")
    assert "channels first as `self.weight[:, None, None]` meets it" in reason, reason
    attention = _capture(source, "HeadsAttention")["HeadsAttention"]  # its own assumptions
    assert [i.value.shape for i in attention.inputs] == [["B", "T", 64], ["B", "S", 64]]
    reason = next(d.message for d in attention.diagnostics if d.code == "FX405")
    assert "`HeadsAttention.split` unpacks them: `b, n, c = t.shape`" in reason, reason
    called = found["HeadsAttention"]  # as ``ImageToTokens`` calls it
    assert [i.value.shape for i in called.inputs] == [["B", "T", 64], ["B", "h*w", 64]]
    image = found["ImageToTokens"]
    assert [i.value.shape for i in image.inputs] == [["B", 64, "h", "w"], ["B", "T", 64]]
    assert _shape(image) == ["B", "T", 64]
    patches = found["PatchTokens"]  # 16 features are 4 channels of 2 x 2 patches: no layout
    assert [i.value.shape for i in patches.inputs] == [["B", 16]], patches.diagnostics
    import torch

    namespace: dict[str, object] = {}
    exec(HEADER + source, namespace)  # the fixture, run eagerly
    for batch, length, side in ((2, 5, 6), (3, 7, 4)):
        x = torch.randn(batch, 64, side, side + 1)
        assert namespace["ChannelNorm"](64)(x).shape == x.shape  # type: ignore[operator]
        tokens = torch.randn(batch, length, 64)
        out = namespace["ImageToTokens"](64)(x, tokens)  # type: ignore[operator]
        assert out.shape == (batch, length, 64)


TRAIN_WITHOUT_RETURN = """
class CachedBias(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.cache = {}

    @torch.no_grad()
    def train(self, mode=True):
        super().train(mode)
        if mode and self.cache:
            self.cache = {}

    def forward(self, x):
        return self.proj(x)
"""


def test_a_train_override_that_returns_nothing_is_built() -> None:
    """LeViT's attention overrides ``train`` to clear a cache and returns nothing, so its
    ``eval()`` returns None: the class is captured all the same (it ended in FX511)."""
    mod = _capture(TRAIN_WITHOUT_RETURN, "CachedBias")["CachedBias"]
    assert mod.status == "traced" and _shape(mod) == ["B", 64], mod.diagnostics

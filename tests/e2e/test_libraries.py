"""Model files of real libraries, as their users have them: ``fxls check`` on files of the
transformers and diffusers releases pinned in pyproject.toml (installed by ``.ci/setup``),
straight from site-packages, with no directive.

Each file runs as its module, so none ends at its first relative import (FX404); released
library code gets no error diagnostic; and the classes that show shapes do not fall below
what fxls shows today (a ratchet: raise the numbers when fxls does better)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import diffusers
import pytest
import transformers

pytestmark = [pytest.mark.slow, pytest.mark.worker, pytest.mark.timeout(1800)]

SHAPED_AT_LEAST = {
    # file -> (classes with shapes, a class that must show them, the size its output ends in:
    # the hidden size of the library's default configuration, or a task head's output)
    "transformers/models/llama/modeling_llama.py": (10, "LlamaModel", 4096),
    "transformers/models/mistral/modeling_mistral.py": (10, "MistralForCausalLM", 32000),
    "transformers/models/gpt2/modeling_gpt2.py": (10, "GPT2Model", 768),
    "transformers/models/bert/modeling_bert.py": (24, "BertModel", 768),
    "transformers/models/t5/modeling_t5.py": (16, "T5ForConditionalGeneration", 32128),
    "transformers/models/vit/modeling_vit.py": (9, "ViTModel", 768),
    "transformers/models/whisper/modeling_whisper.py": (11, "WhisperEncoder", 384),
    "transformers/models/clip/modeling_clip.py": (12, "CLIPTextModel", 512),
    "transformers/models/wav2vec2/modeling_wav2vec2.py": (24, "Wav2Vec2Model", 768),
    "transformers/models/swin/modeling_swin.py": (14, "SwinModel", 768),
    "transformers/models/mixtral/modeling_mixtral.py": (11, "MixtralForCausalLM", 32000),
    "diffusers/models/resnet.py": (6, "Conv1dBlock", 128),
    "diffusers/models/unets/unet_2d_blocks.py": (25, "UNetMidBlock2DCrossAttn", 224),
    "diffusers/models/autoencoders/vae.py": (7, "Encoder", 224),
    "diffusers/models/attention.py": (7, "JointTransformerBlock", 64),
    "diffusers/models/attention_processor.py": (3, "Attention", 64),
}
FILES = sorted({*SHAPED_AT_LEAST})
"""The files checked (every test reads one of them)."""
HEADS_WITHOUT_FX109 = ("LlamaForCausalLM", "LlamaForTokenClassification", "BertForMaskedLM")
"""Task heads whose ModelOutput has unset fields: they show the tensor fields, and the
comparison with eager execution sees no difference (FX109 warned on every one before)."""
PACKAGES = {
    "transformers": Path(transformers.__file__).parent,
    "diffusers": Path(diffusers.__file__).parent,
}


@functools.cache
def _checked() -> dict[str, dict]:
    """One ``fxls check --json`` of every file the tests read, as CI checks a project (two
    files at a time, one worker): each file's document by its path. The tests are about what
    is shown, not how fast: the CPU limit per job is 30 s instead of 10, so a test machine
    busy with other suites does not decide which classes get their shapes."""
    paths = [str(PACKAGES[rel.partition("/")[0]] / rel.partition("/")[2]) for rel in FILES]
    report = json.loads(_fxls_check("--json", *paths, timeout=1500))
    return {d["file"]: d for d in report}


def _check(path: Path) -> list[dict]:
    return [_checked()[str(path)]]


def _one_class(path: Path, cls: str, *options: str) -> str:
    """What ``fxls check --class cls`` prints for ``path`` (no compile check)."""
    return _fxls_check("--no-compile-check", "--class", cls, *options, str(path), timeout=600)


def _class_entry(path: Path, cls: str) -> dict[str, Any]:
    """The ``--json`` entry of class ``cls`` of ``path``, checked alone (no compile check)."""
    document = json.loads(
        _fxls_check("--json", "--no-compile-check", "--class", cls, str(path), timeout=600)
    )
    entries: list[dict[str, Any]] = [m for m in document["modules"] if m["class"] == cls]
    [entry] = entries
    return entry


def _fxls_check(*args: str, timeout: float) -> str:
    """What ``fxls check`` prints with ``args``, at a CPU limit of 30 s per job."""
    done = subprocess.run(
        [sys.executable, "-m", "fxls", "check", "--timeout", "30", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return done.stdout


@pytest.mark.parametrize("rel", sorted(SHAPED_AT_LEAST))
def test_library_model_files_run_as_their_modules(rel: str) -> None:
    package, _, inner = rel.partition("/")
    documents = _check(PACKAGES[package] / inner)
    diagnostics = [x for d in documents for x in d["diagnostics"]]
    modules = [m for d in documents for m in d["modules"]]
    diagnostics += [x for m in modules for x in m["diagnostics"]]
    assert not [x for x in diagnostics if x["code"] == "FX404"], diagnostics
    assert not [x for x in diagnostics if x["severity"] == "error"], diagnostics
    shaped = {
        m["class"]: m["outputs"][0]["shape"]
        for m in modules
        if m["outputs"] and m["outputs"][0].get("shape") is not None
    }
    at_least, example, size = SHAPED_AT_LEAST[rel]
    unshaped = {
        m["class"]: (m["status"], [f"{x['code']}: {x['message'][:200]}" for x in m["diagnostics"]])
        for m in modules
        if m["class"] not in shaped and m["status"] != "skipped"
    }
    assert len(shaped) >= at_least, (shaped, unshaped)
    assert example in shaped and shaped[example][-1] == size, shaped
    for m in modules:
        if m["class"] in HEADS_WITHOUT_FX109:
            assert not [x for x in m["diagnostics"] if x["code"] == "FX109"], m["diagnostics"]
            assert [o["kind"] for o in m["outputs"]] == ["tensor"], m["outputs"]


def test_diffusers_blocks_get_inputs_through_processors_keywords_and_annotations() -> None:
    """diffusers' ``attention.py`` as released: ``temb`` reaches a ``Linear`` through
    ``self.norm1(hidden_states, emb=temb)`` (``[B, dim]``, not shaped like the states);
    ``num_frames: int`` is a count, not a tensor; a block that cannot be traced through is
    named by its class (``GEGLU``), never as "a torch.nn module"."""
    documents = _check(PACKAGES["diffusers"] / "models/attention.py")
    modules = {m["class"]: m for d in documents for m in d["modules"]}
    joint = {i["name"]: i for i in modules["JointTransformerBlock"]["inputs"]}
    assert joint["temb"]["shape"] == ["B", 64], joint
    temporal = {i["name"]: i for i in modules["TemporalBasicTransformerBlock"]["inputs"]}
    assert temporal["num_frames"]["kind"] == "int", temporal
    assert modules["TemporalBasicTransformerBlock"]["outputs"][0]["shape"] == ["B", "T", 64]
    messages = [x["message"] for m in modules.values() for x in m["diagnostics"]]
    assert not [t for t in messages if "a torch.nn module" in t], messages
    assert [t for t in messages if t.startswith("`GEGLU` cannot be traced through")], messages


def test_diffusers_k_blocks_get_inputs_their_layers_take() -> None:
    """diffusers' K blocks as released. ``KCrossAttnDownBlock2D``: ``hidden_states`` meets
    ``F.group_norm`` first and, on the residual path, a block kept whole; it is sized by the
    ``conv1`` after the norm (it was shaped like ``temb``, and the batch showed up in a
    spatial place). ``KUpBlock2D``: no ``prev_output_channel``; its first resnet takes twice
    ``out_channels``, half from ``hidden_states`` and half from the last skip state (the
    block was partial, with a shape error of its own making). Outputs checked against an
    eager run at batch 2 and 3."""
    documents = _check(PACKAGES["diffusers"] / "models/unets/unet_2d_blocks.py")
    modules = {m["class"]: m for d in documents for m in d["modules"]}
    down = modules["KCrossAttnDownBlock2D"]
    shapes = {i["name"]: i["shape"] for i in down["inputs"]}
    assert shapes["hidden_states"] == ["B", 64, 224, 224], shapes
    assert [o["shape"] for o in down["outputs"]][:2] == [["B", 64, 112, 112], ["B", 64, 224, 224]]
    up = modules["KUpBlock2D"]
    inputs = {i["name"]: i for i in up["inputs"]}
    states, size = inputs["hidden_states"]["shape"], inputs["hidden_states"]["shape"][-1]
    assert states == ["B", 64, size, size], inputs
    assert up["status"] == "traced", up["status"]
    assert up["outputs"][0]["shape"] == ["B", 64, 2 * size, 2 * size], up["outputs"]


def test_clip_gets_an_image_and_a_text_and_its_vision_tower_an_image() -> None:
    """transformers' CLIP as released: ``CLIPModel`` (``input_modalities = ("image", "text")``)
    embeds an image and a text in one ``forward`` and gets both (it got token ids alone, and its
    vision tower was called with ``pixel_values=None``); ``CLIPVisionEmbeddings``, which its
    parents called with ``None``, is captured with an image of its own. Outputs checked against
    an eager run at batch 2 and 3 (``logits_per_image`` ``(2, 2)``, ``(3, 3)``)."""
    documents = _check(PACKAGES["transformers"] / "models/clip/modeling_clip.py")
    modules = {m["class"]: m for d in documents for m in d["modules"]}
    clip = modules["CLIPModel"]
    shapes = {i["name"]: i["shape"] for i in clip["inputs"] if i["kind"] == "tensor"}
    why = (clip["status"], [f"{x['code']}: {x['message'][:200]}" for x in clip["diagnostics"]])
    assert shapes == {"input_ids": ["B", "T"], "pixel_values": ["B", 3, 224, 224]}, (shapes, why)
    assert clip["status"] == "traced", why
    outputs = [o["shape"] for o in clip["outputs"]]
    assert outputs[:4] == [["B", "B"], ["B", "B"], ["B", 512], ["B", 512]], outputs
    embeddings = modules["CLIPVisionEmbeddings"]
    assert embeddings["outputs"][0]["shape"] == ["B", 50, 768], embeddings["status"]
    assert modules["CLIPVisionModel"]["outputs"][0]["shape"] == ["B", 50, 768]


def test_wav2vec2_gets_raw_audio_and_its_heads_run_on_meta() -> None:
    """transformers' wav2vec 2.0 as released: ``input_values`` is a second of raw audio
    ``[B, 16000]`` (fxls could not tell, FX402 on every model class); the sequence classifier
    runs (its ``masked_spec_embed``, made with ``torch.Tensor(n)``, stayed on the CPU in a meta
    build and failed as a device mismatch). Checked against an eager run at batch 2 and 3:
    ``last_hidden_state`` ``(B, 49, 768)``, CTC logits ``(B, 49, 32)``."""
    documents = _check(PACKAGES["transformers"] / "models/wav2vec2/modeling_wav2vec2.py")
    modules = {m["class"]: m for d in documents for m in d["modules"]}
    model = modules["Wav2Vec2Model"]
    assert [i["shape"] for i in model["inputs"] if i["kind"] == "tensor"] == [["B", 16000]]
    assert [o["shape"] for o in model["outputs"]][:2] == [["B", 49, 768], ["B", 49, 512]]
    assert modules["Wav2Vec2ForCTC"]["outputs"][0]["shape"] == ["B", 49, 32]
    classifier = modules["Wav2Vec2ForSequenceClassification"]
    assert classifier["status"] == "traced", classifier["diagnostics"]
    assert classifier["outputs"][0]["shape"] == ["B", 2]


def test_swin_keeps_its_window_and_its_stages_take_their_sizes() -> None:
    """transformers' Swin as released: every class with shapes (7 of 14 before). A stage's
    layer makes its window as small as the image it is given, on the module
    (``set_shift_and_window_size``): the sizes fxls tries after a failure left the window at 4
    for every later run, and a node giving a tensor and ``None`` lost the class's shapes. Its
    stages take ``input_dimensions`` fixed from the parent's call, each input once. Checked
    against an eager run at batch 2 and 3: ``last_hidden_state`` ``(B, 49, 768)``, a stage
    ``(B, 784, 192)`` and ``(B, 192, 28, 28)``, the windows of the first layer ``(64·B, 49,
    96)``."""
    documents = _check(PACKAGES["transformers"] / "models/swin/modeling_swin.py")
    modules = {m["class"]: m for d in documents for m in d["modules"]}
    model = modules["SwinModel"]
    assert model["status"] == "traced", model["diagnostics"]
    assert model["outputs"][0]["shape"] == ["B", 49, 768], model["outputs"]
    stage = modules["SwinStage"]
    assert [i["name"] for i in stage["inputs"]] == [
        "hidden_states", "input_dimensions", "always_partition",
        "output_hidden_states_before_downsampling",
    ]  # fmt: skip
    assert [o["shape"] for o in stage["outputs"]][:2] == [["B", 784, 192], ["B", 192, 28, 28]]
    attention = modules["SwinAttention"]
    # the windows of a batch: 64 per image (it showed 128, the number at the example batch)
    assert attention["inputs"][0]["shape"] == ["64*B", 49, 96], attention["inputs"]
    assert modules["SwinForImageClassification"]["outputs"][0]["shape"] == ["B", 2]


def test_whispers_decoder_wrapper_takes_its_decoders_inputs() -> None:
    """``WhisperDecoderWrapper.forward(self, *args, **kwargs)`` hands everything to its
    decoder: it gets the decoder's token ids and shows its states (it called the decoder with
    nothing, which raised; 10 of 11 classes). Eager at batch 2 and 3: ``last_hidden_state``
    ``(B, T, 384)``."""
    documents = _check(PACKAGES["transformers"] / "models/whisper/modeling_whisper.py")
    modules = {m["class"]: m for d in documents for m in d["modules"]}
    wrapper = modules["WhisperDecoderWrapper"]
    assert [i["shape"] for i in wrapper["inputs"] if i["kind"] == "tensor"] == [["B", "T"]]
    assert wrapper["outputs"][0]["shape"] == ["B", "T", 384], wrapper["diagnostics"]


def test_mixtrals_experts_get_the_cpu_kernels_shapes() -> None:
    """Mixtral's experts multiply with ``torch.nn.functional.grouped_mm``, whose meta kernel
    asks for bfloat16 as the CUDA kernel does; the CPU kernel takes float32. fxls showed
    "Expected inputs of BF16 type" at ``self.experts(...)`` and 4 of 12 classes with shapes.
    Eager at batch 2 and 3 (a small configuration, float32 on the CPU): the block's output
    ``(B, T, hidden)``, the head's ``(B, T, vocabulary)``, the router's ``(B·T, experts)``."""
    documents = _check(PACKAGES["transformers"] / "models/mixtral/modeling_mixtral.py")
    modules = {m["class"]: m for d in documents for m in d["modules"]}
    block = modules["MixtralSparseMoeBlock"]
    assert block["status"] == "traced", block["diagnostics"]
    assert block["outputs"][0]["shape"] == ["B", "T", 4096]
    messages = [x["message"] for m in modules.values() for x in m["diagnostics"]]
    assert not [t for t in messages if "BF16" in t], messages
    assert modules["MixtralForCausalLM"]["outputs"][0]["shape"] == ["B", "T", 32000]
    # the router is called on the flattened tokens: B*T of them (it showed 6, the example's)
    router = modules["MixtralTopKRouter"]
    assert router["inputs"][0]["shape"] == ["B*T", 4096], router["inputs"]
    assert [o["shape"] for o in router["outputs"]] == [["B*T", 8], ["B*T", 2], ["B*T", 2]]


def test_attention_processors_are_skipped_as_called_through_call() -> None:
    """diffusers' attention processors are modules with their own ``__call__`` and no
    ``forward``: skipped with that reason, not warned about as untraceable."""
    documents = _check(PACKAGES["diffusers"] / "models/attention_processor.py")
    modules = {m["class"]: m for d in documents for m in d["modules"]}
    processor = modules["IPAdapterXFormersAttnProcessor"]
    assert processor["status"] == "skipped", processor["status"]
    messages = [x["message"] for m in modules.values() for x in m["diagnostics"]]
    assert not [t for t in messages if "missing the required" in t], messages


def test_diffusers_attention_keeps_its_graph_past_the_processors_rank_check() -> None:
    """diffusers' ``Attention`` as released: its processor branches on
    ``input_ndim = hidden_states.ndim``; fxls decides the check from the input's rank while
    tracing, so the class has an FX graph (it had a run on fake tensors) and the check is
    information saying the value taken."""
    documents = _check(PACKAGES["diffusers"] / "models/attention_processor.py")
    modules = {m["class"]: m for d in documents for m in d["modules"]}
    attention = modules["Attention"]
    # the mask left at `None` (a proxy while tracing, which goes into the mask's code) is
    # fixed to its default past the decided check
    assert attention["capture"] == "fx+concrete+decided", attention["capture"]
    assert attention["outputs"][0]["shape"] == ["B", "T", 64], attention["outputs"]
    checks = [x for x in attention["diagnostics"] if x["code"] == "FX101"]
    assert checks and all(x["severity"] == "information" for x in checks), checks
    ranks = [x for x in checks if "input_ndim == 4" in x["message"]]
    assert ranks and all("`False` for these inputs" in (x.get("fix") or "") for x in ranks), checks


def test_no_unused_computation_is_reported_in_llama() -> None:
    """Every operation of Llama's blocks feeds the output: no FX302 hint. Running `forward` on
    fake tensors records a submodule's call and the operations inside it (the call gives back
    the tensor its last operation made), and a head's result may come from operations it did
    not record; neither makes an operation look unused."""
    documents = _check(PACKAGES["transformers"] / "models/llama/modeling_llama.py")
    hints = [
        (m["class"], x["line"], x["message"])
        for d in documents
        for m in d["modules"]
        for x in m["diagnostics"]
        if x["code"] == "FX302"
    ]
    hints += [(None, x["line"], x["message"]) for d in documents for x in d["diagnostics"]
              if x["code"] == "FX302"]  # fmt: skip
    assert not hints, hints


def test_a_block_of_another_file_shows_what_its_layers_read() -> None:
    """``hidden_states = resnet(hidden_states, temb)`` in diffusers' ``KDownBlock2D`` calls a
    ``ResnetBlock2D`` of ``resnet.py``: its layers are reported at that call, and each shows
    what it reads (the norm's ``Linear`` reads ``temb``, ``conv1`` the activation before it),
    not the call's arguments as written."""
    path = PACKAGES["diffusers"] / "models/unets/unet_2d_blocks.py"
    stdout = _one_class(path, "KDownBlock2D")
    rows = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[1].startswith("resnets.0."):
            rows.setdefault(parts[1], parts[3])
    assert rows["resnets.0.norm1.linear"] == "Linear(input=temb)", stdout
    assert rows["resnets.0.conv1"] == "Conv2d(input=GELU(…))", stdout
    assert rows["resnets.0.norm1"].startswith("getitem(a=Linear(…)"), stdout


def test_one_class_of_a_file_is_captured_from_the_parents_that_build_it() -> None:
    """``fxls check --class CLIPAttention``: the block is captured together with the classes
    that build and call it, as in a check of the whole file, and only it is reported (alone,
    it was built with a guessed configuration and failed with FX401, an error on released
    code)."""
    path = PACKAGES["transformers"] / "models/clip/modeling_clip.py"
    document = json.loads(_one_class(path, "CLIPAttention", "--json"))
    (attention,) = document["modules"]
    assert attention["class"] == "CLIPAttention", document["modules"]
    assert attention["status"] == "traced", attention["diagnostics"]
    whole = {m["class"]: m for m in _check(path)[0]["modules"]}["CLIPAttention"]
    assert attention["inputs"] == whole["inputs"], (attention["inputs"], whole["inputs"])
    assert attention["outputs"] == whole["outputs"]
    # built and called by the vision tower ([B, 50, 768]: 50 patches) and the text tower
    # ([B, T, 512]): the call that names more dimensions is shown
    assert attention["outputs"][0]["shape"] == ["B", "T", 512], attention["outputs"]


def test_a_base_models_failure_each_head_reaches_is_said_once() -> None:
    """A plain trace of each Llama head stops at the same line of `LlamaModel.forward` (both
    `input_ids` and `inputs_embeds` are proxies): the file shows one FX199 there naming the
    heads (in `--json`, under `LlamaModel`, whose lines hold it), not one per head; each head
    keeps its own (its hover and code lens show it)."""
    [document] = _check(PACKAGES["transformers"] / "models/llama/modeling_llama.py")
    modules = {m["class"]: m["diagnostics"] for m in document["modules"]}
    found = [x for x in modules["LlamaModel"] if x["code"] == "FX199"]
    assert len(found) == 1, modules["LlamaModel"]
    line = found[0]["line"]
    heads = [c for c, ds in modules.items()
             if c != "LlamaModel" and any(x["code"] == "FX199" and x["line"] == line for x in ds)]  # fmt: skip
    assert len(heads) >= 2, modules
    assert all(f"`{h}`" in found[0]["message"] for h in heads[:3]), (found, heads)
    assert "exactly one of input_ids or inputs_embeds" in found[0]["message"]


def test_a_multimodal_file_leaves_cpu_time_for_every_class_after_its_vision_tower() -> None:
    """GLM-Image's vision tower reads its `grid_thw` with `tolist()`. Assumed shaped like
    the image (`[B, 3, 2048, 2048]` floats), that read made one unknown number per value
    until the CPU limit, then again in each job that captured the rest: the file's budget
    went to it, and 18 of its 20 classes ended in FX510. The grid is integers `(1, 3)` now,
    and a read of thousands of values stops at once: every class is captured."""
    path = PACKAGES["transformers"] / "models/glm_image/modeling_glm_image.py"
    document = json.loads(_fxls_check("--json", "--no-compile-check", str(path), timeout=600))
    modules = {m["class"]: m for m in document["modules"]}
    assert not [c for c, m in modules.items() if m["status"] == "failed" and
                any(x["code"] in ("FX506", "FX510") for x in m["diagnostics"])], modules  # fmt: skip
    tower = modules["GlmImageVisionModel"]
    grid = next(i for i in tower["inputs"] if i["name"] == "grid_thw")
    assert (grid["shape"], grid["dtype"]) == ([1, 3], "int64"), grid
    assert len([m for m in modules.values() if m["outputs"]]) >= 4, modules


def test_classes_built_with_fewer_layers_show_the_default_configurations_parameters() -> None:
    """Llama's default configuration is built with 2 of its 32 layers: `LlamaForCausalLM` and
    `LlamaModel` (captured as its submodule) report the parameters at the default's depth
    (`default_params`: 6.74 B and 6.61 B, what `LlamaForCausalLM(LlamaConfig())` has) beside
    those of the 2-layer instance; a decoder layer, alike at any depth, reports its own."""
    [document] = _check(PACKAGES["transformers"] / "models/llama/modeling_llama.py")
    modules = {m["class"]: m for m in document["modules"]}
    head, model = modules["LlamaForCausalLM"], modules["LlamaModel"]
    assert head["default_params"] == 6_738_415_616, head["default_params"]
    assert model["default_params"] == 6_738_415_616 - 32000 * 4096, model["default_params"]
    assert head["params"] < 1_000_000_000 and model["params"] < 1_000_000_000
    assert modules["LlamaDecoderLayer"]["default_params"] is None


def test_a_multimodal_head_whose_image_path_stops_shows_its_text_path() -> None:
    """`Qwen2_5_VLForConditionalGeneration` passes `pixel_values` on to its model without
    asking, so fxls gives it an image; the vision tower then stops (it needs its grid's
    values) and the head showed nothing. It is captured with its token ids alone, says so,
    and shows its logits."""
    path = PACKAGES["transformers"] / "models/qwen2_5_vl/modeling_qwen2_5_vl.py"
    cls = "Qwen2_5_VLForConditionalGeneration"
    head = _class_entry(path, cls)
    assert head["status"] == "traced", head["diagnostics"]
    assert [i["name"] for i in head["inputs"] if i["kind"] == "tensor"] == ["input_ids"]
    assert head["outputs"][0]["shape"] == ["B", "T", 152064]


def test_a_trace_failing_again_where_a_repair_was_named_keeps_its_diagnostic() -> None:
    """BigBird-Pegasus's encoder layer fails to trace at one line in several attempts; an
    attempt whose diagnostic named a repair was kept as the one shown but never shown, and
    the next attempt there raised inside fxls: the class was `failed` with nothing said (now
    FX511 would say it). It runs on fake tensors and shows what it reached."""
    path = PACKAGES["transformers"] / "models/bigbird_pegasus/modeling_bigbird_pegasus.py"
    cls = "BigBirdPegasusEncoderLayer"
    layer = _class_entry(path, cls)
    codes = {d["code"] for d in layer["diagnostics"]}
    assert layer["status"] == "partial" and "FX511" not in codes, layer["diagnostics"]
    assert "FX101" in codes and layer["nodes"], layer["diagnostics"]


def test_a_configuration_that_refuses_a_field_read_still_builds_its_classes() -> None:
    """NeoMME's configuration raises on reading a per-layer field as one value
    (`AmbiguousGlobalPerLayerAttributeError`); fxls read every field of it while looking for
    deep stacks to build shorter, and each of the file's 12 classes stopped there (FX511,
    nothing shown). A field that refuses its read is left out, and the embeddings show
    theirs."""
    path = PACKAGES["transformers"] / "models/neomme/modeling_neomme.py"
    cls = "NeoMMEEmbeddings"
    embeddings = _class_entry(path, cls)
    codes = {d["code"] for d in embeddings["diagnostics"]}
    assert embeddings["status"] == "traced" and "FX511" not in codes, embeddings["diagnostics"]
    assert embeddings["outputs"][0]["shape"] == ["B", "T", 1024], embeddings["outputs"]


def test_flux_is_built_with_two_blocks_per_stack_and_gets_its_position_ids() -> None:
    """Flux's transformer stopped at `timestep.to(...)`; given its `timestep` it stopped again
    on its position ids, and its 19 + 38 blocks at width 3072 ran past the job's CPU limit. It
    is built with 2 blocks per stack (its parameters those of its defaults: 11.9 B), gets
    `img_ids` / `txt_ids` one row per token and one column per rotary axis, the text's
    tokens `S` apart from the image's `T` (both were `T`, and the blocks showed `2*T`), and
    shows `[B, T, 64]` as an eager run does (`bench/eager_check.py`, two sizes)."""
    path = PACKAGES["diffusers"] / "models/transformers/transformer_flux.py"
    model = _class_entry(path, "FluxTransformer2DModel")
    assert model["status"] == "traced", model["diagnostics"]
    assert model["outputs"][0]["shape"] == ["B", "T", 64]
    shapes = {i["name"]: i["shape"] for i in model["inputs"] if i["kind"] == "tensor"}
    assert shapes["img_ids"] == ["T", 3] and shapes["txt_ids"] == ["S", 3], shapes
    assert shapes["encoder_hidden_states"] == ["B", "S", 4096], shapes
    assert shapes["timestep"] == ["B"] and shapes["pooled_projections"] == ["B", 768], shapes
    assert (model["params"], model["default_params"]) == (1_016_741_440, 11_891_178_560)
    assert any("num_layers=19, num_single_layers=38" in n for n in model["notes"]), model

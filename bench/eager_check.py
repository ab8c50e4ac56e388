"""Shown shapes against eager runs: every class output and every submodule call fxls shows.

For each file, the classes are captured as ``fxls check`` does (through the worker); then, in
this process, the file runs again and each class with shapes is built again the way its
result says it was built (``Rebuild``: its own expression or recipe, or inside the parent
that built it), on the meta device, and called eagerly (on the CPU with random values when
a kernel has no meta implementation and the model is small) with inputs made from the inputs
fxls showed, at two sizes of their named dimensions: the example sizes of the capture, and another
(``B`` one larger, every other name doubled; ``B`` one larger alone when that does not run).
Forward hooks record what each submodule returned. Every tensor shape fxls shows for the
class's outputs and for its ``call_module`` nodes, with the names put in, must be what eager
gave; a node fxls marked as holding for the example sizes only is checked at those only.

Per class: ``ok`` (with the number of shapes compared), ``MISMATCH`` (what fxls showed, what
eager gave, at which sizes), or why it was not checked (no shapes, an input fxls shows only as
text, the rebuild or the eager run failed).

Usage: .venv/bin/python bench/eager_check.py FILE_OR_MODULE_PATH... [--json out.json]
       (a path under site-packages runs as its module, like ``fxls check``)
This runs the files' code unsandboxed in this process: use it on code you trust.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fxls.analysis import parse
from fxls.engine.analyze import AnalysisRequest, EngineOptions, analyze, build_requests, capture_job
from fxls.engine.workerclient import WorkerClient
from fxls.protocol.model import CaptureResult, Limits, ModuleResult, Value
from fxls.worker.capture.document import execute, prepare
from fxls.worker.compile.run import origin, root_result
from fxls.worker.rewrite.base import Original
from fxls.worker.rewrite.verify import Rebuild, size_value


def flat_tensors(value: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """The tensors of an output in the order fxls lists them (dict-like results by field)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 4 and isinstance(value, (tuple, list)):
        for item in value:
            yield from flat_tensors(item, depth + 1)
    elif depth < 4 and isinstance(value, dict):
        for item in value.values():
            yield from flat_tensors(item, depth + 1)


def shown_shapes(values: list[Value]) -> list[list[Any]]:
    return [list(v.shape or []) for v in values if v.kind == "tensor"]


def expected(shape: list[Any], sizes: dict[str, int]) -> list[int] | None:
    """``shape`` at ``sizes``; a dimension named as a whole in ``sizes`` (``S + T``: a sum a
    parent passed, one name in the child) is that size."""
    out = []
    for dim in shape:
        if isinstance(dim, int):
            value: int | None = dim
        else:
            value = sizes[dim] if dim in sizes else size_value(str(dim), sizes)
        if value is None:
            return None
        out.append(value)
    return out


def make_input(value: Value, sizes: dict[str, int]) -> tuple[bool, Any]:
    """(made, the argument) for one shown input; made is False for a value fxls shows only
    as text."""
    if value.kind == "tensor":
        shape = expected(list(value.shape or []), sizes)
        dtype = getattr(torch, value.dtype or "float32", None)
        if shape is None or not isinstance(dtype, torch.dtype):
            return False, None
        return True, torch.zeros(shape, dtype=dtype, device="meta")
    text = value.text or ""
    if value.kind == "none":
        return True, None
    if value.kind == "bool" and text in ("True", "False"):
        return True, text == "True"
    if value.kind == "int":
        number = size_value(text, sizes)
        return (number is not None), number
    if value.kind == "float":
        try:
            return True, float(text)
        except ValueError:
            return False, None
    return structured(text, sizes)


def structured(text: str, sizes: dict[str, int]) -> tuple[bool, Any]:
    """A value fxls shows as text made of tensors (``([1, T, 128], [1, T, 128])``: a list of
    sizes is a float32 tensor, a tuple stays a tuple, names and numbers are sizes; a quoted
    string is itself, ``{}`` an empty dict)."""
    import ast

    def build(node: ast.AST) -> Any:
        if isinstance(node, ast.Tuple):
            return tuple(build(e) for e in node.elts)
        if isinstance(node, ast.List) and all(not isinstance(e, ast.List) for e in node.elts):
            shape = [size_value(ast.unparse(e), sizes) for e in node.elts]
            if any(d is None for d in shape):
                raise ValueError("a size fxls does not give")
            return torch.zeros(shape, device="meta")
        if isinstance(node, ast.List):
            return [build(e) for e in node.elts]
        if isinstance(node, ast.Dict) and not node.keys:
            return {}  # an empty mapping the block writes into (Gemma 4's shared_kv_states)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        number = size_value(ast.unparse(node), sizes)
        if number is None:
            raise ValueError("not a size")
        return number

    try:
        return True, build(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError):
        return False, None


def base_sizes(sizes: dict[str, int]) -> dict[str, int]:
    """The example sizes by name; a dimension a parent passed as a product (``4*B``: 8) gives
    its name's size (``B``: 2)."""
    out = {}
    for key, size in sizes.items():
        product = re.fullmatch(r"(\d+)\*([A-Za-z_]\w*)", key)
        if product is not None:
            out.setdefault(product[2], size // int(product[1]))
        else:
            out[key] = size
    return out


def size_choices(example: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    if not example:
        return [("example", {})]
    other = {name: size + 1 if name == "B" else size * 2 for name, size in example.items()}
    batch = {name: size + 1 if name == "B" else size for name, size in example.items()}
    out = [("example", dict(example)), ("other", other)]
    if "B" in example and batch != other:
        out.append(("batch", batch))
    return out


MAX_CPU_PARAMS = 300_000_000


def on_cpu(
    rebuild: Rebuild, original: Original, args: dict[str, Any]
) -> tuple[Any, dict[str, list[Any]]]:
    """``run_eager`` on the CPU, with random inputs of the same sizes (token ids below the
    smallest embedding's size), when the module has at most ``MAX_CPU_PARAMS`` parameters."""
    meta = rebuild.build(original.doc, "meta")
    if sum(p.numel() for p in meta.parameters()) > MAX_CPU_PARAMS:
        raise ValueError("too large for the CPU")
    torch.manual_seed(0)
    module = rebuild.build(original.doc, "cpu")
    module.eval()  # not chained: a class's own `train` may return None (LeViT's attention)
    sizes = [m.num_embeddings for m in module.modules() if isinstance(m, nn.Embedding)]
    high = min(sizes) if sizes else 2

    def real(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.dtype.is_floating_point:
                return torch.randn(value.shape, dtype=value.dtype)
            if value.dtype == torch.bool:
                return torch.ones(value.shape, dtype=torch.bool)
            return torch.randint(0, high, value.shape, dtype=value.dtype)
        if isinstance(value, (tuple, list)):
            return type(value)(real(v) for v in value)
        return value

    return run_eager(module, {name: real(value) for name, value in args.items()})


def run_eager(module: nn.Module, args: dict[str, Any]) -> tuple[Any, dict[str, list[Any]]]:
    calls: dict[str, list[Any]] = {}
    handles = []
    for path, sub in module.named_modules():
        if not path:
            continue

        def hook(_m: nn.Module, _a: Any, out: Any, path: str = path) -> None:
            calls.setdefault(path, []).append([list(t.shape) for t in flat_tensors(out)])

        handles.append(sub.register_forward_hook(hook))
    try:
        with torch.no_grad():
            out = module(**args)
    finally:
        for handle in handles:
            handle.remove()
    return out, calls


def check_class(
    original: Original, mod: ModuleResult, by_name: dict[str, ModuleResult]
) -> dict[str, Any]:
    if not any(v.kind == "tensor" for v in mod.outputs):
        return {"result": "no shapes"}
    found = origin(mod, by_name)
    if found is None:
        return {"result": "not rebuilt: fxls does not say how it was built"}
    root, path = found
    rebuild = Rebuild(original, mod.name, root, path, mod.params, mod.params)
    example_only = set(mod.example_nodes)
    failures: list[str] = []
    checked: list[str] = []
    compared = 0
    mismatches: list[str] = []
    for label, sizes in size_choices(base_sizes(dict(mod.input_sizes))):
        if label == "batch" and "other" in checked:
            break
        args: dict[str, Any] = {}
        for given in mod.inputs:
            made, arg = make_input(given.value, sizes)
            if not made:
                return {"result": f"not checked: input `{given.name}` is shown as text"}
            args[given.name] = arg
        try:
            module = rebuild.build(original.doc, "meta")
            module.eval()
            out, calls = run_eager(module, args)
        except Exception as exc:
            # a kernel without a meta implementation, `.item()`: on the CPU when small
            failures.append(f"{label} {sizes}: {type(exc).__name__}: {str(exc)[:160]}")
            try:
                out, calls = on_cpu(rebuild, original, args)
            except Exception as cpu:
                failures.append(f"{label} on the CPU: {type(cpu).__name__}: {str(cpu)[:160]}")
                continue
        checked.append(label)
        pairs = []
        output = next((n for n in mod.nodes if n.op == "output"), None)
        if label == "example" or output is None or output.name not in example_only:
            shown = shown_shapes(mod.outputs)
            pairs.append(("output", shown, [list(t.shape) for t in flat_tensors(out)]))
        seen: dict[str, int] = {}
        for node in mod.nodes:
            if node.op != "call_module" or not node.outputs:
                continue
            index = seen.get(node.target, 0)
            seen[node.target] = index + 1
            if label != "example" and node.name in example_only:
                continue
            runs = calls.get(node.target, [])
            if index < len(runs):
                pairs.append((f"{node.target}#{index}", shown_shapes(node.outputs), runs[index]))
        for where, shown, eager in pairs:
            if len(shown) != len(eager) and where != "output":
                continue
            for position, (shape, got) in enumerate(zip(shown, eager)):
                want = expected(shape, sizes)
                if want is None:
                    continue
                compared += 1
                if want != got:
                    mismatches.append(
                        f"{where}[{position}] shown {shape} = {want} at {sizes}, eager {got}"
                    )
            if where == "output" and len(shown) != len(eager):
                mismatches.append(f"output: {len(shown)} tensors shown, eager gave {len(eager)}")
    if mismatches:
        return {"result": "MISMATCH", "checked": checked, "details": mismatches[:8]}
    if not checked:
        return {"result": "not checked: the eager run failed", "details": failures[:4]}
    return {"result": "ok", "checked": checked, "shapes": compared, "failed": failures[:2]}


def module_root(path: Path) -> str | None:
    for parent in path.parents:
        if parent.name == "site-packages":
            return str(parent)
    return None


async def check_file(client: WorkerClient, path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    options = EngineOptions(limits=Limits(timeout_s=300, cpu_s=300, memory_mb=8192))
    # a package's file runs from the folder its package is in: a module named as its
    # package (``x_transformers/x_transformers.py``) would shadow the package from its own one
    request = AnalysisRequest(str(path), text, import_root=module_root(path) or str(path.parent))
    analysis = await analyze(client, request, options=options)
    modules = [m for m in analysis.modules if m.status in ("traced", "partial")]
    job = capture_job(str(path), text, build_requests(parse(text).classes), options)
    if job.module:  # imported already by an earlier file of the run: run it again
        sys.modules.pop(job.module, None)
    doc = prepare(job)
    try:
        execute(doc)
    except BaseException as exc:
        return {"file": str(path), "error": f"does not run here: {type(exc).__name__}: {exc}"}
    with_how = [m for m in modules if m.constructed is not None]
    original = Original(doc, CaptureResult(modules=[root_result(m) for m in with_how]))
    by_name = {m.name: m for m in with_how}
    classes = {}
    for mod in modules:
        try:
            classes[mod.name] = check_class(original, mod, by_name)
        except Exception as exc:
            classes[mod.name] = {"result": f"not checked: {type(exc).__name__}: {exc}"[:200]}
    return {"file": str(path), "classes": classes}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    client = WorkerClient()
    await client.start()
    reports = []
    try:
        for path in args.paths:
            report = await check_file(client, path.resolve())
            reports.append(report)
            print(f"## {report['file']}")
            if "error" in report:
                print("  ", report["error"])
                continue
            for name, found in report["classes"].items():
                line = f"  {name}: {found['result']}"
                if found.get("shapes") is not None:
                    line += f" ({found['shapes']} shapes at {', '.join(found['checked'])})"
                print(line)
                for detail in found.get("details", []) if found["result"] != "ok" else []:
                    print(f"      {detail}")
            sys.stdout.flush()
    finally:
        await client.close()
    counts: dict[str, int] = {}
    for report in reports:
        for found in report.get("classes", {}).values():
            key = found["result"].split(":")[0]
            counts[key] = counts.get(key, 0) + 1
    print("totals:", json.dumps(counts))
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    asyncio.run(main())

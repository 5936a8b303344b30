"""Building tiny ONNX models inline for tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import perfseer
from perfseer.features.perfgraph import PerfGraph

_NP_TO_ONNX = {np.dtype("float32"): TensorProto.FLOAT, np.dtype("int64"): TensorProto.INT64,
               np.dtype("float16"): TensorProto.FLOAT16, np.dtype("bool"): TensorProto.BOOL,
               np.dtype("int32"): TensorProto.INT32}


def make_model(nodes, inputs: dict, outputs: list[str], initializers: dict | None = None,
               opset: int = 20, value_info: dict | None = None) -> onnx.ModelProto:
    """A model from ``onnx.helper`` nodes.

    Args:
        nodes: ``helper.make_node(...)`` results.
        inputs: name -> shape (float32) or ``(shape, numpy dtype)``; a shape may hold strings
            (symbolic dims).
        outputs: names of graph outputs (their shapes are inferred).
        initializers: name -> numpy array.
        value_info: name -> shape, declared shapes of intermediate tensors (float32).
    """
    def vi(name, spec):
        shape, dtype = (spec if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], type)
                        else (spec, np.float32))
        return helper.make_tensor_value_info(name, _NP_TO_ONNX[np.dtype(dtype)], list(shape))

    graph = helper.make_graph(
        nodes, "test",
        [vi(n, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, 0, None) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in (initializers or {}).items()],
        value_info=[vi(n, s) for n, s in (value_info or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def one_node(op_type: str, inputs: dict, initializers: dict | None = None, n_outputs: int = 1,
             opset: int = 20, input_order: list[str] | None = None, batch=None, **attrs) -> PerfGraph:
    """Extract the PerfGraph of a single ``op_type`` node fed by ``inputs`` and ``initializers``.

    The node's inputs are ``input_order`` (default: the graph inputs, then the initializers, in
    the order given); use ``""`` for an absent optional input.
    """
    initializers = initializers or {}
    order = input_order if input_order is not None else [*inputs, *initializers]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, order, outs, name="node", **attrs)
    return perfseer.extract(make_model([node], inputs, outs, initializers, opset), batch=batch)


def feature(pg: PerfGraph, name: str, node: int = 0) -> float:
    """A node feature by schema name."""
    from perfseer.features.schema import NODE_FEATURES

    return float(pg.x[node, NODE_FEATURES.index(name)])


# -- shared by the bad-input, input-format and CLI tests --------------------------------------------

def conv_model(batch="N", hw: int = 8, with_fc: bool = False) -> onnx.ModelProto:
    """``x (batch, 3, hw, hw) -> Conv 3x3 pad 1 (4 channels, bias) -> Relu``, optionally followed by
    ``GlobalAveragePool -> Flatten -> Gemm (4 -> 10)``.  No shape tensors: every initializer is a weight.

    MACs per sample: ``4 * hw * hw * 27`` for the conv, plus ``40`` for the Gemm.
    """
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu")]
    inits = {"w": np.ones((4, 3, 3, 3), np.float32), "b": np.ones(4, np.float32)}
    out = "r"
    if with_fc:
        nodes += [helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
                  helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
                  helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1, name="fc")]
        inits.update(fw=np.ones((10, 4), np.float32), fb=np.ones(10, np.float32))
        out = "y"
    return make_model(nodes, {"x": (batch, 3, hw, hw)}, [out], inits)


def assert_user_error(message: str, *names: str) -> None:
    """``message`` is a one-line PerfseerError text naming the problem (every one of ``names``)
    and the fix."""
    assert "\n" not in message and "\r" not in message, f"error message is not one line: {message!r}"
    problem, sep, fix = message.partition("; fix: ")
    assert sep and problem.strip() and fix.strip(), f"error message has no '; fix: ...': {message!r}"
    for name in names:
        assert name in message, f"error message does not mention {name!r}: {message!r}"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``perfseer ARGV`` in-process: ``(exit code, stdout, stderr)``.  An exception escaping
    ``main`` (a traceback for the user) fails the calling test."""
    from perfseer.cli.main import main

    capsys.readouterr()  # drop anything printed before
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse's own usage errors
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_cli_error(capsys, argv, *names: str) -> str:
    """``perfseer ARGV`` fails with exit code 2 and one ``perfseer graph: error: ...; fix: ...``
    line on stderr naming ``names``, nothing on stdout, no traceback.  Returns the message."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, f"exit code {code}, stderr: {err!r}"
    assert "Traceback" not in err and "Traceback" not in out
    assert out == "", f"unexpected stdout: {out!r}"
    assert err.endswith("\n") and err.count("\n") == 1, f"stderr is not one line: {err!r}"
    prefix = f"perfseer {argv[0]}: error: "
    assert err.startswith(prefix), err
    message = err[len(prefix):].rstrip("\n")
    assert_user_error(message, *names)
    return message


def build_or_crash(task):
    """A :func:`perfseer.data.dataset.build_pair` whose worker process dies on a model named
    ``*crash*``: for the worker-crash tests (importable by name in a spawned process)."""
    import os

    from perfseer.data.dataset import build_pair

    if "crash" in task.model:
        os._exit(3)
    return build_pair(task)


NB201_OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")


def nb201_arch(rng) -> str:
    """A random NAS-Bench-201 cell reference (``nb201:|...|``) drawn from ``rng`` (a ``random.Random``)."""
    o = [rng.choice(NB201_OPS) for _ in range(6)]
    return f"nb201:|{o[0]}~0|+|{o[1]}~0|{o[2]}~1|+|{o[3]}~0|{o[4]}~1|{o[5]}~2|"


def load_script(name: str, folder: str = "scripts"):
    """``FOLDER/NAME.py`` of the repository imported as a module (the scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

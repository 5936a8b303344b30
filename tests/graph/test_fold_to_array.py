"""perfseer.graph.fold.to_array is onnx.numpy_helper.to_array: the same dtype, shape, values and
read-only flag for every element type, stored as raw bytes or in the typed fields, and the same
error for data that disagree with the dims."""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from perfseer.graph.fold import _RAW_DTYPES, to_array

VALUES = {
    np.float32: [1.5, -2.25, 3e-8, np.inf], np.float64: [1.0 / 3, -0.0, 7.0, 1e300], np.float16: [0.5, -1.0, 2.0, 3.0],
    np.int64: [1, -2, 2**40, 7], np.int32: [1, -2, 3, 2**30], np.int16: [1, -2, 3, 4], np.int8: [1, -2, 3, 4],
    np.uint8: [1, 2, 250, 4], np.uint16: [1, 2, 3, 60000], np.uint32: [1, 2, 3, 2**31], np.uint64: [1, 2, 3, 2**63],
    np.bool_: [True, False, True, True],
}


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape and a.flags.writeable == b.flags.writeable
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("np_type", list(VALUES))
@pytest.mark.parametrize("shape", [(4,), (2, 2), (1, 4, 1)])
def test_raw_data_is_read_as_numpy_helper_reads_it(np_type, shape):
    t = numpy_helper.from_array(np.array(VALUES[np_type], dtype=np_type).reshape(shape), "t")
    assert t.HasField("raw_data") and t.data_type in _RAW_DTYPES
    _same(to_array(t), numpy_helper.to_array(t))


def test_scalars_typed_fields_and_other_types_go_through_numpy_helper():
    cases = [numpy_helper.from_array(np.array(3.5, np.float32), "s"),
             helper.make_tensor("f", onnx.TensorProto.FLOAT, [2], [1.0, 2.0]),  # float_data, not raw
             helper.make_tensor("i", onnx.TensorProto.INT64, [3], [1, 2, 3]),
             helper.make_tensor("b", onnx.TensorProto.BFLOAT16, [2], [1.0, 2.0]),
             helper.make_tensor("c", onnx.TensorProto.STRING, [2], [b"a", b"b"])]
    for t in cases:
        _same(to_array(t), numpy_helper.to_array(t))


def test_data_that_disagree_with_the_dims_fail_the_same_way():
    t = numpy_helper.from_array(np.arange(6, dtype=np.float32), "t")
    del t.dims[:]
    t.dims.extend([4, 2])
    with pytest.raises(ValueError):
        numpy_helper.to_array(t)
    with pytest.raises(ValueError):
        to_array(t)

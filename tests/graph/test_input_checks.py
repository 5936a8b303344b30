"""An input shape that contradicts the model is an error naming the mismatch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import helper

import perfseer
from helpers import assert_user_error, conv_model, make_model
from perfseer.errors import ShapeError


@pytest.mark.parametrize("shape,expected", [
    ((8, 8, 3), "give it channels first, 3x8x8"),  # channels-last on an NCHW model
    ((1, 8, 8), "3 channels first, e.g. 3x8x8"),  # one channel on a 3-channel conv
])
def test_onnx_input_with_the_wrong_channels(shape, expected):
    with pytest.raises(ShapeError) as info:
        perfseer.extract(conv_model(), input_shape=shape)
    msg = str(info.value)
    assert_user_error(msg, "x".join(map(str, shape)), f"{shape[0]} channels on axis 1", "Conv node 'conv'",
                      "expects 3", expected)


def test_module_input_with_the_wrong_channels():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
    with pytest.raises(ShapeError) as info:
        perfseer.extract(model, input_shape=(32, 32, 3))
    assert_user_error(str(info.value), "32x32x3", "weight [8, 3, 3, 3]", "expects 3", "channels first, 3x32x32")


@pytest.mark.parametrize("shape,axes,example", [((3, 32), "2 axes", "3x32x32"), ((32,), "1 axis", "Cx32x32")])
def test_module_input_with_too_few_axes(shape, axes, example):
    """A 2-D convolution reads channels x height x width: a shape short of an axis says so, with a
    shape that would do (not a channel count read off the wrong axis)."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
    with pytest.raises(ShapeError) as info:
        perfseer.extract(model, input_shape=shape)
    assert_user_error(str(info.value), f"input shape {'x'.join(map(str, shape))} has {axes}", "convolution",
                      "reads 3 (channels x height x width", f"e.g. {example}")


def test_grouped_conv_channels_are_accepted():
    # group 3 with weight (6, 1, 3, 3) reads 3 channels: no error; 6 x 6 x 6 outputs, 9 MACs each
    conv = helper.make_node("Conv", ["x", "w"], ["y"], group=3, name="conv")
    pg = perfseer.extract(make_model([conv], {"x": (1, 3, 8, 8)}, ["y"], {"w": np.zeros((6, 1, 3, 3), np.float32)}))
    assert pg.macs == 6 * 6 * 6 * 9

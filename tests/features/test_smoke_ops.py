import numpy as np

from helpers import feature, one_node


def test_conv_hand_computed():
    # X (1, 3, 8, 8), W (4, 3, 3, 3), pad 1, stride 1 -> Y (1, 4, 8, 8)
    pg = one_node("Conv", {"x": (1, 3, 8, 8)}, {"w": np.zeros((4, 3, 3, 3), np.float32)},
                  kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    macs = 1 * 4 * 8 * 8 * 3 * 3 * 3
    assert feature(pg, "macs") == macs
    assert feature(pg, "flops") == 2 * macs
    assert feature(pg, "kernel_h") == 3 and feature(pg, "pad_h") == 2
    assert feature(pg, "memory_access_bytes") == (3 * 64 + 4 * 27 + 4 * 64) * 4
    assert pg.params == 4 * 27

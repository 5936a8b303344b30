"""Functions the sandbox tests run in child processes (importable by name, as the sandbox needs)."""

import os
import time

from perfseer.errors import ShapeError


def hog(mb: int) -> int:
    return len(bytearray(mb * 2**20))


def sleepy(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def abort() -> None:
    os.abort()


def refuse() -> None:
    raise ShapeError("shape 0 is not allowed", "use a positive size")


def add(a: int, b: int) -> int:
    return a + b

import pytest

from perfseer.errors import PerfseerError
from perfseer.serve.sandbox import Busy, Limits, Sandbox, SandboxError

from serve import sandbox_jobs as jobs


@pytest.fixture(scope="module")
def box():
    # preload nothing heavy: these jobs need no torch
    return Sandbox(Limits(time_s=20, memory_mb=1024), max_jobs=1, preload=["perfseer.errors"])


def test_a_result_comes_back(box):
    assert box.run(jobs.add, 2, 3) == 5


def test_memory_past_the_limit_is_an_error_not_a_dead_caller(box):
    with pytest.raises(SandboxError) as e:
        box.run(jobs.hog, 2048)
    assert e.value.kind == "memory"
    assert box.run(jobs.add, 1, 1) == 2  # the sandbox still works


def test_a_job_past_its_time_is_stopped():
    box = Sandbox(Limits(time_s=0.5, memory_mb=1024), preload=["perfseer.errors"])
    with pytest.raises(SandboxError) as e:
        box.run(jobs.sleepy, 30)
    assert e.value.kind == "timeout"
    assert box.stats["timeouts"] == 1


def test_an_abort_in_the_child_is_reported_as_a_crash(box):
    with pytest.raises(SandboxError) as e:
        box.run(jobs.abort)
    assert e.value.kind == "crash" and "exit code" in str(e.value)


def test_a_perfseer_error_keeps_its_message_and_type_name(box):
    with pytest.raises(PerfseerError) as e:
        box.run(jobs.refuse)
    assert e.value.problem == "shape 0 is not allowed" and e.value.fix == "use a positive size"
    assert e.value.kind == "ShapeError"


def test_no_free_slot_within_the_wait_is_busy():
    box = Sandbox(Limits(time_s=5, memory_mb=1024), max_jobs=1, preload=["perfseer.errors"])
    box._slots.acquire()  # another request holds the only slot
    with pytest.raises(Busy):
        box.run(jobs.add, 1, 2, wait_s=0.05)

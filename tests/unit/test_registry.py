"""The in-flight registry: exact selection by id, and waiting that ends when requests are released."""

import asyncio

import pytest

from engine_plugins.core.registry import InFlightRegistry

pytestmark = pytest.mark.anyio


async def test_select_is_exact_and_release_wakes_waiters():
    registry = InFlightRegistry()
    registry.add("ep-1", "job-1")
    registry.add("ep-2", "job-10")
    registry.add("ep-3", "job-1-b", dispatched=True)
    assert [e.rid for e in registry.select(["job-1"])] == ["ep-1"]
    assert len(registry.select(None)) == 3 and registry.held() == 2
    entries = registry.select(["job-1", "job-10"])
    waiter = asyncio.ensure_future(registry.wait_released(entries, timeout_s=30))
    registry.release("ep-1")
    await asyncio.sleep(0)
    assert not waiter.done()
    registry.release("ep-2")
    assert await waiter is True
    assert len(registry) == 1


async def test_wait_times_out_and_add_keeps_an_existing_entry():
    registry = InFlightRegistry()
    first = registry.add("ep-1", "job-1")
    assert registry.add("ep-1") is first and first.request_id == "job-1"
    assert await registry.wait_released([first], timeout_s=0.01) is False
    registry.release("ep-1")
    registry.release("ep-1")  # releasing twice is harmless
    assert await registry.wait_released([first], timeout_s=0.01) is True


async def test_held_and_admission_counts_follow_dispatch_and_release():
    # The registry keeps these counts as entries change instead of walking them on each read.
    registry = InFlightRegistry()
    a = registry.add("a")
    registry.add("b", dispatched=True)
    registry.generation = 1
    c = registry.add("c")
    assert registry.held() == 2 and registry.by_admission() == {0: 2, 1: 1}
    a.dispatched = True
    a.dispatched = True  # setting it again changes nothing
    assert registry.held() == 1
    registry.release("c")
    registry.release("c")  # a second release of the same id is harmless
    assert registry.held() == 0 and registry.by_admission() == {0: 2}
    c.dispatched = False  # a released entry no longer counts
    registry.release("a")
    registry.release("b")
    assert registry.held() == 0 and registry.by_admission() == {} and len(registry) == 0

"""``LoopConnection``'s timers and loop hand-off (cassandra/loop_reactor.py),
without a node: the driver arms a timer per request (its timeout) from the
loop, and from its executor threads for control-connection requests."""

from __future__ import annotations

import asyncio
import threading
import weakref

from fanline_shared.cassandra.loop_reactor import LoopConnection


async def test_a_timer_fires_on_the_loop_unless_cancelled_first() -> None:
    conn = LoopConnection.for_loop(asyncio.get_running_loop())
    fired: list[int] = []
    conn.create_timer(0.01, lambda: fired.append(threading.get_ident()))
    conn.create_timer(0.01, lambda: fired.append(-1)).cancel()
    await asyncio.sleep(0.1)
    assert fired == [threading.get_ident()]


async def test_timers_armed_and_cancelled_from_another_thread() -> None:
    conn = LoopConnection.for_loop(asyncio.get_running_loop())
    fired: list[str] = []

    def elsewhere() -> None:
        assert not conn.on_loop()
        conn.create_timer(0.01, lambda: fired.append("armed" if conn.on_loop() else "wrong thread"))
        late = conn.create_timer(0.05, lambda: fired.append("should have been cancelled"))
        late.cancel()

    await asyncio.to_thread(elsewhere)
    await asyncio.sleep(0.2)
    assert fired == ["armed"]


async def test_a_cancelled_timer_lets_go_of_its_callback() -> None:
    """The callback is a bound method of the driver's request: a cancelled
    timer must not keep the finished request alive until its deadline."""
    conn = LoopConnection.for_loop(asyncio.get_running_loop())

    class Request:
        def on_timeout(self) -> None:
            raise AssertionError("cancelled")

    request = Request()
    timer = conn.create_timer(30.0, request.on_timeout)
    timer.cancel()
    ref = weakref.ref(request)
    del request
    assert ref() is None


def test_a_closed_loop_takes_no_more_work() -> None:
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(_class_of_running_loop())
    loop.close()
    ran: list[int] = []
    assert conn.call_in_loop(ran.append, 1) is False  # not on its thread, and it is closed
    assert ran == []


async def _class_of_running_loop() -> type[LoopConnection]:
    cls = LoopConnection.for_loop(asyncio.get_running_loop())
    cls.loop_thread = -1  # as if this thread were another: exercise the hand-off
    return cls

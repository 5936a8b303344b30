"""Request-body limits in front of the application (a pure ASGI wrapper).

Starlette parses a multipart upload into temporary files before the route runs, so a limit checked
in the route comes after the whole body is on disk.  :class:`BodyLimit` counts the body while it is
received: a request that declares a larger ``Content-Length`` is refused before anything is read,
and one that streams past its limit (chunked, or lying about its length) is cut off there (the
application sees the end of its body, never the bytes past the limit) and answered 413.
"""

from __future__ import annotations

import asyncio
import json


class BodyLimit:
    """Refuse request bodies over ``limit_for(path)`` bytes with a 413 JSON error.

    Args:
        app: the ASGI application behind.
        limit_for: ``path -> bytes`` allowed for a request body to that path.
        message: ``limit -> (problem, fix)`` of the refusal.
    """

    def __init__(self, app, limit_for, message, timeout_s: float | None = None):
        self.app, self.limit_for, self.message, self.timeout_s = app, limit_for, message, timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = int(self.limit_for(scope.get("path", "")))
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await self._refuse(send, limit)
        state = {"seen": 0, "over": False, "started": False, "status": 413}

        async def limited_receive():
            if state["over"]:
                return {"type": "http.disconnect"}
            try:
                message = await asyncio.wait_for(receive(), self.timeout_s) if self.timeout_s else await receive()
            except asyncio.TimeoutError:  # a body that stalls: the connection is not held
                state["over"], state["status"] = True, 408
                return {"type": "http.disconnect"}
            if message.get("type") == "http.request":
                state["seen"] += len(message.get("body", b""))
                if state["seen"] > limit:
                    state["over"] = True  # the bytes past the limit are dropped here, never handed on
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message):
            if state["over"]:  # whatever the application answers to a cut-off body, the client gets the 413
                if message.get("type") == "http.response.start" and not state["started"]:
                    state["started"] = True
                    await self._refuse(send, limit, state["status"])
                return
            state["started"] = state["started"] or message.get("type") == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not state["over"]:
                raise
        if state["over"] and not state["started"]:
            await self._refuse(send, limit, state["status"])

    async def _refuse(self, send, limit: int, status: int = 413) -> None:
        if status == 408:
            kind, problem, fix = ("RequestTimeout", f"the request body stalled for more than {self.timeout_s:g} s",
                                  "send the body without pauses, or retry")
        else:
            kind, (problem, fix) = "PayloadTooLarge", self.message(limit)
        body = json.dumps({"error": {"type": kind, "message": problem, "fix": fix}}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

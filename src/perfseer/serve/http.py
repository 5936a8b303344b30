"""uvicorn's HTTP/1.1 protocol with a header timeout.

uvicorn closes an idle keep-alive connection, but a client that sends part of a request's headers
and then nothing holds its connection for ever (one slow-loris client per connection slot).
:func:`header_timeout_protocol` gives the protocol class ``perfseer serve`` runs: a connection
whose request headers are not complete ``seconds`` after it opened (or after its previous
response) is closed.  The body has its own limit (:class:`perfseer.serve.limits.BodyLimit`).
"""

from __future__ import annotations

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def header_timeout_protocol(seconds: float) -> type:
    """An :class:`H11Protocol` subclass that closes a connection whose headers stall ``seconds``."""

    class HeaderTimeoutProtocol(H11Protocol):
        header_timeout_s = float(seconds)
        _header_task = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers get the same time

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_task = self.loop.call_later(self.header_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._header_task is not None:
                self._header_task.cancel()
                self._header_task = None

        def _expired(self) -> None:
            self._header_task = None
            # IDLE: no complete request line and headers yet (a request being answered is past it)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol

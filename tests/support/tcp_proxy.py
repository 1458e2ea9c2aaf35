"""The tests' one TCP proxy: faults injected between brokers (or a store client) and S3.

Listens on 127.0.0.1, port 0, and forwards every connection to ``target``.
Its ``mode`` says what happens to traffic, now and on every open connection:

* ``pass``: forward both ways;
* ``delay``: forward, each chunk after ``delay_ms``;
* ``drop``: close every new connection at once (and the open ones);
* ``reset``: abort every connection with a TCP reset (SO_LINGER 0);
* ``cut``: forward ``cut_after_bytes`` of each upstream request, then close;
* ``blackhole``: accept and read, never forward and never answer (a silent
  dead peer: the case that needs deadlines).

:meth:`mute_next` loses the *answer* of the next requests whose first line
matches (the request itself is applied): an ambiguous write. :meth:`lose_next_answers`
resets the connection instead of delivering the next answers, whatever the
request: the client sees a dropped connection after the server applied it.

Only the test process uses it; every socket it opens is closed by :meth:`stop`.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

MODES = ("pass", "delay", "drop", "reset", "cut", "blackhole")


@dataclass
class _Pipe:
    client: socket.socket
    upstream: socket.socket | None
    sent_up_bytes: int = 0
    closed: bool = False
    muted: bool = False


@dataclass
class FaultProxy:
    target: tuple[str, int]
    mode: str = "pass"
    delay_ms: int = 0
    cut_after_bytes: int = 0
    _listener: socket.socket | None = None
    _pipes: list[_Pipe] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    connections: int = 0
    _mute: tuple[bytes, bytes, int] = (b"", b"", 0)
    muted_requests: int = 0
    _answers_to_lose: int = 0

    def mute_next(self, method: bytes, path_part: bytes, count: int = 1) -> None:
        """Forward the next ``count`` requests ``method ...path_part...`` but lose their answers."""
        with self._lock:
            self._mute = (method, path_part, count)

    def lose_next_answers(self, count: int) -> None:
        """Reset the connection of each of the next ``count`` answers instead of sending it."""
        with self._lock:
            self._answers_to_lose = count

    def _take_one_loss(self) -> bool:
        with self._lock:
            if self._answers_to_lose <= 0:
                return False
            self._answers_to_lose -= 1
            return True

    @classmethod
    def start(cls, target: tuple[str, int]) -> FaultProxy:
        proxy = cls(target)
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(512)
        listener.settimeout(0.2)
        proxy._listener = listener
        thread = threading.Thread(target=proxy._accept_loop, name="fault-proxy", daemon=True)
        thread.start()
        proxy._threads.append(thread)
        return proxy

    @property
    def port(self) -> int:
        assert self._listener is not None
        return int(self._listener.getsockname()[1])

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, mode: str, *, delay_ms: int = 0, cut_after_bytes: int = 0) -> None:
        """Switch the fault; ``drop`` and ``reset`` also end every open connection now."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not accepted; accepted: {', '.join(MODES)}")
        self.mode, self.delay_ms, self.cut_after_bytes = mode, delay_ms, cut_after_bytes
        if mode in ("drop", "reset"):
            with self._lock:
                pipes = list(self._pipes)
            for pipe in pipes:
                self._close(pipe, reset=mode == "reset")

    def heal(self) -> None:
        self.set("pass")

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            pipes = list(self._pipes)
        for pipe in pipes:
            self._close(pipe, reset=False)
        for thread in self._threads:
            thread.join(timeout=5)
        if self._listener is not None:
            self._listener.close()

    # -- internals -----------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            if self.mode == "drop":
                client.close()
                continue
            if self.mode == "reset":
                _abort(client)
                continue
            upstream = None
            if self.mode != "blackhole":
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                except OSError:
                    client.close()
                    continue
            pipe = _Pipe(client, upstream)
            with self._lock:
                self._pipes.append(pipe)
            thread = threading.Thread(target=self._pump, args=(pipe,), daemon=True)
            thread.start()
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _pump(self, pipe: _Pipe) -> None:
        # a selector (epoll), not select(): the test process may hold over 1024 descriptors
        with selectors.DefaultSelector() as selector:
            try:
                for sock in (pipe.client, pipe.upstream):
                    if sock is not None:
                        selector.register(sock, selectors.EVENT_READ)
                while not self._stop.is_set() and not pipe.closed:
                    for key, _ in selector.select(0.2):
                        sock = key.fileobj
                        assert isinstance(sock, socket.socket)
                        data = sock.recv(65536)
                        if not data:
                            self._close(pipe, reset=False)
                            return
                        self._forward(pipe, sock is pipe.client, data)
            except (OSError, ValueError):
                self._close(pipe, reset=False)

    def _forward(self, pipe: _Pipe, upward: bool, data: bytes) -> None:
        mode = self.mode
        if mode == "blackhole" or pipe.upstream is None:
            return  # swallowed: the peer hears nothing, ever
        if mode == "reset":
            self._close(pipe, reset=True)
            return
        if not upward and data.startswith(b"HTTP/1.1 100"):
            # an interim "100 Continue" is not the answer; the answer may share its chunk
            interim_end = data.find(b"\r\n\r\n") + 4
            if 4 <= interim_end < len(data):
                self._forward(pipe, False, data[:interim_end])
                if not pipe.closed:
                    self._forward(pipe, False, data[interim_end:])
                return
        if mode == "delay" and self.delay_ms:
            time.sleep(self.delay_ms / 1000)
        if upward and self._mute[2] > 0:
            first_line = data.split(b"\r\n", 1)[0]
            method, part, left = self._mute
            if first_line.startswith(method + b" ") and part in first_line:
                with self._lock:
                    self._mute = (method, part, left - 1)
                    self.muted_requests += 1
                pipe.muted = True
        if not upward and pipe.muted:
            return  # the request was applied; its answer is lost
        if not upward and not data.startswith(b"HTTP/1.1 100") and self._take_one_loss():
            # linger 0, then shutdown: the client sees its connection end with no answer
            with contextlib.suppress(OSError):
                pipe.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            for sock in (pipe.client, pipe.upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._close(pipe, reset=False)
            return
        if mode == "cut" and upward:
            room = self.cut_after_bytes - pipe.sent_up_bytes
            if room <= 0:
                self._close(pipe, reset=False)
                return
            data = data[:room]
        if upward:
            pipe.upstream.sendall(data)
            pipe.sent_up_bytes += len(data)
        else:
            pipe.client.sendall(data)

    def _close(self, pipe: _Pipe, *, reset: bool) -> None:
        if pipe.closed:
            return
        pipe.closed = True
        for sock in (pipe.client, pipe.upstream):
            if sock is None:
                continue
            if reset:
                _abort(sock)
            else:
                with contextlib.suppress(OSError):
                    sock.close()
        with self._lock, contextlib.suppress(ValueError):
            self._pipes.remove(pipe)


def _abort(sock: socket.socket) -> None:
    """Close with a TCP reset instead of a FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()

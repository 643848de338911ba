"""A small OpenAI-compatible chat-completions server on loopback, for tests and benchmarks.

litellm talks to it over real HTTP exactly as it would to a provider. Each request is answered
by ``handler(request_json) -> Reply``; the default answers with canned facts. Requests are kept
in ``requests`` so tests can count LLM calls.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the server sends back: a completion's text, or an HTTP error."""

    content: str = "[]"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    body: str | None = None  # raw body, overriding the completion JSON
    # send the body a byte at a time, this many seconds apart (every read of the client's
    # socket gets a byte in time); endless: a body that never ends (blanks, forever)
    drip_s: float = 0.0
    endless: bool = False


def completion_json(content: str, model: str = "test-model") -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


DEFAULT_FACTS = json.dumps(
    [
        {"content": "User is a Python developer.", "importance": 0.9},
        {"content": "User prefers async code.", "importance": 0.7},
    ]
)


def facts_answer(request: dict[str, Any]) -> Reply:
    """One fact per user line of the prompt, named after its text, so facts are checkable,
    each naming the episode it comes from, as the prompt asks."""
    prompt = request["messages"][-1]["content"]
    facts, episode = [], 0
    for line in prompt.splitlines():
        if line.startswith("------ Episode "):
            episode = int(line.split()[2])
        elif line.startswith("USER: "):
            facts.append(
                {"content": f"User said {line[6:]}", "importance": 0.7, "episode": episode}
            )
    return Reply(json.dumps(facts))


EMBEDDING_DIMENSIONS = 256
_WORD = re.compile(r"[a-z0-9]+")


def embed_text(text: str) -> list[float]:
    """A deterministic stand-in for an embedding model: hashed bag of crudely stemmed words,
    so texts sharing words are close (cosine) and others are not."""
    vector = [0.0] * EMBEDDING_DIMENSIONS
    for word in _WORD.findall(text.lower()):
        if len(word) < 3 or word in _STOP:
            continue
        for suffix in ("ing", "ed", "es", "s"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                break
        slot = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big")
        vector[slot % EMBEDDING_DIMENSIONS] += 1.0
    vector[0] += 0.01  # never all zero
    return vector


_STOP = {"the", "and", "for", "our", "how", "what", "any", "who", "with", "user", "should", "can"}


def embeddings_json(texts: list[str], model: str) -> dict[str, Any]:
    return {
        "object": "list",
        "model": model,
        "data": [
            {"object": "embedding", "index": i, "embedding": embed_text(t)}
            for i, t in enumerate(texts)
        ],
        "usage": {"prompt_tokens": 8 * len(texts), "total_tokens": 8 * len(texts)},
    }


CONTROL_PATH = "/_control"


class FakeLLM:
    """The server; start() binds 127.0.0.1 on a free port."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.handler: Callable[[dict[str, Any]], Reply] = lambda _req: Reply(DEFAULT_FACTS)
        self.after_reply: Callable[[dict[str, Any]], None] | None = None
        # embedding calls are kept apart, so LLM call counts stay what they were
        self.embedding_requests: list[dict[str, Any]] = []
        self.embedding_status = 200
        self.embedding_delay_s = 0.0
        self.embedding_drip_s = 0.0  # send the answer a byte at a time, this far apart
        # a call with a text longer than this is refused (400), as a model's context limit does
        self.embedding_max_chars: int | None = None
        # texts containing this get an all-zero vector (a model with nothing to say about them)
        self.embedding_zero_for: str | None = None
        # statuses for the next embedding calls, one each, before any of the above applies
        self.embedding_status_queue: list[int] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def api_base(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def reset(self, handler: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        with self._lock:
            self.requests.clear()
            self.embedding_requests.clear()
        self.embedding_status = 200
        self.embedding_delay_s = 0.0
        self.embedding_drip_s = 0.0
        self.embedding_max_chars = None
        self.embedding_zero_for = None
        self.embedding_status_queue = []
        self.handler = handler or (lambda _req: Reply(DEFAULT_FACTS))
        self.after_reply = None

    def reply_with(self, *replies: Reply) -> None:
        """Answer the next requests with these replies in turn (the last one repeats)."""
        queue = list(replies)

        def handler(_req: dict[str, Any]) -> Reply:
            return queue.pop(0) if len(queue) > 1 else queue[0]

        self.reset(handler)

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def start(self) -> FakeLLM:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out as two writes: with Nagle on, the body waits for the
            # client's delayed ACK of the headers (up to 40 ms a reply on loopback)
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                if self.path == CONTROL_PATH:
                    self._control(request)
                    return
                request["_path"] = self.path
                request["_authorization"] = self.headers.get("Authorization")
                if self.path.rstrip("/").endswith("/embeddings"):
                    self._embeddings(request)
                    return
                with fake._lock:
                    fake.requests.append(request)
                try:
                    reply = fake.handler(request)
                except Exception as exc:  # the handler's own failure, said to the client
                    # (a dropped connection would read as "cannot reach" in the run's error)
                    said = f"the loopback model failed: {type(exc).__name__}: {exc}"
                    reply = Reply(said, status=400)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.body is not None:
                    body = reply.body.encode()
                elif reply.status == 200:
                    body = json.dumps(
                        completion_json(reply.content, request.get("model", ""))
                    ).encode()
                else:
                    body = json.dumps(
                        {"error": {"message": reply.content, "type": "fake"}}
                    ).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    length = 1 << 40 if reply.endless else len(body)
                    self.send_header("Content-Length", str(length))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    if reply.drip_s or reply.endless:
                        self._drip(b"" if reply.endless else body, reply.drip_s or 0.1)
                    else:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout tests)
                    pass
                finally:
                    if fake.after_reply is not None:
                        fake.after_reply(request)

            def _drip(self, body: bytes, every_s: float) -> None:
                """The body a byte at a time (blanks forever if empty) until the client
                hangs up; a JSON reader skips the blanks, so they are a valid start."""
                sent = 0
                while fake._server is not None:
                    self.wfile.write(body[sent : sent + 1] if body else b" ")
                    self.wfile.flush()
                    sent += 1
                    if body and sent >= len(body):
                        return
                    time.sleep(every_s)

            def _control(self, request: dict[str, Any]) -> None:
                """A server in another process, driven by its owner: ``reset`` sets a fixed
                reply (content, delay), ``requests`` gives back the chat requests so far."""
                if request.get("reset"):
                    reply = Reply(**request["reset"])
                    fake.reset(lambda _req: reply)
                with fake._lock:
                    body = json.dumps({"requests": fake.requests}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _embeddings(self, request: dict[str, Any]) -> None:
                with fake._lock:
                    fake.embedding_requests.append(request)
                if fake.embedding_delay_s:
                    time.sleep(fake.embedding_delay_s)
                texts = request.get("input") or []
                texts = [texts] if isinstance(texts, str) else texts
                with fake._lock:
                    queued = fake.embedding_status_queue
                    status = queued.pop(0) if queued else fake.embedding_status
                longest = max(map(len, texts), default=0)
                if (
                    status == 200
                    and fake.embedding_max_chars
                    and longest > fake.embedding_max_chars
                ):
                    status = 400  # OpenAI's answer to an input over the model's context
                    message = (
                        f"This model's maximum context length is {fake.embedding_max_chars} "
                        f"tokens, however you requested {longest} tokens. Please reduce your "
                        "prompt."
                    )
                    data = {"error": {"message": message, "type": "invalid_request_error"}}
                elif status == 200:
                    data = embeddings_json(texts, request.get("model", ""))
                    for item, text in zip(data["data"], texts, strict=True):
                        if fake.embedding_zero_for and fake.embedding_zero_for in text:
                            item["embedding"] = [0.0] * EMBEDDING_DIMENSIONS
                elif status == 400:
                    message = "dimensions: this model does not support 77 dimensions"
                    data = {"error": {"message": message, "type": "invalid_request_error"}}
                elif status == 422:
                    data = {"error": {"message": "input could not be processed", "type": "fake"}}
                else:
                    data = {"error": {"message": "embedding model overloaded", "type": "fake"}}
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    if fake.embedding_drip_s:
                        self._drip(body, fake.embedding_drip_s)
                    else:
                        self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class FakeLLMProcess:
    """The server in a process of its own, as a provider is: its work does not count in the
    client's CPU time or compete for its interpreter. ``reset`` sets a fixed reply."""

    def __init__(self) -> None:
        import subprocess
        import sys

        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.fake_llm"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.startswith("http://"):
            self._process.kill()
            raise RuntimeError(f"the fake LLM process did not start: {line!r}")
        self.api_base = line.strip()

    def _control(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        import urllib.request

        url = self.api_base.removesuffix("/v1") + CONTROL_PATH
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return list(json.load(response)["requests"])

    def reset(self, content: str, delay_s: float = 0.0) -> None:
        self._control({"reset": {"content": content, "delay_s": delay_s}})

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._control({})

    @property
    def calls(self) -> int:
        return len(self.requests)

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=30)


if __name__ == "__main__":  # the server of a FakeLLMProcess: its address, then serve
    server = FakeLLM().start()
    print(server.api_base, flush=True)
    threading.Event().wait()

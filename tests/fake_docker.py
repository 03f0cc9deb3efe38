"""A stand-in Docker engine on a unix socket: just the API calls the CN platform makes, with a
"container" that prints a harness-like line every ``LINE_S`` until it is removed. No container
runs: the Docker SDK, the runner and its signal handling are the real ones, so CN's interrupt paths
can be exercised quickly, many times, on a machine without an engine."""

from __future__ import annotations

import json
import os
import re
import socketserver
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

LINE_S = 0.05
API = "1.43"


class Engine:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.containers: dict[str, dict[str, Any]] = {}  # id -> {name, labels, removed: Event}
        self.events: list[str] = []

    def find(self, ref: str) -> dict[str, Any] | None:
        with self.lock:
            for cid, c in self.containers.items():
                if ref in (cid, c["name"]) or cid.startswith(ref):
                    return c
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def address_string(self) -> str:
        return "unix"

    def _send(self, code: int, body: Any = None) -> None:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if not isinstance(body, bytes) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Api-Version", API)
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _route(self) -> tuple[str, dict[str, list[str]]]:
        url = urlsplit(self.path)
        return re.sub(r"^/v[0-9.]+", "", url.path), parse_qs(url.query)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null") if length else None

    def do_HEAD(self) -> None:
        self._send(200, b"OK")

    def do_GET(self) -> None:
        path, query = self._route()
        engine = self.server.engine
        if path == "/_ping":
            return self._send(200, b"OK")
        if path == "/version":
            return self._send(200, {"Version": "99.0.0-fake", "ApiVersion": API, "MinAPIVersion": "1.24",
                                    "Components": []})
        if path == "/info":
            return self._send(200, {"NCPU": len(online()), "ServerVersion": "99.0.0-fake", "CgroupDriver": "none"})
        m = re.fullmatch(r"/images/(.+)/json", path)
        if m:
            return self._send(200, {"Id": "sha256:" + "f" * 64, "RepoTags": [m.group(1)],
                                    "Config": {"Labels": {"dlvirt.image": m.group(1)}}})
        m = re.fullmatch(r"/containers/([^/]+)/json", path)
        if m:
            c = engine.find(m.group(1))
            if c is None:
                return self._send(404, {"message": f"No such container: {m.group(1)}"})
            return self._send(200, {"Id": c["id"], "Name": "/" + c["name"], "Config": {"Labels": c["labels"],
                                                                                       "Tty": False},
                                    "State": {"Running": not c["removed"].is_set(), "OOMKilled": False,
                                              "ExitCode": 137}})
        m = re.fullmatch(r"/containers/([^/]+)/logs", path)
        if m:
            c = engine.find(m.group(1))
            if c is None:
                return self._send(404, {"message": "No such container"})
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.docker.multiplexed-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            rep = 0
            try:
                while not c["removed"].wait(LINE_S if c["started"].is_set() else 0.01):
                    if not c["started"].is_set():
                        continue
                    line = f"[harness] fake/{c['name']}: rep {rep}: 0.05 s\n".encode()
                    self._chunk(struct.pack(">BxxxL", 1, len(line)) + line)
                    rep += 1
                self._chunk(b"")
            except OSError:
                pass
            return None
        if path == "/containers/json":
            with engine.lock:
                listed = [{"Id": c["id"], "Names": ["/" + c["name"]], "Labels": c["labels"]}
                          for c in engine.containers.values()]
            return self._send(200, listed)
        return self._send(404, {"message": f"fake engine: no GET {path}"})

    def do_POST(self) -> None:
        path, query = self._route()
        engine = self.server.engine
        body = self._body()
        if path == "/containers/create":
            name = query.get("name", [""])[0]
            cid = os.urandom(32).hex()
            with engine.lock:
                engine.containers[cid] = {"id": cid, "name": name, "labels": (body or {}).get("Labels") or {},
                                          "removed": threading.Event(), "started": threading.Event()}
                engine.events.append(f"create {name}")
            time.sleep(self.server.create_delay_s)
            return self._send(201, {"Id": cid, "Warnings": []})
        m = re.fullmatch(r"/containers/([^/]+)/(start|wait|kill)", path)
        if m:
            c = engine.find(m.group(1))
            if c is None:
                return self._send(404, {"message": "No such container"})
            if m.group(2) == "start":
                c["started"].set()
                return self._send(204)
            if m.group(2) == "kill":
                c["removed"].set()
                return self._send(204)
            # wait: the header now, the status when the container is gone (as dockerd does)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            c["removed"].wait()
            try:
                self._chunk(json.dumps({"StatusCode": 137, "Error": None}).encode())
                self._chunk(b"")
            except OSError:
                pass
            return None
        return self._send(404, {"message": f"fake engine: no POST {path}"})

    def do_DELETE(self) -> None:
        path, query = self._route()
        engine = self.server.engine
        m = re.fullmatch(r"/containers/([^/]+)", path)
        c = engine.find(m.group(1)) if m else None
        if c is None:
            return self._send(404, {"message": "No such container"})
        c["removed"].set()
        with engine.lock:
            engine.containers.pop(c["id"], None)
            engine.events.append(f"remove {c['name']}")
        return self._send(204)


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, create_delay_s: float = 0.0) -> None:
        self.engine = Engine()
        self.create_delay_s = create_delay_s
        super().__init__(path, Handler)


def online() -> tuple[int, ...]:
    from dlvirt.platforms.cn import online_cpus

    return online_cpus()


def serve(path: Path, create_delay_s: float = 0.0) -> Server:
    """A fake engine answering on ``path`` from a daemon thread (``.shutdown()`` stops it)."""
    server = Server(str(path), create_delay_s)
    threading.Thread(target=server.serve_forever, name="fake-dockerd", daemon=True).start()
    return server


if __name__ == "__main__":
    srv = Server(sys.argv[1])
    srv.serve_forever()

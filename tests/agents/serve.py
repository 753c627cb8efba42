"""Shared by the test agents: serve an ASGI app on a free loopback port.

Prints "listening <port>" on stdout (flushed) once the socket is listening
(connections then wait in the backlog until uvicorn accepts them), which is
what the Rust test harness waits for before it talks to the agent.
"""

import socket

import uvicorn


def serve(app) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"listening {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).run(sockets=[sock])

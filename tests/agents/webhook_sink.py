"""An analytics webhook receiver for the tests.

It refuses the first delivery with HTTP 500 (so the gateway must retry), then
accepts, printing "DELIVERED <header> <json body>" for each accepted event.
Prints "listening <port>" on stdout.
"""

import json
import sys

from serve import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

attempts = {"n": 0}


async def hook(request: Request):
    attempts["n"] += 1
    body = await request.json()
    if attempts["n"] == 1:
        print("REFUSED", flush=True)
        return PlainTextResponse("try again", status_code=500)
    print(f"DELIVERED {request.headers.get('x-key', '-')} {json.dumps(body)}", flush=True)
    return PlainTextResponse("ok")


def main() -> None:
    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    serve(app)


if __name__ == "__main__":
    sys.exit(main())

"""An MCP server built with the official MCP Python SDK (MCPServer), serving MCP's Streamable
HTTP transport at /mcp, for toolplane to import: tools with plain and pydantic-model parameters
(whose schemas use $defs and $ref), structured and text answers, a tool that fails, one
that adds a tool at run time and tells its client the tool list changed, and one that notes
its cancellation; `add` is annotated read-only and `distance` idempotent. `shout` sends a log
message (`notifications/message`, at warning) as it runs; over stdio, the server says so on
its standard error as it starts.

Run by tests/mcp_import.rs:

    python python_mcp_server.py PORT [BEARER_TOKEN] [--tls-cert F --tls-key F [--tls-client-ca F]]
    python python_mcp_server.py stdio

With BEARER_TOKEN, a request without `Authorization: Bearer BEARER_TOKEN` is answered 401.
With --tls-cert and --tls-key, it serves HTTPS with that certificate; with --tls-client-ca
too, it accepts only clients presenting a certificate that CA signed.
With `stdio`, it speaks MCP over its standard input and output instead.
"""

import argparse
import os
import ssl
import sys

import anyio
import uvicorn

from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("python-tools")


class Point(BaseModel):
    x: float
    y: float


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(idempotentHint=True, readOnlyHint=False))
def distance(start: Point, end: Point) -> float:
    """The distance between two points."""
    return ((start.x - end.x) ** 2 + (start.y - end.y) ** 2) ** 0.5


@server.tool(structured_output=False)
async def shout(text: str, ctx: Context) -> str:
    """The text in capitals, as plain text."""
    await ctx.warning(f"shouting {text!r}", logger_name="shout")
    return text.upper()


@server.tool()
def fail(why: str) -> str:
    """Always fails, saying why."""
    raise ValueError(why)


@server.tool()
def getenv(name: str) -> str:
    """The value of the environment variable NAME in the server's process ("" when unset)."""
    return os.environ.get(name, "")


@server.tool()
async def wait(seconds: float, marker: str) -> str:
    """Waits SECONDS; a call cancelled first writes the file MARKER."""
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        with open(marker, "w") as written:
            written.write("cancelled")
        raise
    return "waited"


@server.tool()
def quit() -> str:
    """Ends the server's process at once, as a crash would."""
    os._exit(3)


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool called NAME that answers its own name, and tells the client the tool list
    changed."""
    server.add_tool(lambda: name, name=name, description="added at run time")
    await ctx.session.send_tool_list_changed()
    return "grown"


def require_token(app, token):
    """The ASGI app `app`, answering 401 to HTTP requests without the bearer token."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": b"a bearer token is required"})
            return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port")
    parser.add_argument("token", nargs="?")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--tls-client-ca")
    args = parser.parse_args()
    if args.port == "stdio":
        print("python-tools: serving MCP over stdio", file=sys.stderr, flush=True)
        server.run("stdio")
        sys.exit(0)
    app = server.streamable_http_app(host="127.0.0.1")
    if args.token:
        app = require_token(app, args.token)
    tls = {}
    if args.tls_cert:
        tls = {"ssl_certfile": args.tls_cert, "ssl_keyfile": args.tls_key}
    if args.tls_client_ca:
        tls.update(ssl_ca_certs=args.tls_client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
    uvicorn.run(app, host="127.0.0.1", port=int(args.port), **tls)

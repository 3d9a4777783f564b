"""An MCP server built with the official MCP Python SDK (MCPServer), serving MCP's Streamable
HTTP transport at /mcp, for toolplane to import: tools with plain and pydantic-model parameters
(whose schemas use $defs and $ref), structured and text answers, a tool that fails, one
that adds a tool at run time and tells its client the tool list changed, and one that notes
its cancellation; `add` is annotated read-only and `distance` idempotent. `shout` sends a log
message (`notifications/message`, at warning) as it runs; over stdio, the server says so on
its standard error as it starts.

Run by the tests of MCP imports (tests/mcp_import*.rs, mcp_gateway.rs, json_log.rs):

    python python_mcp_server.py PORT [BEARER_TOKEN] [--tls-cert F --tls-key F [--tls-client-ca F]]
    python python_mcp_server.py PORT --oauth-client ID:SECRET [--token-lifetime SECONDS]
        [--resource-metadata-path PATH] [--required-scope S]... [--tool-scope TOOL=S]...
        [--withheld-scope S]... [--refused-scope S]... [--client-public-key FILE]
    python python_mcp_server.py stdio

With --large-answers (with any of the above), it also offers `zeros`, answering a list of COUNT
zeros (0.9 MB of JSON for 450,000, 4.95 MB as the protobuf Value InvokeTool answers with), as
structured content and the same JSON as one text block.

With --exponential-schema (with any of the above), it also offers `nested_filter`, whose input
schema refers twice to itself under a property, so that validating an input n levels deep
evaluates 2^n subschemas: a tool toolplane leaves out of the import.

With BEARER_TOKEN, a request without `Authorization: Bearer BEARER_TOKEN` is answered 401; with
--token-file FILE, one without the token FILE holds as the request comes (a token rotated).
With --oauth-client, it takes only OAuth access tokens, as the SDK's resource server does it
(protected resource metadata, RFC 9728, and a 401 with a challenge); it is also their
authorization server, issuer /issuer (metadata, RFC 8414, and a token endpoint granting client
credentials to client ID with SECRET, sent with HTTP Basic or in the form, for its own URL as
the RFC 8707 resource). Tokens live SECONDS (60 by default). Two more tools then say how many
tokens were issued and refused (`oauth_counts`) and revoke every token (`revoke_tokens`). With
--resource-metadata-path PATH too, the protected resource metadata is served at PATH only (not
at its well-known location), and the 401 challenges name it there. With --required-scope S
(repeatable), a token must have scope S (else 403 insufficient_scope), the metadata names S in
`scopes_supported`, and the token endpoint grants only the scopes named so (or by
--tool-scope). With --tool-scope TOOL=S (repeatable), a call of tool TOOL with a token without
scope S is answered 403 insufficient_scope naming S alone (the challenge MCP's step-up
authorization answers). The token endpoint refuses to grant a scope named by --refused-scope
(invalid_scope), and leaves one named by --withheld-scope out of the tokens it grants (as
RFC 6749 lets it, saying so in the answer's `scope`). With --client-public-key FILE, the client
may also authenticate with a JWT assertion (private_key_jwt, RFC 7523) signed with ES256 by
the key whose public half FILE holds; FILE is read at each token request.
With --tls-cert and --tls-key, it serves HTTPS with that certificate; with --tls-client-ca
too, it accepts only clients presenting a certificate that CA signed.
With --list-twice NAME, its tool list holds tool NAME twice (as pages of a list that changed
between them can). With --endless-pages same|new, every page of its tool list names a next page: the
same cursor every time (a cursor loop), or a new one; it counts the pages it was asked for,
which tool `pages_listed` answers. With --freezable-listing, it also offers `freeze_listing`,
after which its process leaves every tools/list request unanswered (as a server stuck in its
listing would), and `listing_frozen`, which says whether it does. With --slow-delete SECONDS,
it answers a DELETE (a client ending its session) SECONDS late, writing `python-tools:
answering a DELETE at TIME` (seconds since the epoch) to its standard error as it begins to.
With `stdio`, it speaks MCP over its standard input and output instead.
"""

import argparse
import base64
import json
import os
import secrets
import socket
import ssl
import sys
import time

import anyio
import jwt
import uvicorn

from pydantic import BaseModel

from starlette.requests import Request
from starlette.responses import JSONResponse

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp import types
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
    """Waits SECONDS, having written the file MARKER.started; a call cancelled first writes
    the file MARKER."""
    with open(marker + ".started", "w") as started:
        started.write("started")
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
    """The ASGI app `app`, answering 401 to HTTP requests without the bearer token `token()`
    gives as each request comes."""

    async def guarded(scope, receive, send):
        expected = f"Bearer {token()}".encode()
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": b"a bearer token is required"})
            return
        await app(scope, receive, send)

    return guarded


def slow_delete(app, seconds):
    """The ASGI app `app`, answering a DELETE (a client ending its session) `seconds` late,
    saying on standard error when it begins to answer (the time, in seconds since the epoch),
    so that a test can tell whether the client waited for the answer."""

    async def delayed(scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "DELETE":
            await anyio.sleep(seconds)
            print(f"python-tools: answering a DELETE at {time.time():.6f}", file=sys.stderr,
                  flush=True)
        await app(scope, receive, send)

    return delayed


class TokenIssuer:
    """The authorization server's side of --oauth-client: grants client credentials, and
    checks the tokens it issued (the SDK's TokenVerifier)."""

    def __init__(self, base_url, client_id, client_secret, lifetime, scopes, options):
        # An issuer with a path, as realms of one authorization server have: its metadata is
        # not where a client looking at the MCP server's own URL would find it.
        self.issuer = f"{base_url}/issuer"
        self.resource = f"{base_url}/mcp"
        self.client = (client_id, client_secret)
        self.lifetime = lifetime
        self.scopes = scopes + [scope for _, _, scope in
                                (pair.partition("=") for pair in options.tool_scope)]
        self.withheld = options.withheld_scope
        self.refused_scopes = options.refused_scope
        self.public_key_file = options.client_public_key
        self.expiry = {}
        self.granted = {}
        self.issued = 0
        self.refused = 0

    async def verify_token(self, token):
        expiry = self.expiry.get(token)
        if expiry is None or expiry <= time.time():
            self.refused += 1
            return None
        return AccessToken(token=token, client_id=self.client[0], scopes=self.granted[token],
                           expires_at=int(expiry), resource=self.resource)

    async def metadata(self, request: Request):
        return JSONResponse({
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"]
            + (["private_key_jwt"] if self.public_key_file else []),
            "token_endpoint_auth_signing_alg_values_supported": ["ES256"],
            "response_types_supported": ["token"],
        })

    async def token(self, request: Request):
        form = await request.form()
        client = (form.get("client_id"), form.get("client_secret"))
        basic = request.headers.get("authorization", "")
        if basic.startswith("Basic "):
            client_id, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
            client = (client_id, secret)
        if form.get("client_assertion") and self.public_key_file:
            client = self.client if self.asserted(form) else None
        if client != self.client:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if form.get("grant_type") != "client_credentials":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        if form.get("resource") != self.resource:
            return JSONResponse({"error": "invalid_target",
                                 "error_description": f"not {form.get('resource')!r}"},
                                status_code=400)
        asked = (form.get("scope") or "").split()
        if any(scope not in self.scopes or scope in self.refused_scopes for scope in asked):
            return JSONResponse({"error": "invalid_scope"}, status_code=400)
        granted = [scope for scope in asked if scope not in self.withheld]
        token = secrets.token_urlsafe(24)
        self.expiry[token] = time.time() + self.lifetime
        self.granted[token] = granted
        self.issued += 1
        return JSONResponse({"access_token": token, "token_type": "Bearer",
                             "expires_in": self.lifetime, "scope": " ".join(granted)})

    def asserted(self, form):
        """Whether the form's client assertion is a JWT for this token endpoint, from the
        client, signed by the key in the public key file (read now)."""
        if form.get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer":
            return False
        with open(self.public_key_file) as file:
            key = file.read()
        try:
            claims = jwt.decode(form["client_assertion"], key, algorithms=["ES256"],
                                audience=[f"{self.issuer}/token", self.issuer],
                                options={"require": ["exp", "iss", "sub"]})
        except jwt.PyJWTError:
            return False
        return claims["iss"] == claims["sub"] == self.client[0]

    def scope_guard(self, app, tool_scopes):
        """The ASGI app `app`, answering a call of a tool of `tool_scopes` (tool: scope) made
        with a token without its scope 403 insufficient_scope, naming that scope only."""
        challenge_metadata = f"{self.resource.removesuffix('/mcp')}/.well-known/oauth-protected-resource/mcp"

        async def guarded(scope, receive, send):
            if scope["type"] != "http" or scope["method"] != "POST":
                return await app(scope, receive, send)
            body, more = b"", True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            try:
                request = json.loads(body)
            except ValueError:
                request = None
            tool = (request.get("params") or {}).get("name") \
                if isinstance(request, dict) and request.get("method") == "tools/call" else None
            authorization = dict(scope["headers"]).get(b"authorization", b"").decode()
            token = authorization.removeprefix("Bearer ")
            needed = tool_scopes.get(tool)
            if needed and token in self.granted and needed not in self.granted[token]:
                challenge = (f'Bearer error="insufficient_scope", scope="{needed}", '
                             f'resource_metadata="{challenge_metadata}"')
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"www-authenticate", challenge.encode()),
                                        (b"content-type", b"application/json")]})
                await send({"type": "http.response.body",
                            "body": b'{"error": "insufficient_scope"}'})
                return
            replayed = False

            async def replay():
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            await app(scope, replay, send)

        return guarded


def take_oauth_tokens(port, options):
    """Makes the server take only the tokens a TokenIssuer on `port` issues to the client
    `options` name, with the scopes they require (which its metadata names, and which a token
    must have); returns the issuer."""
    client_id, _, client_secret = options.oauth_client.partition(":")
    scopes = options.required_scope
    issuer = TokenIssuer(f"http://127.0.0.1:{port}", client_id, client_secret,
                         options.token_lifetime, scopes, options)
    # The SDK takes these when the server is made; the server is made, with its tools, above.
    server.settings.auth = AuthSettings(issuer_url=issuer.issuer,
                                        resource_server_url=issuer.resource,
                                        required_scopes=scopes or None,
                                        validate_token_resource=True)
    server._token_verifier = issuer
    server.custom_route("/.well-known/oauth-authorization-server/issuer", ["GET"])(issuer.metadata)
    server.custom_route("/issuer/token", ["POST"])(issuer.token)

    def oauth_counts() -> dict[str, int]:
        """How many access tokens were issued, and how many requests' tokens were refused."""
        return {"issued": issuer.issued, "refused": issuer.refused}

    def revoke_tokens() -> str:
        """Revokes every access token issued."""
        issuer.expiry.clear()
        return "revoked"

    server.add_tool(oauth_counts)
    server.add_tool(revoke_tokens)
    return issuer


def move_resource_metadata(app, path):
    """The ASGI app `app`, with its protected resource metadata served at `path` instead of
    its well-known location, and its 401 challenges naming `path`."""
    well_known = "/.well-known/oauth-protected-resource/mcp"

    async def moved(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == well_known:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["type"] == "http" and scope["path"] == path:
            scope = dict(scope, path=well_known, raw_path=well_known.encode())

        async def naming_path(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=[
                    (name, value.replace(well_known.encode(), path.encode())
                     if name.lower() == b"www-authenticate" else value)
                    for name, value in message["headers"]])
            await send(message)

        await app(scope, receive, naming_path)

    return moved


def add_exponential_tool():
    """Adds `nested_filter`, its schema set by hand (the SDK derives one from the signature)."""

    def nested_filter(where: dict) -> str:
        return "never called: toolplane does not import this tool"

    server.add_tool(nested_filter, description="a filter whose schema doubles at every level")
    twice = [{"$ref": "#/$defs/filter"}, {"$ref": "#/$defs/filter"}]
    server._tool_manager.get_tool("nested_filter").parameters = {
        "type": "object",
        "properties": {"where": {"$ref": "#/$defs/filter"}},
        "$defs": {"filter": {"type": "object", "properties": {"and": {"anyOf": twice}}}},
    }


def add_zeros_tool():
    """Adds `zeros`, answering as many zeros as asked for."""

    def zeros(count: int) -> list[int]:
        """COUNT zeros."""
        # Answered whole, with its JSON as the one text block, as MCP's structured answers are:
        # returned as a list, the SDK makes a text block of each zero (450,000 pydantic objects,
        # about 10 s here, longer than the tests' calls wait on a busy machine).
        answer = {"result": [0] * count}
        text = types.TextContent(type="text", text=json.dumps(answer, separators=(",", ":")))
        return types.CallToolResult(content=[text], structured_content=answer)

    server.add_tool(zeros)


def list_twice(name):
    """Makes the tool list hold tool `name` a second time, at its end."""
    manager = server._tool_manager
    listed = manager.list_tools
    manager.list_tools = lambda: listed() + [manager.get_tool(name)]


def endless_pages(cursors):
    """Makes every page of the tool list name a next page (the same one, or a new one each
    time: `cursors` is `same` or `new`), and adds `pages_listed`."""
    asked = {"pages": 0}

    def pages_listed() -> int:
        """How many pages of the tool list were asked for."""
        return asked["pages"]

    server.add_tool(pages_listed)

    async def list_page(ctx, params):
        asked["pages"] += 1
        cursor = "again" if cursors == "same" else f"page-{asked['pages']}"
        return types.ListToolsResult(tools=await server.list_tools(), next_cursor=cursor)

    server._lowlevel_server.add_request_handler("tools/list", types.PaginatedRequestParams, list_page)


def freezable_listing():
    """Adds `freeze_listing`, after which tools/list requests go unanswered, and
    `listing_frozen`."""
    frozen = {"now": False}

    def freeze_listing() -> str:
        """Leaves every later tools/list request of this process unanswered."""
        frozen["now"] = True
        return "frozen"

    def listing_frozen() -> bool:
        """Whether this process leaves tools/list requests unanswered."""
        return frozen["now"]

    server.add_tool(freeze_listing)
    server.add_tool(listing_frozen)

    async def list_page(ctx, params):
        if frozen["now"]:
            await anyio.sleep_forever()
        return types.ListToolsResult(tools=await server.list_tools())

    server._lowlevel_server.add_request_handler("tools/list", types.PaginatedRequestParams, list_page)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port")
    parser.add_argument("token", nargs="?")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--tls-client-ca")
    parser.add_argument("--oauth-client")
    parser.add_argument("--token-lifetime", type=int, default=60)
    parser.add_argument("--resource-metadata-path")
    parser.add_argument("--required-scope", action="append", default=[])
    parser.add_argument("--tool-scope", action="append", default=[])
    parser.add_argument("--withheld-scope", action="append", default=[])
    parser.add_argument("--refused-scope", action="append", default=[])
    parser.add_argument("--client-public-key")
    parser.add_argument("--exponential-schema", action="store_true")
    parser.add_argument("--large-answers", action="store_true")
    parser.add_argument("--list-twice")
    parser.add_argument("--endless-pages", choices=["same", "new"])
    parser.add_argument("--freezable-listing", action="store_true")
    parser.add_argument("--slow-delete", type=float)
    parser.add_argument("--token-file")
    args = parser.parse_args()
    if args.endless_pages:
        endless_pages(args.endless_pages)
    if args.freezable_listing:
        freezable_listing()
    if args.list_twice:
        list_twice(args.list_twice)
    if args.exponential_schema:
        add_exponential_tool()
    if args.large_answers:
        add_zeros_tool()
    if args.port == "stdio":
        print("python-tools: serving MCP over stdio", file=sys.stderr, flush=True)
        server.run("stdio")
        sys.exit(0)
    # Bound here, so the port is known before the app (whose OAuth metadata names it) is made.
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(args.port)))
    issuer = None
    if args.oauth_client:
        issuer = take_oauth_tokens(listener.getsockname()[1], args)
    app = server.streamable_http_app(host="127.0.0.1")
    if args.tool_scope:
        app = issuer.scope_guard(app, dict(pair.split("=", 1) for pair in args.tool_scope))
    if args.resource_metadata_path:
        app = move_resource_metadata(app, args.resource_metadata_path)
    if args.token:
        app = require_token(app, lambda: args.token)
    if args.token_file:
        app = require_token(app, lambda: open(args.token_file).read().strip())
    if args.slow_delete:
        app = slow_delete(app, args.slow_delete)
    tls = {}
    if args.tls_cert:
        tls = {"ssl_certfile": args.tls_cert, "ssl_keyfile": args.tls_key}
    if args.tls_client_ca:
        tls.update(ssl_ca_certs=args.tls_client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
    # Uvicorn does not say where it listens on a socket it is given; connections queue from here.
    listener.listen(128)
    scheme = "https" if tls else "http"
    print(f"INFO:     Uvicorn running on {scheme}://127.0.0.1:{listener.getsockname()[1]}",
          file=sys.stderr, flush=True)
    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", **tls)).run(sockets=[listener])

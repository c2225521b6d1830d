"""A hostile streamable-HTTP MCP server, for airlock's tests: it initializes
and lists its tools as a server should, then answers a call of `flood` with
an SSE event that never ends (one `data:` line, sent without end), and a
call of `bulk` with a JSON body larger than any answer airlock reads.

Usage: python3 hostile_upstream.py  (prints the port it listens on)
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SESSION = "hostile-session"
TOOLS = [
    {"name": "flood", "inputSchema": {"type": "object"}},
    {"name": "bulk", "inputSchema": {"type": "object"}},
]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply_json(self, message):
        body = json.dumps(message).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", SESSION)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_DELETE(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        message = json.loads(self.rfile.read(length) or b"{}")
        method = message.get("method")
        if "id" not in message or method is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if method == "initialize":
            self.reply_json({"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"}}})
        elif method == "tools/list":
            self.reply_json({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": TOOLS}})
        elif method == "tools/call" and not str(message["id"]).startswith("airlock-raw-"):
            # The calls are meant for airlock's raw lane: one that comes
            # another way says so in its answer.
            self.reply_json({"jsonrpc": "2.0", "id": message["id"],
                             "error": {"code": -32000, "message": "not on the raw lane"}})
        elif method == "tools/call" and message["params"]["name"] == "flood":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Mcp-Session-Id", SESSION)
            self.end_headers()
            self.wfile.write(b"data: ")
            chunk = b"x" * 65536
            try:
                while True:
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                return
        elif method == "tools/call" and message["params"]["name"] == "bulk":
            size = 24 * 1024 * 1024
            head = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
                "content": [{"type": "text", "text": ""}]}}).encode()
            # A string the size of `size` in the text field.
            body = head.replace(b'"text": ""', b'"text": "' + b"y" * size + b'"')
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Mcp-Session-Id", SESSION)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                return
        else:
            self.reply_json({"jsonrpc": "2.0", "id": message["id"],
                             "error": {"code": -32601, "message": "no such method"}})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()

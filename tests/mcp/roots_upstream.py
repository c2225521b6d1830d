"""An MCP server over stdio, for airlock's tests: its one tool, `roots`,
asks the client for its roots (`roots/list`) while the call runs and
answers with their URIs, one per line ("none" when there are none).

Usage: python roots_upstream.py  (with the Python mcp SDK installed)
"""

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("roots")


@server.tool()
async def roots(ctx: Context) -> str:
    """The client's roots, asked for now."""
    listed = await ctx.session.list_roots()
    return "\n".join(str(root.uri) for root in listed.roots) or "none"


if __name__ == "__main__":
    server.run()

"""The MCP tool facade (spec "MCP tool facade", docs/mcp.md): JSON-RPC 2.0 at /mcp."""

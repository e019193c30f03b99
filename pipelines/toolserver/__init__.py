"""A Model Context Protocol tool server over the warehouse (``freetime mcp serve|stdio``).

Modules: :mod:`.snapshot` (the read side that never stands in a writer's way), :mod:`.sqlsafe`
(the read-only SQL tool), :mod:`.queries` (what each tool reads), :mod:`.auth` (API key and
OAuth bearer tokens) and :mod:`.server` (the MCP server built on the official SDK).
"""

"""Route blueprints: thin handlers that parse, send a message, await the reply, render."""

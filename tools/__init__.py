"""Development tools: not shipped in the wheel."""

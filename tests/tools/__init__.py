"""Tests of clawdesk/tools/: the built-in tools, the jail, MCP, the tool-call format and the attack findings."""

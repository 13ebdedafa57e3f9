"""The memory tool of the Anthropic API (``memory_20250818``) backed by the ledger: a file
under ``/memories`` is a memory of the subject, every command that changes files becomes
events, ``delete`` is an erasure. ``paths`` holds the path rules, ``files`` how files map
to memories, ``plan`` what a command does (no I/O), ``render`` what the model reads back,
``service`` the tool over the gateway, ``adapter`` the anthropic SDK's memory tool class
over the Python client. Nothing is imported here: the adapter needs only the client's
dependencies and ``anthropic``."""
